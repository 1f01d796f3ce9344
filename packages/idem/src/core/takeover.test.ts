/** The takeover policy of `idempotent()` (docs/DESIGN.md: Takeover policy): results and errors, not responses. */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { waitFor } from '../testing/fixtures.js';
import { manualClock } from './clock.js';
import { IdempotentFailure, idempotent, type IdempotentOptions } from './function.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 1_000;
interface Payout {
  readonly payoutId: string;
  readonly amount: number;
}
const payout: Payout = { payoutId: 'po_1', amount: 500 };

/** A first call frozen after its effect (its clock never moves), and a retry function past its lease. */
async function afterDeadCall(options: Partial<IdempotentOptions<Payout, never, { paid: string }>>) {
  const store = memoryStore();
  const base = { store, scope: 'single-tenant', key: (p: Payout) => p.payoutId, leaseMs: LEASE, ttlMs: 86_400_000 };
  const ids: string[] = [];
  const frozen = idempotent(
    async (_p: Payout, { id }) => {
      ids.push(id);
      return new Promise<{ paid: string }>(() => {});
    },
    { ...base, clock: manualClock(T0) },
  );
  void frozen(payout);
  await waitFor('the first call made its effect', () => ids.length === 1);
  let runs = 0;
  const retry = idempotent(
    async (_p: Payout, { id }) => {
      runs++;
      return { paid: id };
    },
    { ...base, clock: manualClock(T0 + LEASE + 1), ...options },
  );
  return { retry, runs: () => runs, firstId: ids[0] as string };
}

describe('idempotent(): takeover policy', () => {
  it("reconcile 'succeeded': every call gets the reconciled result; fn does not run", async () => {
    const t = await afterDeadCall({
      takeover: 'reconcile',
      reconcile: ({ id }) => ({ state: 'succeeded', response: { paid: id } }),
    });
    expect(await t.retry(payout)).toEqual({ paid: t.firstId });
    expect(await t.retry(payout)).toEqual({ paid: t.firstId });
    expect(t.runs()).toBe(0);
  });

  it("reconcile 'failed': every call throws an IdempotentFailure with the answer's name and message", async () => {
    const t = await afterDeadCall({
      takeover: 'reconcile',
      reconcile: () => ({
        state: 'failed',
        response: Object.assign(new Error('insufficient funds'), { name: 'Declined' }),
      }),
    });
    for (let i = 0; i < 2; i++) {
      const error = await t.retry(payout).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotentFailure);
      expect([(error as IdempotentFailure).originalName, (error as Error).message]).toEqual([
        'Declined',
        'insufficient funds',
      ]);
    }
    expect(t.runs()).toBe(0);
  });

  it("reconcile 'not_done' runs fn under the same id; a throwing hook throws RECONCILE_FAILED and runs nothing", async () => {
    const done = await afterDeadCall({ takeover: 'reconcile', reconcile: () => ({ state: 'not_done' }) });
    expect([await done.retry(payout), done.runs()]).toEqual([{ paid: done.firstId }, 1]);
    const broken = await afterDeadCall({
      takeover: 'reconcile',
      reconcile: () => Promise.reject(new Error('ledger down')),
    });
    await expect(broken.retry(payout)).rejects.toMatchObject({ code: 'RECONCILE_FAILED' });
    expect(broken.runs()).toBe(0);
  });

  it('quarantine: throws OUTCOME_UNKNOWN and fn does not run', async () => {
    const t = await afterDeadCall({ takeover: 'quarantine' });
    await expect(t.retry(payout)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
    expect(t.runs()).toBe(0);
  });
});
