/**
 * The lab's start-up marking and Reset, against real demo processes on one SQLite file (issue 28, third review): a
 * second process that cannot take the port marks nothing, so a request the first one is running is never told as
 * interrupted; and Reset waits for the account's running requests, so no charge is left that no entry names.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startDemo, tempDir } from '../harness.js';

const SANDBOX = 'sk_lab_recover12345678';
const auth = { authorization: `Bearer ${SANDBOX}` };
const charge = (url: string, key: string, delayMs: number) =>
  fetch(`${url}/v1/charges`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': key, 'idem-lab-delay-ms': `${delayMs}` },
    body: JSON.stringify({ amount: 500, source: 'tok_visa' }),
  });
const states = async (url: string) =>
  (
    (await (await fetch(`${url}/v1/lab/history`, { headers: auth })).json()) as { entries: Array<{ state: string }> }
  ).entries.map((e) => e.state);

describe('lab start-up and Reset on real processes', () => {
  it('a second process that cannot listen marks nothing; Reset waits while a request runs', async () => {
    const dir = tempDir();
    const env = { IDEM_STORE: `sqlite:${dir.path}/idem.db` };
    const first = await startDemo(env);
    try {
      const slow = charge(first.url, 'k-slow', 3_000);
      await waitFor('the slow request to show running', async () => (await states(first.url)).join() === 'running');
      // Same database, same port: it cannot listen, exits 2, and leaves the running request alone.
      await expect(startDemo({ ...env, PORT: new URL(first.url).port })).rejects.toThrow(/EADDRINUSE|cannot listen/);
      expect(await states(first.url)).toEqual(['running']);
      const busy = await fetch(`${first.url}/v1/lab/reset`, { method: 'POST', headers: auth });
      expect([busy.status, ((await busy.json()) as { type: string }).type]).toEqual([409, 'urn:idem:problem:lab-busy']);
      expect((await slow).status).toBe(201);
      expect(await states(first.url)).toEqual(['done']);
      const reset = await fetch(`${first.url}/v1/lab/reset`, { method: 'POST', headers: auth });
      expect(await reset.json()).toEqual({ object: 'lab_reset', deleted_charges: 1 });
      expect(await states(first.url)).toEqual([]);
    } finally {
      await first.stop();
      dir.remove();
    }
  });
});
