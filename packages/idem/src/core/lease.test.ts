import Database from 'better-sqlite3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { sqliteStore } from '../stores/sqlite/index.js';
import { manualClock, type ManualClock } from './clock.js';
import { createEngine, type Lease, type WorkResult } from './engine.js';
import type { IdempotencyError } from './errors.js';
import { recordPk } from './key.js';
import type { IdempotencyStore, RenewRequest, WriteResult } from './record.js';

// The lease on the holder's own clock (docs/DESIGN.md: Lease): with leaseMs 9,000, renewals every 3,000 and a
// margin of 900, the holder gives its lease up at 8,100 past its last confirmed write, 900 before the store would.
const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 9_000;
const MARGIN = 900;
const request = { scope: 'acct_a', key: 'k1', fingerprint: 'f1' };
const created: WorkResult<undefined> = {
  response: { status: 201, headers: [], body: new TextEncoder().encode('{"id":"ch_1"}') },
};

/**
 * The memory store, its renewals and completions logged in order (`log`); the n-th renewal hangs (never answers)
 * when `stall(n)` says so.
 */
function recordingStore(
  stall: (n: number) => boolean = () => false,
): IdempotencyStore<undefined> & { readonly log: string[]; readonly renewals: number } {
  const store = memoryStore();
  const log: string[] = [];
  const renewals = () => log.filter((call) => call === 'renew').length;
  const wrapped = Object.create(store, { log: { value: log }, renewals: { get: renewals } }) as ReturnType<
    typeof recordingStore
  >;
  wrapped.renew = (renewal: RenewRequest): Promise<WriteResult> => {
    log.push('renew');
    return stall(renewals()) ? new Promise(() => undefined) : store.renew(renewal);
  };
  wrapped.complete = (completion) => (log.push('complete'), store.complete(completion));
  return wrapped;
}

function setup(store: IdempotencyStore<undefined>, options: { maxHoldMs?: number } = {}) {
  const clock = manualClock(T0);
  const engine = createEngine({ store, clock, ttlMs: 86_400_000, leaseMs: LEASE, leaseMarginMs: MARGIN, ...options });
  return { clock, engine };
}

