/**
 * Hono's `timeout()` (hono/timeout) answers 504 while the handler's promise goes on. Mounted inside the adapter it
 * hides that promise; mounted outside, Hono drops the handler's own response once the 504 is out. Either way the
 * key is abandoned (held until its lease lapses), not freed. Executions are counted, and so are the ones at once.
 */
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { timeout } from 'hono/timeout';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { countedWork, signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, type IdempotencyVariables } from './index.js';

/** `timeout(ms)` in front of the adapter ('outside') or between it and the handler ('inside'). */
function timedApp(where: 'outside' | 'inside', hold: Promise<void>) {
  const store = memoryStore();
  const { seen, started, run } = countedWork(hold);
  const timedOut = signal();
  const onTime: MiddlewareHandler = async (c, next) => {
    await timeout(50)(c, next).catch((error: unknown) => {
      timedOut.resolve();
      throw error;
    });
  };
  const guard = idempotency<undefined>({ store, ttlMs: 86_400_000, leaseMs: 300, scope: 'single-tenant' });
  const app = new Hono<{ Variables: IdempotencyVariables }>();
  app.onError((error, c) => c.text(error.message, 'status' in error ? (error.status as 504) : 500));
  const handler = (c: Context<{ Variables: IdempotencyVariables }>) =>
    run(c.get('idempotency').reclaimed).then((charge) => c.json(charge, 201));
  if (where === 'outside') app.post('/v1/charges', onTime, guard, handler);
  else app.post('/v1/charges', guard, onTime, handler);
  const post = async (key: string) => {
    const response = await app.request('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: '{}',
    });
    return { status: response.status, body: await response.text() };
  };
  const record = async (key: string) => {
    const kept = await store.get(recordPk('single-tenant', key));
    return kept && { status: kept.status, retryable: kept.retryable, response: kept.response?.status ?? null };
  };
  return { post, record, seen, started, timedOut: timedOut.promise, engine: guard.engine };
}

const inUse = { status: 409, body: expect.stringContaining('idempotency-key-in-use') as string };

describe('idem/hono: hono/timeout answers 504 while the handler runs', () => {
  it.each(['inside', 'outside'] as const)(
    'mounted %s the adapter: the key is abandoned, not freed: 409 while the work runs, then one run at a time',
    async (where) => {
      const release = signal();
      const { post, record, seen, started, timedOut, engine } = timedApp(where, release.promise);
      const first = post('t1');
      await Promise.all([started, timedOut]);
      expect(await first).toEqual({ status: 504, body: 'Gateway Timeout' });
      expect([await post('t1'), await record('t1')]).toEqual([
        inUse,
        { status: 'in_progress', retryable: false, response: null },
      ]);
      release.resolve();
      // Once the abandoned lease lapses (one leaseMs), the next attempt takes over with the same id.
      await expect.poll(async () => (await post('t1')).status, { timeout: 5_000, interval: 20 }).toBe(201);
      expect([seen, await record('t1'), engine.activeLeases]).toEqual([
        { runs: 2, running: 0, most: 1, reclaimed: [false, true] },
        { status: 'succeeded', retryable: false, response: 201 },
        0,
      ]);
    },
  );
});

describe('idem/hono: a handler that never answers', () => {
  it('holds its key at most maxHoldMs: the client then gets 409, and the key ends failed and retryable', async () => {
    const store = memoryStore();
    const guard = idempotency({ store, ttlMs: 86_400_000, leaseMs: 300, maxHoldMs: 400, scope: 'single-tenant' });
    const app = new Hono<{ Variables: IdempotencyVariables }>();
    const signals: AbortSignal[] = [];
    app.post('/v1/charges', guard, async (c) => {
      signals.push(c.get('idempotency').signal);
      await new Promise(() => {});
      return c.text('never');
    });
    const response = await app.request('/v1/charges', { method: 'POST', headers: { 'idempotency-key': 'm1' } });
    const kept = await store.get(recordPk('single-tenant', 'm1'));
    expect([response.status, await response.text(), kept?.status, kept?.retryable, signals[0]?.aborted]).toEqual([
      409,
      expect.stringContaining('idempotency-lease-lost'),
      'failed',
      true,
      true,
    ]);
  });
});

it('takes maxHoldMs as an option, checked by name', () => {
  expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', maxHoldMs: -1 })).toThrow(/maxHoldMs/);
});
