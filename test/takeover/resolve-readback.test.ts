/**
 * What `idem records resolve` writes is read back as the operator meant it (the second review of the takeover
 * policy): by `idempotent()` (a failure stays a failure, a result must be JSON), through a `sealed()` store (with
 * `--seal-key-env`), and with a Content-Type every replay can carry. The client stops at an unknown outcome; a held
 * key under 'quarantine' says it may be quarantined, not that it is running; a `parseArgs` mistake is one line.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { idempotentFetch } from '../../packages/idem/src/client/index.js';
import { resolveCommand } from '../../packages/idem/src/cli/resolve.js';
import { idempotent, manualClock, sealed, type IdempotencyStore } from '../../packages/idem/src/index.js';
import { idempotency } from '../../packages/idem/src/http/index.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { tempDir } from '../harness.js';

const LEASE = 1_000;
const MAX_HOLD = 300;
const dir = tempDir('idem-resolve-readback-');
afterAll(() => dir.remove());

/** Runs `idem records resolve` in this process against `store`; resolves with the exit code and what it printed. */
async function resolve(store: IdempotencyStore<never>, args: readonly string[], env: NodeJS.ProcessEnv = {}) {
  const out: string[] = [];
  const io = { stdout: (t: string) => void out.push(t), stderr: () => undefined, env };
  const code = await resolveCommand(args, io, (_command, _flag, run) => run(store));
  return { code, out: out.join('') };
}

/** A key of `idempotent()` under 'quarantine' whose holder was stopped at `maxHoldMs` after its effect. */
async function quarantinedCall(store: IdempotencyStore<never>) {
  const options = { store, scope: 'acct', key: (i: { k: string }) => i.k, leaseMs: LEASE, ttlMs: 86_400_000 };
  const clock = manualClock(Date.now() - 20 * LEASE);
  let effects = 0;
  const holder = idempotent(
    async (_input: { k: string }, { signal }) => {
      effects++;
      await new Promise((aborted) => signal.addEventListener('abort', aborted, { once: true }));
      signal.throwIfAborted();
    },
    { ...options, takeover: 'quarantine', clock, maxHoldMs: MAX_HOLD },
  );
  const held = holder({ k: 'k1' }).catch((error: { code?: string }) => error.code);
  await waitFor('the holder made its effect', () => effects === 1);
  clock.advance(MAX_HOLD);
  expect(await held).toBe('LEASE_LOST');
  const retry = idempotent(async () => ({ ran: 'again' }), { ...options, takeover: 'quarantine' });
  return () =>
    retry({ k: 'k1' }).then(
      (value) => ({ value }),
      (error: { name: string; originalName?: string; code?: string; message: string }) =>
        error.code ? { code: error.code } : { failure: [error.originalName, error.message] },
    );
}

describe('idempotent() reads back what an operator resolved', () => {
  it.each([
    [['--succeeded', '--status', '200', '--body', '{"charged":true}'], { value: { charged: true } }],
    [
      ['--failed', '--status', '422', '--body', '{"name":"CardDeclined","message":"insufficient funds"}'],
      { failure: ['CardDeclined', 'insufficient funds'] },
    ],
    [
      ['--failed', '--status', '502', '--body', '{"declined":"insufficient funds"}'],
      { failure: ['Error', 'recorded as failed (502) by an operator: {"declined":"insufficient funds"}'] },
    ],
    [
      ['--succeeded', '--status', '200'],
      {
        failure: [
          'Error',
          "the record holds a 200 whose body is not JSON (0 bytes), so no result can be returned; resolve it with --body '<the result as JSON>'",
        ],
      },
    ],
  ])('resolve %j: every call gets %j', async (args, expected) => {
    const store = memoryStore();
    const call = await quarantinedCall(store);
    expect(await call()).toEqual({ code: 'OUTCOME_UNKNOWN' });
    // The retry's takeover left its own lease to lapse (1 s): resolve waits for it, as it would for a live client.
    expect((await resolve(store, ['acct', 'k1', '--store', 'memory:', ...args, '--wait', '5'])).code).toBe(0);
    expect([await call(), await call()]).toEqual([expected, expected]);
  });
});

