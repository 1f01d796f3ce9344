/**
 * The second review of the takeover policy (docs/DESIGN.md: Takeover policy), each proven defect as a test:
 * a retryable answer given after the lease's signal aborted is not written under 'reconcile' or 'quarantine' (the
 * retry is a takeover, not a blind re-run); a reconcile answer is stored as a handler's response is (checked
 * headers, filtered, bounded); `idem records resolve` writes only what `idempotent()` and a sealed store can read
 * back; the client does not retry an unknown outcome; a held key under 'quarantine' does not claim to be running.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { manualClock, type IdempotencyStore } from '../../packages/idem/src/index.js';
import { idempotency, type HttpReconcileAnswer } from '../../packages/idem/src/http/index.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { tempDir } from '../harness.js';
import { charge, typeOf, webTakeover } from './web-kit.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';

const LEASE = 1_000;
const dir = tempDir('idem-after-abort-');
afterAll(() => dir.remove());

const backings: ReadonlyArray<readonly [string, () => Promise<IdempotencyStore<never>>]> = [
  ['memory', async () => memoryStore()],
  [
    'sqlite',
    async () => {
      const database = new Database(join(dir.path, `${randomUUID()}.db`));
      const store = sqliteStore({ database, closeDatabase: true });
      await store.migrate();
      return store;
    },
  ],
];

const late503 = () => Response.json({ error: 'upstream aborted' }, { status: 503 });

/**
 * Gate A makes the effect, waits for its lease's signal to abort (its local deadline, on its own clock), then
 * answers what `late` gives; gate B, its clock past A's lease, gets the same request with `reconcile`.
 */
function abortedThenRetried(
  store: IdempotencyStore<never>,
  policy: 'quarantine' | 'reconcile',
  late: () => Response,
  reconcile: () => HttpReconcileAnswer = () => ({
    state: 'succeeded',
    response: new Response('from the ledger', { status: 201 }),
  }),
  more: { readonly maxResponseBytes?: number; readonly leaseMs?: number } = {},
) {
  const options = {
    store,
    scope: 'single-tenant',
    leaseMs: LEASE,
    ttlMs: 86_400_000,
    takeover: policy,
    reconcile,
    ...more,
  } as const;
  return webTakeover(options, {
    t0: Date.now() - 20 * options.leaseMs,
    stopAfterMs: options.leaseMs,
    first: async (signal) => {
      await new Promise((aborted) => signal.addEventListener('abort', aborted, { once: true }));
      return late();
    },
  });
}

describe.each(backings)('after the signal aborted (%s)', (_name, open) => {
  it.each([
    ['quarantine', 409, 'urn:idem:problem:idempotency-outcome-unknown'],
    ['reconcile', 201, 'from the ledger'],
  ] as const)(
    'a 503 answered late is not written: under %s the retry gets %i %s; one effect',
    async (policy, status, body) => {
      const store = await open();
      const { a, b, effects } = await abortedThenRetried(store, policy, late503);
      expect([(a as Response).status, await typeOf(a as Response)]).toEqual([
        409,
        'urn:idem:problem:idempotency-lease-lost',
      ]);
      expect([b.status, policy === 'quarantine' ? await typeOf(b) : await b.text(), effects]).toEqual([
        status,
        body,
        1,
      ]);
      await store.close();
    },
  );
});

describe('a reconcile answer is stored as a handler response is', () => {
  const bytes = (text: string) => new TextEncoder().encode(text);
  it.each([
    ['a header name no response can carry', [['bad header', 'x']]],
    ['a header value with CR LF', [['x-a', 'a\r\nset-cookie: evil=1']]],
    ['a null header pair', [null]],
  ])('%s: 503 reconcile-failed, nothing recorded', async (_what, headers) => {
    const store = memoryStore();
    const answer = () => ({ state: 'succeeded', response: { status: 200, headers, body: bytes('{}') } }) as never;
    const { b, effects } = await abortedThenRetried(store, 'reconcile', late503, answer);
    expect([b.status, await typeOf(b), effects]).toEqual([503, 'urn:idem:problem:idempotency-reconcile-failed', 1]);
    expect((await store.list({ scope: 'single-tenant', limit: 5 })).map((r) => r.status)).toEqual(['in_progress']);
  });

  it('a body that is not bytes: 503 reconcile-failed', async () => {
    const answer = () => ({ state: 'succeeded', response: { status: 200, headers: [], body: 'text' } }) as never;
    const { b } = await abortedThenRetried(memoryStore(), 'reconcile', late503, answer);
    expect([b.status, await typeOf(b)]).toEqual([503, 'urn:idem:problem:idempotency-reconcile-failed']);
  });

  it('the plain form is filtered like a Response: no Set-Cookie, no header off the replay list, no content-length', async () => {
    const headers = [
      ['content-type', 'application/json'],
      ['set-cookie', 'session=someone-elses'],
      ['x-internal-ledger', 'row 42'],
      ['content-length', '999'],
    ];
    const answer = () => ({ state: 'succeeded', response: { status: 201, headers, body: bytes('{"ok":1}') } }) as never;
    const { b } = await abortedThenRetried(memoryStore(), 'reconcile', late503, answer);
    expect([b.status, [...b.headers], await b.text()]).toEqual([
      201,
      [
        ['content-type', 'application/json'],
        ['idempotent-replayed', 'true'],
      ],
      '{"ok":1}',
    ]);
  });

  it.each([
    ['a Response', () => new Response(new Uint8Array(2048))],
    ['the plain form', () => ({ status: 200, headers: [], body: new Uint8Array(2048) })],
  ])('an answer over maxResponseBytes, as %s: 503 reconcile-failed, nothing recorded', async (_form, response) => {
    const store = memoryStore();
    const answer = () => ({ state: 'succeeded', response: response() }) as never;
    const { b } = await abortedThenRetried(store, 'reconcile', late503, answer, { maxResponseBytes: 1024 });
    expect([b.status, await typeOf(b)]).toEqual([503, 'urn:idem:problem:idempotency-reconcile-failed']);
    expect((await store.list({ scope: 'single-tenant', limit: 5 })).map((r) => r.status)).toEqual(['in_progress']);
  });
});

