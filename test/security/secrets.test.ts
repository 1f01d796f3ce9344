/**
 * Credentials never reach storage (issue 6, item 4): after charges sent with an API key, a cookie, an
 * `X-Api-Key` and a `Proxy-Authorization`, none of those secrets appears in any column of any stored record
 * row, anywhere in the raw SQLite database and WAL files, in the records endpoint, or in the server's logs.
 * In-process: credential-bearing response headers (`Set-Cookie`, `Authorization`, `WWW-Authenticate`, custom
 * ones) are not stored, so a replay cannot hand one client's session to another.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { idempotency } from 'idem/http';
import { memoryStore } from 'idem/stores/memory';
import { startDemo, tempDir } from '../harness.js';

const API_KEY = 'sk_live_S3cretApiKey7f3a9c';
const SECRETS = [API_KEY, 'c00kie-s3ssion-9b1d', 'xk-s3cret-4e8f', 'proxy-s3cret-77aa'];

describe('credentials are never stored or logged (real server, SQLite)', () => {
  it('no secret in any stored row, in the raw database and WAL bytes, in the records endpoint or in the logs', async () => {
    const dir = tempDir('idem-secrets-');
    const server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      IDEM_API_KEYS: `${API_KEY}:acct_secret`,
    });
    try {
      const headers = {
        authorization: `Bearer ${API_KEY}`,
        cookie: `session=${SECRETS[1]}`,
        'x-api-key': SECRETS[2] as string,
        'proxy-authorization': `Basic ${SECRETS[3]}`,
        'content-type': 'application/json',
      };
      const statuses: number[] = [];
      for (const [body, extra] of [
        [{ amount: 500 }, {}],
        [{ amount: 500, source: 'tok_chargeDeclined' }, {}],
        [{ amount: 500 }, { 'idem-lab-fail': '503' }],
      ] as const) {
        const key = randomUUID();
        const init = { method: 'POST', headers: { ...headers, 'idempotency-key': key }, body: JSON.stringify(body) };
        statuses.push(
          (await fetch(`${server.url}/v1/charges`, { ...init, headers: { ...init.headers, ...extra } })).status,
        );
        statuses.push((await fetch(`${server.url}/v1/charges`, init)).status); // replay (or, after the 503, the retry)
      }
      expect(statuses).toEqual([201, 201, 402, 402, 503, 201]);

      const db = new Database(join(dir.path, 'idem.db'), { readonly: true });
      const rows = db.prepare('SELECT * FROM idem_records').all() as Array<Record<string, unknown>>;
      db.close();
      expect(rows.length).toBe(3);
      const cells = rows
        .flatMap((row) => Object.values(row))
        .map((value) => (Buffer.isBuffer(value) ? value.toString('latin1') : String(value)));
      const leaks = (text: string) =>
        SECRETS.filter((secret) => text.includes(secret)).concat(/bearer/i.test(text) ? ['Bearer'] : []);
      expect(cells.flatMap(leaks)).toEqual([]);
      // The stored response headers are the allow-list only.
      expect(new Set(rows.map((row) => row.response_headers))).toEqual(
        new Set([
          '[["content-type","application/json"]]',
          '[["cache-control","no-store"],["content-type","application/problem+json"]]',
        ]),
      );

      // Every byte on disk: the database, its WAL and shared memory (free pages and old frames included).
      const files = readdirSync(dir.path).filter((name) => name.startsWith('idem.db'));
      expect(files).toContain('idem.db');
      for (const name of files)
        expect([name, leaks(readFileSync(join(dir.path, name)).toString('latin1'))]).toEqual([name, []]);

      const records = await (await fetch(`${server.url}/v1/idempotency_records`, { headers })).text();
      expect(leaks(records)).toEqual([]);
      expect(leaks(server.output())).toEqual([]);
    } finally {
      await server.stop();
      dir.remove();
    }
  });
});

describe('credential-bearing response headers are never stored or replayed (Web layer, in-process)', () => {
  it('Set-Cookie, Authorization, WWW-Authenticate and custom headers reach the first client only', async () => {
    const store = memoryStore();
    let runs = 0;
    const handle = idempotency({ store, scope: 'single-tenant', ttlMs: 60_000, leaseMs: 5_000 })(async () => {
      runs++;
      return new Response('{"ok":true}', {
        status: 201,
        headers: {
          'content-type': 'application/json',
          'set-cookie': 'session=first-client-only; HttpOnly',
          authorization: 'Bearer leaked-if-replayed',
          'www-authenticate': 'Bearer realm="x"',
          'x-api-key': 'xk-leaked-if-replayed',
          location: '/v1/charges/ch_1',
        },
      });
    });
    const request = () =>
      new Request('http://x/v1/charges', {
        method: 'POST',
        headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' },
        body: '{}',
      });
    const first = await handle(request());
    const replay = await handle(request());
    expect([runs, first.status, replay.status, replay.headers.get('idempotent-replayed')]).toEqual([
      1,
      201,
      201,
      'true',
    ]);
    expect(first.headers.get('set-cookie')).toBe('session=first-client-only; HttpOnly');
    expect([...replay.headers].filter(([name]) => name !== 'content-length').sort()).toEqual([
      ['content-type', 'application/json'],
      ['idempotent-replayed', 'true'],
      ['location', '/v1/charges/ch_1'],
    ]);
    const stored = await store.get('IDEMPOTENCY#single-tenant#k1');
    expect(stored?.response?.headers).toEqual([
      ['content-type', 'application/json'],
      ['location', '/v1/charges/ch_1'],
    ]);
    expect(await replay.text()).toBe('{"ok":true}');
  });
});
