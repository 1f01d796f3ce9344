import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { IdempotencyError } from './errors.js';
import { idempotent, IdempotentFailure } from './function.js';

const DAY = 86_400_000;
interface Payout {
  readonly payoutId: string;
  readonly amount: number;
}

describe('idempotent(fn)', () => {
  it('runs once per key and returns the first result to every repeat, with a stable id', async () => {
    const ids: string[] = [];
    const pay = idempotent(
      async (payout: Payout, { id }) => {
        ids.push(id);
        return { paid: payout.amount, ref: `bank_${ids.length}` };
      },
      { store: memoryStore(), scope: 'single-tenant', ttlMs: DAY, key: (p) => p.payoutId },
    );
    const first = await pay({ payoutId: 'po_1', amount: 500 });
    const second = await pay({ payoutId: 'po_1', amount: 500 });
    expect(first).toEqual({ paid: 500, ref: 'bank_1' });
    expect(second).toEqual({ paid: 500, ref: 'bank_1' });
    expect(ids.length).toBe(1);
    expect(await pay({ payoutId: 'po_2', amount: 500 })).toEqual({ paid: 500, ref: 'bank_2' });
  });

  it('refuses a repeat with another payload, and a repeat while the first call runs', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let runs = 0;
    const pay = idempotent(
      async (payout: Payout) => {
        runs++;
        started();
        await gate;
        return payout.amount;
      },
      { store: memoryStore(), scope: 'single-tenant', ttlMs: DAY, key: (p) => p.payoutId },
    );
    const first = pay({ payoutId: 'po_1', amount: 500 });
    await running;
    await expect(pay({ payoutId: 'po_1', amount: 500 })).rejects.toMatchObject({ code: 'IN_FLIGHT' });
    release();
    expect(await first).toBe(500);
    const mismatch = await pay({ payoutId: 'po_1', amount: 501 }).catch((error: unknown) => error);
    expect(mismatch).toBeInstanceOf(IdempotencyError);
    expect((mismatch as IdempotencyError).code).toBe('FINGERPRINT_MISMATCH');
    expect(runs).toBe(1);
  });

  it('a retryable error lets the next delivery run again; a final one is recorded and thrown to every repeat', async () => {
    let runs = 0;
    class Declined extends Error {
      override readonly name = 'Declined';
    }
    const pay = idempotent(
      async (payout: Payout) => {
        runs++;
        if (runs === 1) throw new Error('bank timeout');
        if (payout.amount > 1000) throw new Declined('over the limit');
        return payout.amount;
      },
      {
        store: memoryStore(),
        scope: 'single-tenant',
        ttlMs: DAY,
        key: (p) => p.payoutId,
        isFinal: (e) => e instanceof Declined,
      },
    );
    await expect(pay({ payoutId: 'po_1', amount: 5000 })).rejects.toThrow('bank timeout');
    const final = await pay({ payoutId: 'po_1', amount: 5000 }).catch((error: unknown) => error);
    const repeat = await pay({ payoutId: 'po_1', amount: 5000 }).catch((error: unknown) => error);
    for (const error of [final, repeat]) {
      expect(error).toBeInstanceOf(IdempotentFailure);
      expect([(error as IdempotentFailure).originalName, (error as Error).message]).toEqual([
        'Declined',
        'over the limit',
      ]);
    }
    expect(runs).toBe(2);
  });

  it('a store that cannot be reached throws STORE_UNAVAILABLE and the function does not run', async () => {
    const store = memoryStore();
    const broken = Object.assign(Object.create(store) as typeof store, {
      claim: () => Promise.reject(new Error('down')),
    });
    let runs = 0;
    const pay = idempotent(async () => ++runs, { store: broken, scope: 'single-tenant', ttlMs: DAY, key: () => 'k' });
    await expect(pay(undefined)).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(runs).toBe(0);
  });

  it('scopes per call, and names bad options', async () => {
    let runs = 0;
    const pay = idempotent(async () => ++runs, {
      store: memoryStore(),
      ttlMs: DAY,
      scope: (m: { tenant: string; id: string }) => m.tenant,
      key: (m) => m.id,
    });
    expect([
      await pay({ tenant: 'a', id: '1' }),
      await pay({ tenant: 'b', id: '1' }),
      await pay({ tenant: 'a', id: '1' }),
    ]).toEqual([1, 2, 1]);
    // An empty tenant would put every such input in one shared key space: refused before anything runs.
    const empty = idempotent(async () => ++runs, { store: memoryStore(), ttlMs: DAY, scope: () => '', key: () => 'k' });
    await expect(empty(undefined)).rejects.toThrow('`scope(input)` must return a non-empty string.');
    expect(runs).toBe(2);
    expect(() =>
      idempotent(async () => 1, { store: memoryStore(), ttlMs: DAY, key: 'k' as never, scope: 's' }),
    ).toThrow('Expected `key` to be a function (input) => string, got "k".');
  });
});

describe('idempotent(fn): every path settles, and the work never runs twice', () => {
  it('a result that is not JSON is recorded as a final failure: thrown now and to every repeat, the work ran once', async () => {
    let runs = 0;
    const pay = idempotent(async () => ({ paid: (++runs, 500n) }), {
      store: memoryStore(),
      scope: 'single-tenant',
      ttlMs: DAY,
      key: () => 'k',
    });
    const first = await pay(undefined).catch((error: unknown) => error);
    const repeat = await pay(undefined).catch((error: unknown) => error);
    for (const error of [first, repeat]) {
      expect(error).toBeInstanceOf(IdempotentFailure);
      expect((error as IdempotentFailure).originalName).toBe('TypeError');
    }
    expect(runs).toBe(1);
    expect(pay.engine.activeLeases).toBe(0);
  });

  it('a result over the store’s limit is a final failure too, not a re-run on every delivery', async () => {
    const store = Object.assign(Object.create(memoryStore()) as ReturnType<typeof memoryStore>, {
      maxResponseBytes: 100,
    });
    let runs = 0;
    const pay = idempotent(async () => 'x'.repeat(200 + 0 * ++runs), {
      store,
      scope: 'single-tenant',
      ttlMs: DAY,
      key: () => 'k',
    });
    await expect(pay(undefined)).rejects.toThrow(
      'idempotent: the result is 202 bytes, over the 100 the store can keep.',
    );
    await expect(pay(undefined)).rejects.toBeInstanceOf(IdempotentFailure);
    expect(runs).toBe(1);
  });

  it('an isFinal that throws, or an error that cannot be printed, still settles the lease', async () => {
    let runs = 0;
    const pay = idempotent(
      async () => {
        runs++;
        throw Object.create(null) as Error;
      },
      {
        store: memoryStore(),
        scope: 'single-tenant',
        ttlMs: DAY,
        key: () => 'k',
        isFinal: () => {
          throw new Error('isFinal broke');
        },
      },
    );
    await expect(pay(undefined)).rejects.toBeDefined();
    expect(pay.engine.activeLeases).toBe(0);
    await expect(pay(undefined)).rejects.toBeDefined();
    expect(runs).toBe(2); // retryable: the next delivery runs again, never concurrently
  });

  it('keys and scopes with a lone surrogate are refused: a store encoding UTF-8 would merge them', async () => {
    let runs = 0;
    const pay = idempotent(async () => ++runs, {
      store: memoryStore(),
      scope: 'single-tenant',
      ttlMs: DAY,
      key: (id: string) => id,
    });
    await expect(pay('msg-\ud800')).rejects.toMatchObject({ code: 'KEY_INVALID' });
    expect(await pay('msg-\ud83d\ude00')).toBe(1);
    expect(runs).toBe(1);
  });
});
