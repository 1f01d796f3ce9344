import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { answer, DAY, setup, step, T0, tick } from './engine.test-kit.js';
import { manualClock } from './clock.js';
import { classifyStatus, createEngine, type WorkContext, type WorkResult } from './engine.js';
import { IdempotencyError } from './errors.js';
import { recordPk } from './key.js';
import type { IdempotencyStore } from './record.js';

describe('createEngine options', () => {
  it('names the option that is wrong', () => {
    const store = memoryStore();
    expect(() => createEngine({ store, leaseMs: -1 })).toThrow(
      'Expected `leaseMs` to be a whole number of ms from 1 to 2147483647, got -1.',
    );
    expect(() => createEngine({ store, ttlMs: Number.NaN })).toThrow(
      'Expected `ttlMs` to be a positive whole number of ms, got NaN.',
    );
    expect(() => createEngine({ store, leaseMs: 1000, ttlMs: 500 })).toThrow(
      'Expected `ttlMs` to be greater than leaseMs (1000), got 500.',
    );
    expect(() => createEngine({ store, leaseMs: 1000, renewEveryMs: 1000, ttlMs: DAY })).toThrow(
      'Expected `renewEveryMs` to be less than leaseMs (1000), got 1000.',
    );
    expect(() => createEngine({ store: {} as never })).toThrow('Expected `store` to be an IdempotencyStore.');
    expect(() => createEngine({ store, waitForOutcomeMs: -5, ttlMs: DAY })).toThrow('Expected `waitForOutcomeMs`');
  });

  it('throws IdempotencyError with code CONFIG_INVALID', () => {
    expect(() => createEngine({ store: memoryStore(), leaseMs: 0 })).toThrow(IdempotencyError);
  });
});