/** Moves the manual clock 100 ms at a time, letting timers and store calls run between steps. */
async function step(clock: ManualClock, ms: number): Promise<void> {
  for (let moved = 0; moved < ms; moved += 100) {
    clock.advance(Math.min(100, ms - moved));
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

async function lease(engine: ReturnType<typeof setup>['engine']): Promise<Lease<undefined>> {
  const decision = await engine.begin(request);
  if (decision.kind !== 'lease') throw new Error(`expected a lease, got ${decision.kind}`);
  return decision.lease;
}

describe('a lease on the holder’s clock', () => {
  it('a renewal stuck on a dead connection is abandoned; the next one keeps the key (no second run)', async () => {
    const store = recordingStore((n) => n === 1);
    const { clock, engine } = setup(store);
    const first = await lease(engine);
    let abortedAt: number | null = null;
    first.signal.addEventListener('abort', () => (abortedAt = clock.now() - T0));
    // Renewal 1 is sent at 3,000 and never answers; it is given up at 6,000 and renewal 2 sent then, confirmed.
    await step(clock, 9_500);
    expect(store.renewals).toBe(3);
    expect(abortedAt).toBeNull();
    // Past the claim's own lease (9,000) a retry still meets a live holder: the work does not run twice.
    const retry = await engine.begin(request);
    expect(retry.kind === 'refused' && retry.error.code).toBe('IN_FLIGHT');
    expect((await first.complete(created)).ok).toBe(true);
  });

  it('when no renewal is confirmed, the holder aborts its work before the store lets a retry take over', async () => {
    const store = recordingStore(() => true);
    const { clock, engine } = setup(store);
    const first = await lease(engine);
    const events: string[] = [];
    first.signal.addEventListener('abort', () => events.push(`aborted at ${clock.now() - T0}`));
    await step(clock, LEASE - MARGIN - 100);
    expect(events).toEqual([]);
    await step(clock, 100);
    expect(events).toEqual([`aborted at ${LEASE - MARGIN}`]);
    expect((first.signal.reason as IdempotencyError).code).toBe('LEASE_LOST');
    // Only at the store's lease end does a retry take the key over, with the same id, after the first stopped.
    await step(clock, MARGIN - 100);
    expect((await engine.begin(request)).kind).toBe('refused');
    await step(clock, 100);
    const second = await engine.begin(request);
    expect(second.kind === 'lease' && second.lease.id).toBe(first.id);
    // The first attempt's late completion is fenced.
    const late = await first.complete(created);
    expect(!late.ok && late.error.code).toBe('LEASE_LOST');
  });

  it('renewals carry the record’s expiry along: slow work outliving its TTL is not expired under its lease', async () => {
    const store = memoryStore();
    const clock = manualClock(T0);
    const engine = createEngine({ store, clock, ttlMs: 2 * LEASE, leaseMs: LEASE, leaseMarginMs: MARGIN });
    const first = await lease(engine);
    await step(clock, 5 * LEASE);
    const record = await store.get(recordPk(request.scope, request.key));
    expect(record !== null && record.expiresAt > clock.now()).toBe(true);
    const retry = await engine.begin(request);
    expect(retry.kind === 'refused' && retry.error.code).toBe('IN_FLIGHT');
    expect((await first.complete(created)).ok).toBe(true);
  });

  it('work that never settles holds its key at most maxHoldMs, then settles retryable and is aborted', async () => {
    const store = memoryStore();
    const { clock, engine } = setup(store, { maxHoldMs: 20_000 });
    const first = await lease(engine);
    await step(clock, 19_900);
    expect(first.signal.aborted).toBe(false);
    expect(engine.activeLeases).toBe(1);
    await step(clock, 100);
    expect(first.signal.aborted).toBe(true);
    expect(engine.activeLeases).toBe(0);
    const record = await store.get(recordPk(request.scope, request.key));
    expect([record?.status, record?.retryable]).toEqual(['failed', true]);
    const late = await first.complete(created);
    expect(!late.ok && late.error.code).toBe('LEASE_LOST');
    expect((await store.get(recordPk(request.scope, request.key)))?.status).toBe('failed');
    const retry = await engine.begin(request);
    expect(retry.kind === 'lease' && [retry.lease.id, retry.lease.reclaimed]).toEqual([first.id, true]);
  });

  it('abandon() writes nothing and stops renewing: 409 until the lease lapses, then a takeover with the same id', async () => {
    const store = memoryStore();
    const { clock, engine } = setup(store);
    const first = await lease(engine);
    expect(await first.abandon()).toEqual({ ok: true, record: null });
    expect(engine.activeLeases).toBe(0);
    // The abandoned work may still run: its signal aborts at the holder's deadline, before anyone can take over.
    await step(clock, LEASE - MARGIN - 100);
    expect(first.signal.aborted).toBe(false);
    await step(clock, 100);
    expect((first.signal.reason as IdempotencyError).code).toBe('LEASE_LOST');
    await step(clock, MARGIN - 100);
    const busy = await engine.begin(request);
    expect(busy.kind === 'refused' && busy.error.code).toBe('IN_FLIGHT');
    await step(clock, 100);
    const second = await engine.begin(request);
    expect(second.kind === 'lease' && [second.lease.id, second.lease.reclaimed]).toEqual([first.id, true]);
    expect(await first.complete(created)).toEqual({ ok: true, record: null });
  });

  it('a store call that never answers is given up after storeTimeoutMs: 503, and the work does not run', async () => {
    const store = memoryStore();
    const hanging = Object.create(store) as IdempotencyStore<undefined>;
    hanging.claim = () => new Promise(() => undefined);
    const clock = manualClock(T0);
    const engine = createEngine({ store: hanging, clock, ttlMs: 86_400_000, storeTimeoutMs: 2_000 });
    const decision = engine.begin(request);
    await step(clock, 2_000);
    const refused = await decision;
    expect(refused.kind === 'refused' && refused.error.code).toBe('STORE_UNAVAILABLE');
  });
});

describe('the engine refuses misuse loudly', () => {
  it('complete() without a response is an error at the call; nothing is written and the lease stays usable', async () => {
    const store = memoryStore();
    const { engine } = setup(store);
    const first = await lease(engine);
    const bad = first.complete({ outcome: 'succeeded' } as unknown as WorkResult<undefined>);
    await expect(bad).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    expect(first.settled).toBe(false);
    expect((await store.get(recordPk(request.scope, request.key)))?.status).toBe('in_progress');
    expect((await first.complete(created)).ok).toBe(true);
    const replay = await engine.begin(request);
    expect(replay.kind).toBe('replay');
  });

  it('begin() answers for every record shape a store can hold, never spinning', async () => {
    const database = new Database(':memory:');
    const store = sqliteStore({ database });
    await store.migrate();
    const insert = database.prepare(
      `INSERT OR REPLACE INTO idem_records VALUES
       (@pk, 'acct_a', 'k1', @status, @fingerprint, 'id_1', 'tok_1', 0, @lease, @expires, @retryable, NULL,
        @responseStatus, @headers, @body)`,
    );
    const clock = manualClock(T0);
    const engine = createEngine({ store, clock, ttlMs: 86_400_000, leaseMs: LEASE });
    const shapes = fc.record({
      status: fc.constantFrom('in_progress', 'succeeded', 'failed'),
      sameFingerprint: fc.boolean(),
      leaseLive: fc.boolean(),
      expired: fc.boolean(),
      retryable: fc.boolean(),
      withResponse: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(shapes, async (shape) => {
        insert.run({
          pk: recordPk('acct_a', 'k1'),
          status: shape.status,
          fingerprint: shape.sameFingerprint ? 'f1' : 'f2',
          lease: shape.leaseLive ? T0 + 1 : T0,
          expires: shape.expired ? T0 : T0 + 86_400_000,
          retryable: shape.retryable ? 1 : 0,
          responseStatus: shape.withResponse ? 201 : null,
          headers: shape.withResponse ? '[]' : null,
          body: shape.withResponse ? Buffer.from('ok') : null,
        });
        const decision = await engine.begin(request);
        const got = decision.kind === 'refused' ? decision.error.code : decision.kind;
        if (decision.kind === 'lease') await decision.lease.release();
        expect(got).toBe(expected(shape));
      }),
      { numRuns: 300 },
    );
    database.close();
  });
});

/** What `begin` must answer for a stored record (docs/DESIGN.md: State machine, Claim). */
function expected(shape: {
  status: string;
  sameFingerprint: boolean;
  leaseLive: boolean;
  expired: boolean;
  retryable: boolean;
  withResponse: boolean;
}): string {
  if (shape.expired) return 'lease';
  if (!shape.sameFingerprint) return 'FINGERPRINT_MISMATCH';
  const final = shape.status === 'succeeded' || (shape.status === 'failed' && !shape.retryable);
  if (final) return shape.withResponse ? 'replay' : 'STORE_UNAVAILABLE';
  if (shape.status === 'failed') return 'lease';
  return shape.leaseLive ? 'IN_FLIGHT' : 'lease';
}

describe('what the hostile review of the lease found', () => {
  it('a claim answered past the holder’s deadline does not run the work; one answered in time aborts on time', async () => {
    const store = memoryStore();
    const clock = manualClock(T0);
    let delayMs = LEASE - MARGIN;
    const slow = Object.create(store) as IdempotencyStore<undefined>;
    slow.claim = async (claim) => {
      const answer = await store.claim(claim);
      clock.advance(delayMs);
      return answer;
    };
    // A call timeout longer than the lease: only the deadline check can refuse the late answer.
    const options = {
      store: slow,
      clock,
      ttlMs: 86_400_000,
      leaseMs: LEASE,
      leaseMarginMs: MARGIN,
      storeTimeoutMs: 20_000,
    };
    const engine = createEngine(options);
    const late = await engine.begin(request);
    expect(late.kind === 'refused' && late.error.code).toBe('STORE_UNAVAILABLE');
    // The record that claim wrote lapses like a dead holder's: a retry past its lease takes it over.
    delayMs = 4_000;
    clock.advance(MARGIN);
    const slowButInTime = await lease(engine);
    const hung = recordingStore(() => true);
    slow.renew = (renewal) => hung.renew(renewal);
    let abortedAt: number | null = null;
    slowButInTime.signal.addEventListener('abort', () => (abortedAt = clock.now()));
    const claimedAt = clock.now() - 4_000;
    await step(clock, 6_000);
    expect(abortedAt).toBe(claimedAt + LEASE - MARGIN);
  });

  it('engine.run() with a result no record can hold leaves the key retryable and nothing renewing', async () => {
    const store = memoryStore();
    const { engine } = setup(store);
    const bad = { response: { status: 200, headers: [], body: 'text' } } as unknown as WorkResult<undefined>;
    await expect(engine.run(request, async () => bad)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    expect(engine.activeLeases).toBe(0);
    const record = await store.get(recordPk(request.scope, request.key));
    expect([record?.status, record?.retryable]).toEqual(['failed', true]);
    const typo = { ...created, outcome: 'success' } as unknown as WorkResult<undefined>;
    await expect(engine.run(request, async () => typo)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    const resultId = { ...created, resultId: {} } as unknown as WorkResult<undefined>;
    await expect(engine.run(request, async () => resultId)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    expect((await engine.run(request, async () => created)).replayed).toBe(false);
  });

  it('a lease taken over and never settled is still ended by maxHoldMs', async () => {
    const store = memoryStore();
    const { clock, engine } = setup(store, { maxHoldMs: 30_000 });
    const first = await lease(engine);
    // A paused holder: another engine takes the key over once the lease lapsed, then the holder's renewal is refused.
    const other = createEngine({ store, clock: manualClock(T0 + LEASE + 1), ttlMs: 86_400_000, leaseMs: LEASE });
    expect((await other.begin(request)).kind).toBe('lease');
    await step(clock, 3_000);
    expect(first.signal.aborted).toBe(true);
    expect(engine.activeLeases).toBe(1);
    await step(clock, 27_000);
    expect(engine.activeLeases).toBe(0);
    const late = await first.complete(created);
    expect(!late.ok && late.error.code).toBe('LEASE_LOST');
  });

  it('every bad option is one CONFIG_INVALID that names it', () => {
    const store = memoryStore();
    const cases: [object, string][] = [
      [{ leaseMs: Number.NaN }, 'Expected `leaseMs` to be a whole number of ms from 1 to 2147483647, got NaN.'],
      [{ leaseMs: 1 }, 'Expected `leaseMs` to be at least 3 ms (renewals come every leaseMs / 3), got 1.'],
      [{ leaseMs: 1000.5 }, 'Expected `leaseMs` to be a whole number of ms from 1 to 2147483647, got 1000.5.'],
      [{ ttlMs: 86_400_000.5 }, 'Expected `ttlMs` to be a positive whole number of ms, got 86400000.5.'],
      [{ storeTimeoutMs: 2 ** 31 }, 'Expected `storeTimeoutMs` to be a whole number of ms from 1 to 2147483647'],
      [{ maxHoldMs: 0 }, 'Expected `maxHoldMs` to be a whole number of ms from 1 to 2147483647, got 0.'],
      [{ clock: {} }, 'Expected `clock` to be a Clock { now, setTimeout, clearTimeout }.'],
      [{ leaseMarginMs: 7_000 }, 'Expected `leaseMarginMs` to be at least 0 and less than leaseMs − renewEveryMs'],
    ];
    for (const [options, message] of cases) {
      expect(() => createEngine({ store, ttlMs: 86_400_000, ...options })).toThrow(message);
    }
  });
});

// Review 51: the work's abort listener settles the lease inside the tick that aborted it, and that tick also had a
// renewal due (a stalled event loop: the deadline and a renewal fall in one tick). The renewal went out after the
// settlement: it extended a lease given up, and the settlement's `expiresAt` was read before it moved.
describe('a lease settled from its abort listener', () => {
  it('complete() from the listener: no renewal after it, and its expiresAt is the stored one', async () => {
    const store = recordingStore();
    const clock = manualClock(T0);
    const engine = createEngine({ store, clock, leaseMs: 3_000, ttlMs: 3_001, cacheSize: 10, onEvent: () => {} });
    const held = await lease(engine);
    let settling: ReturnType<Lease<undefined>['complete']> | undefined;
    held.signal.addEventListener('abort', () => {
      settling = held.complete(created);
    });
    clock.advance(2_800); // past the deadline (2,700) with a renewal due (1,000): one tick
    const settled = await settling;
    const stored = await store.get(recordPk(request.scope, request.key));
    expect([settled?.ok, settled?.ok && settled.record?.expiresAt, stored?.expiresAt, store.log]).toEqual([
      true,
      T0 + 3_001,
      T0 + 3_001,
      ['complete'],
    ]);
  });

  it("fail() from the listener under 'reconcile': nothing written, and the lease is not renewed past its end", async () => {
    const store = recordingStore();
    const clock = manualClock(T0);
    const reconcile = async () => ({ state: 'not_done' as const });
    const engine = createEngine({ store, clock, leaseMs: 3_000, takeover: 'reconcile', reconcile });
    const held = await lease(engine);
    let settling: ReturnType<Lease<undefined>['fail']> | undefined;
    held.signal.addEventListener('abort', () => {
      settling = held.fail();
    });
    clock.advance(2_800);
    const settled = await settling;
    const stored = await store.get(recordPk(request.scope, request.key));
    expect([settled?.ok, stored?.status, stored?.leaseExpiresAt, store.log]).toEqual([
      false,
      'in_progress',
      T0 + 3_000,
      [],
    ]);
  });
});

describe('onGivenUp: told when the engine gives the key up past maxHoldMs, and only then', () => {
  it('called once, the lease settled by then; not at the local deadline', async () => {
    const store = recordingStore(() => true); // renewals hang: the local deadline (8,100) passes first
    const { clock, engine } = setup(store, { maxHoldMs: 20_000 });
    const held = await lease(engine);
    const calls: Array<[string, boolean]> = [];
    held.onGivenUp((error) => calls.push([error.code, held.settled]));
    await step(clock, 9_000);
    const atDeadline = [held.signal.aborted, calls.length];
    await step(clock, 11_000);
    expect([atDeadline, calls]).toEqual([[true, 0], [['LEASE_LOST', true]]]);
  });

  it("an object's handleEvent; not called when the work's abort listener settled the lease first", async () => {
    const told: string[] = [];
    const listener = { handleEvent: (error: IdempotencyError) => void told.push(error.code) };
    const first = setup(recordingStore(), { maxHoldMs: 5_000 });
    (await lease(first.engine)).onGivenUp(listener);
    await step(first.clock, 5_000);
    const second = setup(recordingStore(), { maxHoldMs: 5_000 });
    const held = await lease(second.engine);
    held.signal.addEventListener('abort', () => void held.fail());
    held.onGivenUp(listener);
    await step(second.clock, 5_000);
    expect([told, held.settled]).toEqual([['LEASE_LOST'], true]);
  });
});
