/** The sandbox account the lab-journal tests send as, and its requests to an in-process demo app. */
import type { App } from './app.js';
import type { LabEntry } from './lab-journal.js';

export const SANDBOX = 'sk_lab_abcdefgh12345678';
export const ACCOUNT = 'acct_lab_abcdefgh12345678';

/**
 * Requests to `app` as the sandbox account: a charge of `amount` (default `defaultAmount`) with or without a key,
 * a GET (as another API key if given), and the lab history.
 */
export function sandboxClient(app: App, defaultAmount: number) {
  const request = (
    key: string | null,
    headers: Record<string, string> = {},
    amount = defaultAmount,
    source = 'tok_visa',
  ): Request =>
    new Request('http://127.0.0.1/v1/charges', {
      method: 'POST',
      headers: {
        authorization: `Bearer ${SANDBOX}`,
        'content-type': 'application/json',
        ...(key === null ? {} : { 'idempotency-key': key }),
        ...headers,
      },
      body: JSON.stringify({ amount, source }),
    });
  const charge = (key: string | null, headers: Record<string, string> = {}, amount?: number, source?: string) =>
    app(request(key, headers, amount, source));
  const get = async <T>(path: string, apiKey = SANDBOX) =>
    (await (
      await app(new Request(`http://127.0.0.1${path}`, { headers: { authorization: `Bearer ${apiKey}` } }))
    ).json()) as T;
  const history = () => get<{ entries: LabEntry[]; charges: Array<{ id: string; status: string }> }>('/v1/lab/history');
  return { request, charge, get, history };
}
