/**
 * Credentials are never printed: the demo's refusals of `IDEM_LEDGER` and `IDEM_API_KEYS`, and `idem probe`'s
 * target and `--count-url` (user info, `?api_key=`, `?token=`) in its errors, its report and `--json`.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../apps/demo/src/config.js';
import { inProcess } from '../cli/helpers.js';
import { ONLY_FIRST as SKIP, serving } from './probe-server.js';

const SECRET = 'Zq9Secret';

const refusal = (env: NodeJS.ProcessEnv): string => {
  try {
    loadConfig(env);
  } catch (error) {
    return (error as Error).message;
  }
  return 'accepted';
};

describe('the demo does not print a credential it refuses', () => {
  it('IDEM_LEDGER given a URL with a password: shown redacted', () => {
    expect(refusal({ IDEM_LAB: '1', IDEM_LEDGER: `postgres://app:${SECRET}@db/ledger` })).toBe(
      'IDEM_LEDGER (--ledger) must be a SQLite file path (or sqlite:<path>, or :memory:), got "postgres://app:***@db/ledger".',
    );
  });

  it('a malformed or repeated IDEM_API_KEYS pair: its position and what is wrong, never the key', () => {
    expect([
      refusal({ IDEM_API_KEYS: `sk_live_ok:acct_a,sk_live_${SECRET}` }),
      refusal({ IDEM_API_KEYS: `sk_live_${SECRET}:acct_a:x` }),
      refusal({ IDEM_API_KEYS: `:acct_a` }),
      refusal({ IDEM_API_KEYS: `sk_live_${SECRET}:acct_a, sk_live_b:acct_b,sk_live_${SECRET}:acct_b` }),
    ]).toEqual([
      'IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair 2 of 2 has no :account.',
      'IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair 1 of 1 has more than one :.',
      'IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair 1 of 1 has no API key.',
      'IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair 3 of 3 repeats the API key of pair 1.',
    ]);
  });
});

describe('idem probe does not print a credential of its URLs', () => {
  const server = serving((req, res) => {
    req.resume();
    res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"ch_1"}');
  });

  it('a URL with user info is refused (fetch cannot send it), shown redacted', async () => {
    const result = await inProcess(['probe', `http://user:${SECRET}@127.0.0.1:1/v1/charges`]);
    expect(result).toEqual({
      code: 2,
      stdout: '',
      stderr:
        'idem probe: URL must not carry a user name or password (got "http://***@127.0.0.1:1/v1/charges"): send credentials with -H, e.g. -H \'Authorization: Basic …\'.\nRun "idem probe --help" for usage.\n',
    });
  });

  it('?api_key= in the target: masked in the report header and in --json', async () => {
    const url = `${server.base}/v1/charges?api_key=${SECRET}&mode=test`;
    const table = await inProcess(['probe', url, ...SKIP]);
    const json = await inProcess(['probe', url, '--json', ...SKIP]);
    expect(table.stdout.split('\n')[0]).toBe(`idem probe: POST ${server.base}/v1/charges?api_key=***&mode=test`);
    expect((JSON.parse(json.stdout) as { url: string }).url).toBe(`${server.base}/v1/charges?api_key=***&mode=test`);
    expect([table, json].map((r) => `${r.stdout}${r.stderr}`.includes(SECRET))).toEqual([false, false]);
  });

  it('an unreachable target with ?token=: the error line masks it', async () => {
    const result = await inProcess(['probe', `http://127.0.0.1:1/v1/charges?token=${SECRET}`]);
    expect([result.code, result.stderr.split(': ').slice(0, 2).join(': ')]).toEqual([
      1,
      'idem probe: cannot reach http://127.0.0.1:1/v1/charges?token=***',
    ]);
    expect(result.stderr.includes(SECRET)).toBe(false);
  });

  it('--count-url: user info refused redacted; an unreachable one with ?token= masked', async () => {
    const userInfo = await inProcess([
      'probe',
      `${server.base}/v1/charges`,
      '--count-url',
      `http://u:${SECRET}@127.0.0.1:1/b`,
    ]);
    expect([userInfo.code, userInfo.stderr.split('\n')[0]]).toEqual([
      2,
      'idem probe: --count-url must not carry a user name or password (got "http://***@127.0.0.1:1/b"): send credentials with -H, e.g. -H \'Authorization: Basic …\'.',
    ]);
    const token = await inProcess([
      'probe',
      `${server.base}/v1/charges`,
      '--count-url',
      `http://127.0.0.1:1/b?token=${SECRET}`,
    ]);
    expect([token.code, token.stderr.split(': ').slice(0, 2).join(': ')]).toEqual([
      1,
      'idem probe: cannot read --count-url http://127.0.0.1:1/b?token=***',
    ]);
    expect(token.stderr.includes(SECRET)).toBe(false);
  });
});
