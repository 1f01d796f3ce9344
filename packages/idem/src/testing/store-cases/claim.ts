/**
 * @module The conformance cases of the claim: a fresh claim, a refused one in the same round trip, and 50 at once
 * of which exactly one wins.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import type { IdempotencyRecord } from '../../core/record.js';
import { claimedRecord, T0 } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function claimCases<Tx>(kit: StoreKit<Tx>): void {
  const { request, claimed, refusedClaimTrips, contendedClaimExtraTrips } = kit;
  it('a fresh claim writes in_progress with the request token, id and times, in one round trip', async () => {
    const req = request();
    const before = kit.store.roundTrips;
    const record = await claimed(req);
    expect(kit.store.roundTrips - before).toBe(1);
    expect(record).toEqual(claimedRecord(req));
    expect(await kit.store.get(req.pk)).toEqual(record);
  });

  it('a second claim of a live key returns the existing record in the same round trip', async () => {
    const first = request();
    await claimed(first);
    const before = kit.store.roundTrips;
    const second = await kit.store.claim({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + 5 });
    expect(kit.store.roundTrips - before).toBe(refusedClaimTrips);
    expect(second.kind).toBe('existing');
    expect(second.record.token).toBe(first.token);
    expect(second.record.id).toBe(first.id);
  });

  it('50 concurrent claims of one key: exactly one is claimed, the rest see the winner', async () => {
    const base = request();
    const attempts = Array.from({ length: 50 }, () => ({ ...base, token: randomUUID(), id: randomUUID() }));
    const before = kit.store.roundTrips;
    const results = await Promise.all(attempts.map((a) => kit.store.claim(a)));
    const winners = results.filter((r) => r.kind === 'claimed');
    expect(winners.length).toBe(1);
    const winner = winners[0] as { record: IdempotencyRecord };
    for (const r of results) expect(r.record.token).toBe(winner.record.token);
    const trips = kit.store.roundTrips - before;
    expect(trips).toBeGreaterThanOrEqual(1 + 49 * refusedClaimTrips);
    expect(trips).toBeLessThanOrEqual(1 + 49 * (refusedClaimTrips + contendedClaimExtraTrips));
    expect((await kit.store.get(base.pk))?.token).toBe(winner.record.token);
  });
}
