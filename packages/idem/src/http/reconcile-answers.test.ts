/**
 * A `reconcile` answer whose state and status disagree is a failed hook (docs/DESIGN.md: Takeover policy), as
 * `idem records resolve` refuses it: `succeeded` takes 200–399, `failed` 400–599. Otherwise 503
 * `idempotency-reconcile-failed`, nothing runs and nothing is written (the record stays in progress).
 */
import { describe, expect, it } from 'vitest';
import { manualClock } from '../core/clock.js';
import { recordPk } from '../core/key.js';
import { memoryStore } from '../stores/memory/index.js';
import { waitFor } from '../testing/fixtures.js';
import { idempotency } from './middleware.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 1_000;
const KEY = 'order-7';
const charge = () =>
  new Request('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': KEY, 'content-type': 'application/json' },
    body: '{"amount":500}',
  });

/** A dead holder (effect made, frozen), then a retry past its lease whose hook answers `state` with `status`. */
async function reconciled(state: 'succeeded' | 'failed', status: number) {
  const store = memoryStore();
  let effects = 0;
  const base = { store, scope: 'single-tenant', leaseMs: LEASE, ttlMs: 86_400_000 } as const;
  void idempotency({ ...base, clock: manualClock(T0) })(() => {
    effects++;
    return new Promise<Response>(() => {});
  })(charge());
  await waitFor('the first attempt made its effect', () => effects === 1);
  const retry = idempotency({
    ...base,
    clock: manualClock(T0 + LEASE + 1),
    takeover: 'reconcile',
    reconcile: () => ({ state, response: new Response('from the ledger', { status }) }),
  })(() => {
    effects++;
    return new Response('ran', { status: 201 });
  });
  const answer = await retry(charge());
  const problem = answer.headers.get('content-type') === 'application/problem+json';
  const record = await store.get(recordPk('single-tenant', KEY));
  return [
    answer.status,
    problem ? ((await answer.json()) as { type: string }).type : await answer.text(),
    record?.status,
    effects,
  ];
}

describe('reconcile answers checked like idem records resolve', () => {
  it.each([
    ['succeeded', 500],
    ['succeeded', 400],
    ['failed', 201],
    ['failed', 399],
  ] as const)('%s with %i: 503 reconcile-failed, nothing run, the record still in progress', async (state, status) => {
    expect(await reconciled(state, status)).toEqual([
      503,
      'urn:idem:problem:idempotency-reconcile-failed',
      'in_progress',
      1,
    ]);
  });

  it.each([
    ['succeeded', 200, 'succeeded'],
    ['succeeded', 399, 'succeeded'],
    ['failed', 400, 'failed'],
    ['failed', 599, 'failed'],
  ] as const)('%s with %i: recorded and replayed, nothing run', async (state, status, recorded) => {
    expect(await reconciled(state, status)).toEqual([status, 'from the ledger', recorded, 1]);
  });
});
