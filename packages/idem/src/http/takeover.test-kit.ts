/**
 * What the takeover tests of the Web layer share: a dead first attempt (its effect made, then frozen mid-work on a
 * clock that never moves, so its lease is never renewed) and a retry gate over the same store, past that lease.
 */
import { manualClock } from '../core/clock.js';
import { memoryStore } from '../stores/memory/index.js';
import { waitFor } from '../testing/fixtures.js';
import { idempotency, type IdempotencyOptions } from './middleware.js';

export const T0 = Date.parse('2026-01-01T00:00:00Z');
export const LEASE = 1_000;
export const KEY = 'order-42';
export const charge = () =>
  new Request('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': KEY, 'content-type': 'application/json' },
    body: '{"amount":500}',
  });

/** A dead first attempt (its effect made, then frozen), and a retry gate with `options`, past that lease. */
export async function afterDeadHolder(options: Partial<IdempotencyOptions<never>>) {
  const store = memoryStore();
  const effects: string[] = [];
  const base = { store, scope: 'single-tenant', leaseMs: LEASE, ttlMs: 86_400_000 } as const;
  const dead = idempotency({ ...base, clock: manualClock(T0) });
  void dead((_request, { id }) => {
    effects.push(id);
    return new Promise<Response>(() => {}); // frozen mid-work: never answers, never renews
  })(charge());
  await waitFor('the first attempt made its effect', () => effects.length === 1);
  const clock = manualClock(T0 + LEASE + 1);
  let runs = 0;
  const seen: Array<{ id: string; reclaimed: boolean }> = [];
  const retry = idempotency({ ...base, clock, ...options })((_request, context) => {
    runs++;
    seen.push({ id: context.id, reclaimed: context.reclaimed });
    return Response.json({ charged: context.id }, { status: 201 });
  });
  return { store, effects, clock, retry, runs: () => runs, seen, firstId: () => effects[0] as string };
}
