/**
 * Hostile review rev42 of issue 30 (item 2), through the CLI and the demo: a URL whose password holds `/` then `#`
 * (which parses, the text before `/` read as a port) is never printed whole — by `idem probe` (target and
 * `--count-url`), `idem records --store` or the demo's start-up; and `idem probe` masks every `-H` value a server
 * echoes back, in the count URL's error, the table and `--json`.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../apps/demo/src/config.js';
import { demoServe, inProcess } from '../cli/helpers.js';
import { ONLY_FIRST as SKIP, serving } from './probe-server.js';

const HIDDEN = 'https://u:443/#S3CRET@api.example.com/';
const KEY = 'sk_live_S3CRETKEY';
const ACCEPTED =
  'sqlite:<path>, memory:, postgres://user@host:5432/db[?schema=name&table=name], ' +
  'mysql://user[:password]@host:3306/db[?table=name], redis://host:6379[/db][?prefix=name:&replicas=1&replicaTimeoutMs=500], ' +
  'redis-cluster://host:port[,host:port…][?prefix=name:], dynamodb://host:port[?table=name&region=r], dynamodb:local[?table=name]';
const FIRST =
  '401 *** ***, 47 bytes — the first request must succeed for the other checks to mean anything (check -H and --body)';

describe('a password with / then # is never printed', () => {
  it('idem probe: the target, unreachable', async () => {
    const result = await inProcess(['probe', 'http://127.0.0.1:1/#S3CRET@api.example.com/']);
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: 'idem probe: cannot reach http://***@api.example.com/: fetch failed: bad port\n',
    });
  });

  it('idem probe: --count-url, unreachable', async () => {
    const result = await inProcess(['probe', 'http://127.0.0.1:1/v1', '--count-url', 'http://127.0.0.1:1/x#S3CRET@h']);
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: 'idem probe: cannot read --count-url http://***@h: fetch failed: bad port\n',
    });
  });

  it('idem records list --store', async () => {
    const result = await inProcess(['records', 'list', '--scope', 'a', '--store', 'https://u:443/#S3CRET@h/']);
    expect(result).toEqual({
      code: 2,
      stdout: '',
      stderr: `idem records list: --store must be one of ${ACCEPTED}; got "https://***@h/".\nRun "idem records list --help" for usage.\n`,
    });
  });

  it('the demo: IDEM_STORE at start-up, IDEM_LEDGER in its settings', async () => {
    const serve = await demoServe([], { IDEM_STORE: HIDDEN, IDEM_LAB: '1', PORT: '0', IDEM_LEDGER: ':memory:' });
    let ledger = 'accepted';
    try {
      loadConfig({ IDEM_LAB: '1', IDEM_LEDGER: HIDDEN });
    } catch (error) {
      ledger = (error as Error).message;
    }
    expect([serve.code, serve.stderr, ledger]).toEqual([
      2,
      `idem serve: IDEM_STORE must be one of ${ACCEPTED}; got "https://***@api.example.com/".\nRun "idem serve --help" for usage.\n`,
      'IDEM_LEDGER (--ledger) must be a SQLite file path (or sqlite:<path>, or :memory:), got "https://***@api.example.com/".',
    ]);
  });
});

describe('idem probe masks every -H value a server echoes', () => {
  const server = serving((req, res) => {
    req.resume();
    const echoed = `${req.headers.authorization ?? ''} ${req.headers['x-account']?.toString() ?? ''}`;
    if (req.url === '/count') res.writeHead(401, { 'content-type': 'text/plain' }).end(`denied: ${echoed}`);
    else res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ type: echoed }));
  });
  const headers = ['-H', `Authorization: Bearer ${KEY}`, '-H', 'X-Account: acct_S3CRET'];

  it('the --count-url error body', async () => {
    const result = await inProcess([
      'probe',
      `${server.base}/v1/charges`,
      ...headers,
      '--count-url',
      `${server.base}/count`,
    ]);
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: `idem probe: --count-url ${server.base}/count answered 401: denied: *** ***\n`,
    });
  });

  it('the target error: in the table and in --json', async () => {
    const table = await inProcess(['probe', `${server.base}/v1/charges`, ...headers, ...SKIP]);
    const json = await inProcess(['probe', `${server.base}/v1/charges`, ...headers, ...SKIP, '--json']);
    expect(table.stdout.split('\n')[5]).toBe(
      `first request runs once             FAIL    ·           ·       ${FIRST}`,
    );
    expect((JSON.parse(json.stdout) as { checks: Array<{ observed: string }> }).checks[0]?.observed).toBe(FIRST);
    expect([table, json].map((r) => /S3CRET/.test(r.stdout + r.stderr))).toEqual([false, false]);
  });
});
