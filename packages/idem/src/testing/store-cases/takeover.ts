/**
 * @module The conformance cases of what a won claim reports as `takeover` (docs/DESIGN.md: Takeover policy): true
 * exactly when it replaced an `in_progress` record whose lease lapsed; false for a new key, an expired record, a
 * released key and a retryable failure — so a policy other than 'rerun' never quarantines a plain retry.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import type { ClaimRequest } from '../../core/record.js';
import { LEASE, T0, TTL } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function takeoverCases<Tx>(kit: StoreKit<Tx>): void {
  const { request, claimed, complete } = kit;
  const again = (req: ClaimRequest, now: number) =>
    kit.store.claim({ ...req, token: randomUUID(), id: randomUUID(), now });
  const reported = async (claim: ReturnType<typeof again>) => {
    const result = await claim;
    return result.kind === 'claimed' ? result.takeover : result.kind;
  };

  it('a claim reports takeover: true over a lapsed lease, false over a new key, a retryable failure or an expired record', async () => {
    const fresh = request();
    expect(await reported(kit.store.claim(fresh))).toBe(false);
    // Its lease lapses: the next claim takes it over, and says so.
    expect(await reported(again(fresh, T0 + LEASE))).toBe(true);

    const failed = request();
    await claimed(failed);
    await complete(failed, { status: 'failed', retryable: true, resultId: null, response: null });
    expect(await reported(again(failed, T0 + 1))).toBe(false);

    const expired = request();
    await claimed(expired);
    expect(await reported(again(expired, T0 + TTL))).toBe(false);

    const released = request();
    await claimed(released);
    await kit.store.release({ pk: released.pk, token: released.token });
    expect(await reported(again(released, T0 + 1))).toBe(false);
  });
}