describe('classifyStatus', () => {
  it('2xx and 3xx succeed, deterministic 4xx are final, the rest retryable', () => {
    expect([200, 201, 204].map(classifyStatus)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    // A redirect is an answer (303 See Other after a POST points at what was made): a retry must not run the work again.
    expect([301, 302, 303, 307, 308].map(classifyStatus)).toEqual(Array(5).fill('succeeded'));
    expect([400, 402, 404, 422].map(classifyStatus)).toEqual([
      'failed-final',
      'failed-final',
      'failed-final',
      'failed-final',
    ]);
    expect([408, 409, 425, 429, 500, 503, 100].map(classifyStatus)).toEqual(Array(7).fill('failed-retryable'));
  });
});

describe('engine.run', () => {
  it('runs the work once and replays the exact response after', async () => {
    const { engine, request, events } = setup();
    let runs = 0;
    const work = async () => {
      runs++;
      return answer(201, '{"id":"ch_1"}');
    };
    const first = await engine.run(request, work);
    const second = await engine.run(request, work);
    expect(runs).toBe(1);
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(new TextDecoder().decode(second.response.body)).toBe('{"id":"ch_1"}');
    expect(events.map((e) => e.type)).toEqual(['executed', 'replayed']);
  });

  it('refuses a reused key with another fingerprint, without running the work', async () => {
    const { engine, request } = setup();
    await engine.run(request, async () => answer(201));
    let ran = false;
    await expect(
      engine.run({ ...request, fingerprint: 'f2' }, async () => {
        ran = true;
        return answer(201);
      }),
    ).rejects.toMatchObject({ code: 'FINGERPRINT_MISMATCH' });
    expect(ran).toBe(false);
  });

  it('answers IN_FLIGHT with the lease time left while the first attempt runs', async () => {
    const { engine, request, clock } = setup();
    let finish = () => {};
    const first = engine.run(request, () => new Promise((resolve) => (finish = () => resolve(answer(201)))));
    await tick();
    clock.advance(2_500);
    await expect(engine.run(request, async () => answer(201))).rejects.toMatchObject({
      code: 'IN_FLIGHT',
      retryAfterMs: 7_500,
    });
    finish();
    await first;
  });

  it('replays a final failure (402) and re-runs a retryable one (503) with the same id', async () => {
    const { engine, request, store } = setup();
    const declined = { ...request, key: 'declined' };
    let runs = 0;
    await engine.run(declined, async () => (runs++, answer(402)));
    const replay = await engine.run(declined, async () => (runs++, answer(201)));
    expect(runs).toBe(1);
    expect(replay.replayed).toBe(true);
    expect(replay.response.status).toBe(402);

    const ids: string[] = [];
    const flaky = { ...request, key: 'flaky' };
    await engine.run(flaky, async ({ id }) => (ids.push(id), answer(503)));
    const second = await engine.run(
      flaky,
      async ({ id, reclaimed }) => (ids.push(id + String(reclaimed)), answer(201)),
    );
    expect(second.replayed).toBe(false);
    expect(ids).toEqual([ids[0], `${ids[0]}true`]);
    expect((await store.get(recordPk('acct_a', 'flaky')))?.status).toBe('succeeded');
  });

  it('a thrown error leaves the key failed and retryable, and rethrows', async () => {
    const { engine, request, store } = setup();
    await expect(
      engine.run(request, async () => {
        throw new Error('processor exploded');
      }),
    ).rejects.toThrow('processor exploded');
    const record = await store.get(recordPk('acct_a', 'k1'));
    expect([record?.status, record?.retryable]).toEqual(['failed', true]);
    expect((await engine.run(request, async () => answer(201))).replayed).toBe(false);
  });

  it('honours an explicit outcome from the work, including release', async () => {
    const { engine, request, store } = setup();
    await engine.run(request, async () => ({ ...answer(500), outcome: 'failed-final' }));
    expect((await engine.run(request, async () => answer(201))).response.status).toBe(500);

    const released = { ...request, key: 'released' };
    await engine.run(released, async () => ({ ...answer(400), outcome: 'release' }));
    expect(await store.get(recordPk('acct_a', 'released'))).toBeNull();
    const other = await engine.run({ ...released, fingerprint: 'other' }, async () => answer(201));
    expect(other.replayed).toBe(false);
  });

  it('renews the lease while slow work runs, so it is not taken over', async () => {
    const { engine, request, clock, store } = setup({ leaseMs: 3_000 });
    let finish = () => {};
    const first = engine.run(request, () => new Promise((resolve) => (finish = () => resolve(answer(201)))));
    await tick();
    for (let i = 0; i < 10; i++) {
      clock.advance(1_000);
      await tick();
    }
    const record = await store.get(recordPk('acct_a', 'k1'));
    expect(record?.leaseExpiresAt).toBe(T0 + 10_000 + 3_000);
    await expect(engine.run(request, async () => answer(201))).rejects.toMatchObject({ code: 'IN_FLIGHT' });
    finish();
    expect((await first).replayed).toBe(false);
  });

  it('takes over a dead lease keeping the id; the zombie is aborted and its completion refused', async () => {
    const store = memoryStore();
    const a = setup({ store, leaseMs: 3_000 });
    const b = setup({ store, leaseMs: 3_000 });
    // A's renewals never run (its clock never moves): it stalls past its lease, as a paused process would.
    let wake = () => {};
    let zombieSignal: AbortSignal | undefined;
    const seen: string[] = [];
    const zombie = a.engine.run(a.request, ({ id, signal }) => {
      seen.push(id);
      zombieSignal = signal;
      return new Promise((resolve) => (wake = () => resolve(answer(201, '{"by":"zombie"}'))));
    });
    await tick();
    b.clock.advance(3_000);
    const taken = await b.engine.run(b.request, async ({ id, reclaimed }) => {
      seen.push(`${id}:${String(reclaimed)}`);
      return answer(201, '{"by":"new owner"}');
    });
    expect(taken.replayed).toBe(false);
    expect(seen).toEqual([seen[0], `${seen[0]}:true`]);
    expect(b.events.map((e) => e.type)).toEqual(['takeover', 'executed']);
    // The zombie's lease renewal discovers the loss.
    a.clock.advance(1_000);
    await tick();
    await tick();
    expect(zombieSignal?.aborted).toBe(true);
    wake();
    await expect(zombie).rejects.toMatchObject({ code: 'LEASE_LOST' });
    const record = await store.get(recordPk('acct_a', 'k1'));
    expect(new TextDecoder().decode(record?.response?.body)).toBe('{"by":"new owner"}');
    expect(a.events.map((e) => e.type)).toEqual(['lease_lost', 'stale_write_refused']);
  });

  it('a signal first read after the lease was lost is already aborted, with the same reason', async () => {
    const store = memoryStore();
    const a = setup({ store, leaseMs: 3_000 });
    const b = setup({ store, leaseMs: 3_000 });
    let wake = () => {};
    let context: WorkContext | undefined;
    const zombie = a.engine.run(a.request, (work) => {
      context = work; // `signal` not read yet
      return new Promise((resolve) => (wake = () => resolve(answer(201))));
    });
    await tick();
    b.clock.advance(3_000);
    await b.engine.run(b.request, async () => answer(201));
    a.clock.advance(1_000);
    await tick();
    await tick();
    expect(a.events.map((e) => e.type)).toEqual(['lease_lost']);
    expect(context?.signal.aborted).toBe(true);
    expect(context?.signal.reason).toMatchObject({ code: 'LEASE_LOST' });
    wake();
    await expect(zombie).rejects.toMatchObject({ code: 'LEASE_LOST' });
  });

  it('treats an expired record as absent: the work runs again with a new id', async () => {
    const { engine, request, clock } = setup();
    const ids: string[] = [];
    await engine.run(request, async ({ id }) => (ids.push(id), answer(201)));
    clock.advance(DAY);
    await engine.run({ ...request, fingerprint: 'anything' }, async ({ id }) => (ids.push(id), answer(201)));
    expect(ids.length).toBe(2);
    expect(ids[0]).not.toBe(ids[1]);
  });

  it('fails closed: a store that cannot be reached gives STORE_UNAVAILABLE and the work never runs', async () => {
    const broken = memoryStore();
    await broken.close();
    const { engine, request } = setup({ store: broken });
    let ran = false;
    await expect(
      engine.run(request, async () => {
        ran = true;
        return answer(201);
      }),
    ).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE', cause: new Error('memory store is closed') });
    expect(ran).toBe(false);
  });

  it('can wait for the in-flight outcome and replay it instead of answering 409', async () => {
    const store = memoryStore();
    const first = createEngine({ store, ttlMs: DAY });
    // The slow work ends once the waiting engine has polled the store for its outcome (its first `get`).
    let polled = () => {};
    const waitingPolled = new Promise<void>((resolve) => (polled = resolve));
    const waiting = createEngine({
      store,
      ttlMs: DAY,
      waitForOutcomeMs: 5_000,
      onEvent: (e) => e.type === 'store_op' && e.op === 'get' && polled(),
    });
    const request = { scope: 's', key: 'k', fingerprint: 'f' };
    const slow = first.run(request, async () => {
      await waitingPolled;
      return answer(201, '{"slow":true}');
    });
    await tick();
    const replay = await waiting.run(request, async () => answer(500));
    expect(replay.replayed).toBe(true);
    expect(new TextDecoder().decode(replay.response.body)).toBe('{"slow":true}');
    await slow;
  });

  it('never lets a throwing onEvent hook change the outcome', async () => {
    const engine = createEngine({
      store: memoryStore(),
      ttlMs: DAY,
      onEvent: () => {
        throw new Error('metrics down');
      },
    });
    expect((await engine.run({ scope: 's', key: 'k', fingerprint: 'f' }, async () => answer(201))).replayed).toBe(
      false,
    );
  });

  describe('cacheSize: terminal records kept in process', () => {
    const cachedSetup = (cacheSize: number) => {
      const clock = manualClock(T0);
      const store = memoryStore();
      const engine = createEngine({ store, clock, ttlMs: DAY, cacheSize });
      return { clock, store, engine };
    };

    it('a hot replay and a hot mismatch cost 0 round trips', async () => {
      const { store, engine } = cachedSetup(10);
      const request = { scope: 's', key: 'k', fingerprint: 'f' };
      await engine.run(request, async () => answer(201, '{"id":"ch_1"}'));
      const trips = store.roundTrips;
      const replay = await engine.run(request, async () => answer(500));
      expect([replay.replayed, new TextDecoder().decode(replay.response.body)]).toEqual([true, '{"id":"ch_1"}']);
      await expect(engine.run({ ...request, fingerprint: 'other' }, async () => answer(201))).rejects.toMatchObject({
        code: 'FINGERPRINT_MISMATCH',
      });
      expect(store.roundTrips - trips).toBe(0);
    });

    it('never keeps in_progress or retryable failures: those go to the store every time', async () => {
      const { store, engine } = cachedSetup(10);
      const flaky = { scope: 's', key: 'flaky', fingerprint: 'f' };
      await engine.run(flaky, async () => answer(503));
      let trips = store.roundTrips;
      expect((await engine.run(flaky, async () => answer(201))).replayed).toBe(false);
      expect(store.roundTrips - trips).toBe(2);

      let finish = () => {};
      const slow = { scope: 's', key: 'slow', fingerprint: 'f' };
      const first = engine.run(slow, () => new Promise((resolve) => (finish = () => resolve(answer(201)))));
      await tick();
      trips = store.roundTrips;
      await expect(engine.run(slow, async () => answer(201))).rejects.toMatchObject({ code: 'IN_FLIGHT' });
      expect(store.roundTrips - trips).toBe(1);
      finish();
      await first;
    });

    it('respects expiry: past expiresAt the store decides and the work runs again', async () => {
      const { store, engine, clock } = cachedSetup(10);
      const request = { scope: 's', key: 'k', fingerprint: 'f' };
      let runs = 0;
      await engine.run(request, async () => (runs++, answer(201)));
      clock.advance(DAY);
      const trips = store.roundTrips;
      expect((await engine.run(request, async () => (runs++, answer(201)))).replayed).toBe(false);
      expect([runs, store.roundTrips - trips]).toEqual([2, 2]);
    });

    it('holds at most cacheSize records, evicting the least recently used', async () => {
      const { store, engine } = cachedSetup(2);
      const request = (key: string) => ({ scope: 's', key, fingerprint: 'f' });
      for (const key of ['a', 'b', 'c']) await engine.run(request(key), async () => answer(201));
      const trips = store.roundTrips;
      await engine.run(request('c'), async () => answer(500));
      await engine.run(request('b'), async () => answer(500));
      expect(store.roundTrips - trips).toBe(0);
      await engine.run(request('a'), async () => answer(500));
      expect(store.roundTrips - trips).toBe(1);
    });

    it('is off by default and validated by name', async () => {
      const store = memoryStore();
      const engine = createEngine({ store, ttlMs: DAY });
      const request = { scope: 's', key: 'k', fingerprint: 'f' };
      await engine.run(request, async () => answer(201));
      const trips = store.roundTrips;
      await engine.run(request, async () => answer(201));
      expect(store.roundTrips - trips).toBe(1);
      expect(() => createEngine({ store, cacheSize: -1 })).toThrow(
        'Expected `cacheSize` to be a non-negative integer, got -1.',
      );
    });
  });
});

describe('engine.begin: the phases', () => {
  it('hands out a lease, settles it exactly once, and leaves nothing renewing', async () => {
    const { engine, request, store, clock } = setup({ leaseMs: 3_000 });
    const decision = await engine.begin(request);
    if (decision.kind !== 'lease') throw new Error(`expected a lease, got ${decision.kind}`);
    const { lease } = decision;
    expect(engine.activeLeases).toBe(1);
    expect(lease.settled).toBe(false);
    const first = lease.complete(answer(201));
    // Every later settle returns the first settlement and writes nothing more.
    const [a, b, c] = await Promise.all([first, lease.fail(), lease.release()]);
    expect(a).toBe(b);
    expect(b).toBe(c);
    expect(a.ok).toBe(true);
    expect(lease.settled).toBe(true);
    expect(engine.activeLeases).toBe(0);
    const record = await store.get(recordPk('acct_a', 'k1'));
    expect(record?.status).toBe('succeeded');
    // No renewal is scheduled after the settlement: advancing far past the lease changes nothing.
    const trips = store.roundTrips;
    await step(clock, 30_000, 500);
    expect(store.roundTrips).toBe(trips);
  });

  it('answers a replay and a refusal as values, never by throwing', async () => {
    const { engine, request } = setup();
    const held = await engine.begin(request);
    expect(held.kind).toBe('lease');
    const busy = await engine.begin(request);
    expect(busy.kind === 'refused' && busy.error.code).toBe('IN_FLIGHT');
    const mismatch = await engine.begin({ ...request, fingerprint: 'other' });
    expect(mismatch.kind === 'refused' && mismatch.error.code).toBe('FINGERPRINT_MISMATCH');
    if (held.kind === 'lease') await held.lease.complete(answer(201, 'done'));
    const replay = await engine.begin(request);
    expect(replay.kind === 'replay' && new TextDecoder().decode(replay.response.body)).toBe('done');
  });

  it('a store failure at the claim is a refusal (STORE_UNAVAILABLE), and no lease is left', async () => {
    const store = memoryStore();
    const broken: IdempotencyStore<undefined> = Object.assign(Object.create(store) as IdempotencyStore<undefined>, {
      claim: () => Promise.reject(new Error('connection refused')),
    });
    const { engine, request } = setup({ store: broken });
    const decision = await engine.begin(request);
    expect(decision.kind === 'refused' && decision.error.code).toBe('STORE_UNAVAILABLE');
    expect(engine.activeLeases).toBe(0);
  });

  it('a completion the store fails settles as STORE_UNAVAILABLE and stops the renewals', async () => {
    const store = memoryStore();
    let failComplete = false;
    const flaky: IdempotencyStore<undefined> = Object.assign(Object.create(store) as IdempotencyStore<undefined>, {
      complete: (request: Parameters<typeof store.complete>[0]) =>
        failComplete ? Promise.reject(new Error('connection reset')) : store.complete(request),
    });
    const { engine, request, clock } = setup({ store: flaky, leaseMs: 3_000 });
    const decision = await engine.begin(request);
    if (decision.kind !== 'lease') throw new Error('expected a lease');
    failComplete = true;
    const settled = await decision.lease.complete(answer(201));
    expect(settled.ok === false && settled.error.code).toBe('STORE_UNAVAILABLE');
    expect(engine.activeLeases).toBe(0);
    const trips = store.roundTrips;
    await step(clock, 30_000, 500);
    expect(store.roundTrips).toBe(trips);
  });
});

describe('effects commit only with a final outcome', () => {
  for (const status of [500, 503, 408, 429]) {
    it(`a ${status} does not commit the work's effects; the retry runs and commits them once`, async () => {
      const { engine, request } = setup();
      const ledger: string[] = [];
      const work = (s: number) => async (): Promise<WorkResult<undefined>> => ({
        ...answer(s),
        effects: () => void ledger.push(`charge ${s}`),
      });
      const first = await engine.run(request, work(status));
      expect(first.record?.status).toBe('failed');
      expect(first.record?.retryable).toBe(true);
      expect(ledger).toEqual([]);
      const second = await engine.run(request, work(201));
      expect(second.replayed).toBe(false);
      expect(ledger).toEqual(['charge 201']);
      const third = await engine.run(request, work(201));
      expect(third.replayed).toBe(true);
      expect(ledger).toEqual(['charge 201']);
    });
  }

  it('a final refusal (402) commits its effects with the record, once', async () => {
    const { engine, request } = setup();
    const ledger: string[] = [];
    const work = async (): Promise<WorkResult<undefined>> => ({
      ...answer(402),
      effects: () => void ledger.push('decline'),
    });
    await engine.run(request, work);
    await engine.run(request, work);
    expect(ledger).toEqual(['decline']);
  });
});

describe('a 303 See Other is final', () => {
  it('is replayed to the retry; the work ran once', async () => {
    const { engine, request } = setup();
    let runs = 0;
    const work = async (): Promise<WorkResult<undefined>> => {
      runs++;
      return { response: { status: 303, headers: [['location', '/v1/charges/ch_1']], body: new Uint8Array(0) } };
    };
    await engine.run(request, work);
    const retry = await engine.run(request, work);
    expect(runs).toBe(1);
    expect(retry.replayed).toBe(true);
    expect(retry.response.status).toBe(303);
    expect(retry.response.headers).toEqual([['location', '/v1/charges/ch_1']]);
  });
});
