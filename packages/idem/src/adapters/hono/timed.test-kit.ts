/**
 * @module For the Hono adapter's time tests (not part of the library): an app whose handler is held by a timeout
 * middleware in front of or behind the guard, with counted work, a `post`, and a `record` to read the key.
 */
import { Hono, type Context, type ErrorHandler, type MiddlewareHandler } from 'hono';
import type { HTTPException } from 'hono/http-exception';
import { timeout } from 'hono/timeout';
import { expect } from 'vitest';
import { recordPk } from '../../core/key.js';
import { countedWork, signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, type IdempotencyVariables } from './index.js';

/**
 * `timeout(ms)` in front of the adapter ('outside') or between it and the handler ('inside'), throwing `exception`
 * (its default, a 504, if none), answered by `onError`.
 */
export function timedApp(
  where: 'outside' | 'inside',
  hold: Promise<void>,
  { exception, onError }: { exception?: HTTPException; onError?: ErrorHandler } = {},
) {
  const store = memoryStore();
  const { seen, started, run } = countedWork(hold);
  const timedOut = signal();
  const onTime: MiddlewareHandler = async (c, next) => {
    await timeout(50, exception)(c, next).catch((error: unknown) => {
      timedOut.resolve();
      throw error;
    });
  };
  const guard = idempotency<undefined>({ store, ttlMs: 86_400_000, leaseMs: 300, scope: 'single-tenant' });
  const app = new Hono<{ Variables: IdempotencyVariables }>();
  app.onError(onError ?? ((error, c) => c.text(error.message, 'status' in error ? (error.status as 504) : 500)));
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

/**
 * The first attempt times out while its work runs: its client gets `first`, a retry meanwhile 409 (the key held,
 * in progress); once the work ends, a retry runs it again, never beside it.
 */
export async function timesOutOnce(
  where: 'outside' | 'inside',
  how: Parameters<typeof timedApp>[2],
  first: { status: number; body: string },
): Promise<void> {
  const release = signal();
  const { post, record, seen, started, timedOut, engine } = timedApp(where, release.promise, how);
  const answered = post('t1');
  await Promise.all([started, timedOut]);
  expect(await answered).toEqual(first);
  expect([await post('t1'), await record('t1')]).toEqual([
    { status: 409, body: expect.stringContaining('idempotency-key-in-use') as string },
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
}