describe("a reconcile answer's resultId", () => {
  it.each([
    ['ch_1', 201, 'ch_1'],
    [42, 503, null],
  ] as const)('resultId %j: the retry gets %i and the record names %j', async (resultId, status, recorded) => {
    const store = memoryStore();
    const answer = () => ({ state: 'succeeded', response: new Response('found', { status: 201 }), resultId }) as never;
    const { b } = await abortedThenRetried(store, 'reconcile', late503, answer);
    const [record] = await store.list({ scope: 'single-tenant', limit: 5 });
    expect([b.status, record?.resultId ?? null]).toEqual([status, recorded]);
  });
});

describe('the third review', () => {
  it('a reconcile answer streamed past maxResponseBytes is read no further than the limit', async () => {
    let pulled = 0;
    const chunk = new Uint8Array(65_536);
    const eightMiB = () =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            if (pulled === 8 * 1_048_576) return controller.close();
            pulled += chunk.byteLength;
            controller.enqueue(chunk);
          },
        }),
      );
    const answer = () => ({ state: 'succeeded', response: eightMiB() }) as never;
    const { b } = await abortedThenRetried(memoryStore(), 'reconcile', late503, answer, { maxResponseBytes: 1024 });
    // The chunk read, and the one the stream pulled ahead of it (its high-water mark): not the 8 MiB.
    expect([b.status, await typeOf(b), pulled]).toEqual([
      503,
      'urn:idem:problem:idempotency-reconcile-failed',
      131_072,
    ]);
  });

  it('a failed reconcile hook: 503 with Retry-After past its abandoned lease; a retry before is told why it waits', async () => {
    const store = memoryStore();
    const failing = () => {
      throw new Error('processor unreachable');
    };
    const { b } = await abortedThenRetried(store, 'reconcile', late503, failing, { leaseMs: 4_000 });
    expect([b.status, b.headers.get('retry-after'), await typeOf(b)]).toEqual([
      503,
      '4',
      'urn:idem:problem:idempotency-reconcile-failed',
    ]);
    const [held] = await store.list({ scope: 'single-tenant', limit: 5 });
    const options = {
      store,
      scope: 'single-tenant',
      leaseMs: 4_000,
      takeover: 'reconcile',
      reconcile: failing,
    } as const;
    const clock = manualClock((held?.leaseExpiresAt ?? 0) - 1);
    const again = await idempotency({ ...options, clock })(() => new Response('ran'))(charge());
    expect([again.status, ((await again.json()) as { detail: string }).detail]).toEqual([
      409,
      'A request with this Idempotency-Key is still being processed, or its earlier outcome could not be reconciled yet and the key is held until its lease lapses.',
    ]);
  });

  /**
   * Under 'quarantine', a claim nothing ran under: attempt 1 (`failFirst`) throws, leaving a retryable failure; then
   * one claim whose answer comes past the holder's deadline (`late`) or never (`silent`: applied, then no answer
   * until `storeTimeoutMs`). What the store holds after it, and what the next attempt gets.
   */
  async function unusedClaim(how: 'late' | 'silent', failFirst: boolean) {
    const clock = manualClock(Date.now());
    const inner = memoryStore();
    let slow = false;
    let applied = false;
    const slowClaim: typeof inner.claim = async (request) => {
      const claimed = await inner.claim(request);
      if (!slow) return claimed;
      slow = false;
      if (how === 'late') clock.advance(LEASE);
      else return ((applied = true), new Promise<never>(() => {}));
      return claimed;
    };
    const store = new Proxy(inner, {
      get(target, name) {
        if (name === 'claim') return slowClaim;
        const value = Reflect.get(target, name) as unknown;
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    let runs = 0;
    // A late answer within storeTimeoutMs (5 s here), a silent claim given up at it (100 ms).
    const storeTimeoutMs = how === 'late' ? 5_000 : 100;
    const options = { store, scope: 'single-tenant', leaseMs: LEASE, ttlMs: 86_400_000, storeTimeoutMs } as const;
    const gate = idempotency({ ...options, takeover: 'quarantine', clock })(() => {
      runs++;
      if (runs === 1 && failFirst) throw new Error('declined by a flaky processor');
      return new Response('charged', { status: 201 });
    });
    if (failFirst) await gate(charge()).catch(() => undefined);
    slow = true;
    const pending = gate(charge());
    if (how === 'silent') {
      await waitFor('the claim applied', () => applied);
      clock.advance(100);
    }
    const unused = await pending;
    const kept = (await inner.list({ scope: 'single-tenant', limit: 5 })).map((r) => [r.status, r.retryable]);
    clock.advance(2 * LEASE);
    const next = await gate(charge());
    return [unused.status, await typeOf(unused), kept, next.status, await next.text(), runs];
  }

  it.each([
    ['late', false, []],
    ['late', true, [['failed', true]]],
    ['silent', false, []],
  ] as const)(
    'under quarantine a claim answered %s (after a failure: %s) is undone to %j: the next attempt runs, once',
    async (how, failFirst, kept) => {
      const ran = failFirst ? 2 : 1;
      expect(await unusedClaim(how, failFirst)).toEqual([
        503,
        'urn:idem:problem:idempotency-store-unavailable',
        kept,
        201,
        'charged',
        ran,
      ]);
    },
  );
});