describe('records resolve options', () => {
  it.each([
    ['application/json\r\nset-cookie: session=evil', 'application/json\\x0d\\x0aset-cookie: session=evil'],
    ['', ''],
    ['json', 'json'],
  ])('--content-type %j is refused in one line, before the store is opened', async (type, shown) => {
    const args = ['acct', 'k1', '--store', 'memory:', '--succeeded', '--status', '201', '--content-type', type];
    await expect(resolve(memoryStore(), args)).rejects.toThrow(
      `--content-type must be a media type such as application/json, got "${shown}".`,
    );
  });

  it('a parseArgs mistake is one line', async () => {
    await expect(
      resolve(memoryStore(), ['acct', 'k1', '--store', 'memory:', '--rerun', '--wait', '-1']),
    ).rejects.toThrow(
      "Option '--wait' argument is ambiguous. Did you forget to specify the option argument for '--wait'? To specify an option argument starting with a dash use '--wait=-XYZ'.",
    );
  });

  it('--seal-key-env: the resolution is sealed with that key, so the sealed application replays it', async () => {
    const raw = sqliteStore({ database: new Database(join(dir.path, `${randomUUID()}.db`)), closeDatabase: true });
    await raw.migrate();
    const key = randomBytes(32);
    const { gate, request, runs } = await quarantinedRequest(
      sealed(raw, { keys: [{ id: 'k2026', key: new Uint8Array(key) }] }),
    );
    const env = {
      IDEM_SEAL: `k2026:${key.toString('base64')}`,
      IDEM_BAD: `k2026:${key.subarray(1).toString('base64')}`,
      IDEM_BARE: key.toString('base64'),
    };
    const args = [
      'single-tenant',
      'k1',
      '--store',
      'sqlite:x',
      '--succeeded',
      '--status',
      '201',
      '--body',
      '{"id":"ch_1"}',
    ];
    const bad = resolve(raw, [...args, '--seal-key-env', 'IDEM_BAD'], env);
    await expect(bad).rejects.toThrow('--seal-key-env IDEM_BAD: the variable must hold KEY_ID:BASE64 of 32 bytes.');
    // A bare key has no id: it is refused, not split at its last character into an id that is most of the key.
    const bare = resolve(raw, [...args, '--seal-key-env', 'IDEM_BARE'], env);
    await expect(bare).rejects.toThrow('--seal-key-env IDEM_BARE: the variable must hold KEY_ID:BASE64 of 32 bytes.');
    expect((await resolve(raw, [...args, '--seal-key-env', 'IDEM_SEAL', '--wait', '0'], env)).code).toBe(0);
    const replay = await gate(request());
    expect([replay.status, await replay.text(), runs.count]).toEqual([201, '{"id":"ch_1"}', 1]);
    await raw.close();
  });
});

/** A Web gate's key under 'quarantine' whose holder ran, then was stopped at `maxHoldMs`; `gate` runs nothing new. */
async function quarantinedRequest(store: IdempotencyStore<never>) {
  const options = { store, scope: 'single-tenant', leaseMs: LEASE, ttlMs: 86_400_000, takeover: 'quarantine' } as const;
  const init = { method: 'POST', headers: { 'idempotency-key': 'k1' }, body: '{}' };
  const request = () => new Request('http://x/pay', init);
  const runs = { count: 0 };
  const clock = manualClock(Date.now() - 20 * LEASE);
  const run = () => (runs.count++, new Promise<Response>(() => {}));
  const held = idempotency({ ...options, clock, maxHoldMs: MAX_HOLD })(run)(request());
  await waitFor('the holder ran', () => runs.count === 1);
  clock.advance(MAX_HOLD);
  expect((await held).status).toBe(409);
  const gate = idempotency(options)(() => (runs.count++, new Response('ran again')));
  return { gate, init, request, runs };
}

describe('a quarantined key, seen from outside', () => {
  it('the client returns the unknown outcome at once: no retry re-arms the quarantine', async () => {
    const { gate, init, request, runs } = await quarantinedRequest(memoryStore());
    const calls: number[] = [];
    const { response, attempts } = await idempotentFetch('http://x/pay', init, {
      retries: 5,
      fetch: async (url, i) => {
        const answer = await gate(new Request(url, i));
        calls.push(answer.status);
        return answer;
      },
    });
    expect([attempts, calls, response.status, runs.count]).toEqual([1, [409], 409, 1]);
    // The takeover left its own lease to lapse: the next request meets it, and is told it may be quarantined.
    const held = await gate(request());
    expect([held.status, ((await held.json()) as { detail: string }).detail]).toEqual([
      409,
      'A request with this Idempotency-Key is still being processed, or it stopped with its outcome unknown and waits for an operator (idem records resolve).',
    ]);
  });
});
