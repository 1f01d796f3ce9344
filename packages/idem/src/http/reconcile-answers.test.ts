/**
 * A `reconcile` answer whose state and status disagree is a failed hook (docs/DESIGN.md: Takeover policy), as
 * `idem records resolve` refuses it: `succeeded` takes 200–399, `failed` 400–599. Otherwise 503
 * `idempotency-reconcile-failed`, nothing runs and nothing is written (the record stays in progress).
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from '../core/key.js';
import { afterDeadHolder, charge, KEY } from './takeover.test-kit.js';

/** After a dead holder, a retry whose hook answers `state` with `status`: its answer, the record, the runs. */
async function reconciled(state: 'succeeded' | 'failed', status: number) {
  const t = await afterDeadHolder({
    takeover: 'reconcile',
    reconcile: () => ({ state, response: new Response('from the ledger', { status }) }),
  });
  const answer = await t.retry(charge());
  const problem = answer.headers.get('content-type') === 'application/problem+json';
  const body = problem ? ((await answer.json()) as { type: string }).type : await answer.text();
  const record = await t.store.get(recordPk('single-tenant', KEY));
  return [answer.status, body, record?.status, t.effects.length + t.runs()];
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
