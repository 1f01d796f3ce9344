/**
 * @module The conformance case of the round-trip budget (docs/DESIGN.md): through the engine, a new key takes 2
 * round trips; a replay, a conflict and a mismatch one each.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { manualClock } from '../../core/clock.js';
import { createEngine } from '../../core/engine.js';
import { LEASE, T0, tripMeter } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function budgetCase<Tx>(kit: StoreKit<Tx>): void {
  const { scope, refusedClaimTrips } = kit;
  it('the engine meets the round-trip budget: new 2, replay 1, conflict 1, mismatch 1', async () => {
    const clock = manualClock(T0);
    const engine = createEngine({ store: kit.store, clock, leaseMs: LEASE, ttlMs: 24 * 3_600_000 });
    const run = { scope, key: randomUUID(), fingerprint: 'a'.repeat(64) };
    const ok = { response: { status: 201, headers: [], body: new Uint8Array([1, 2, 3]) } };
    const measure = tripMeter(kit.store);
    await engine.run(run, async () => ok);
    expect(measure()).toBe(2);
    const replay = await engine.run(run, async () => ok);
    expect(replay.replayed).toBe(true);
    expect(measure()).toBe(refusedClaimTrips);
    await expect(engine.run({ ...run, fingerprint: 'b'.repeat(64) }, async () => ok)).rejects.toMatchObject({
      code: 'FINGERPRINT_MISMATCH',
    });
    expect(measure()).toBe(refusedClaimTrips);

    const slow = { ...run, key: randomUUID() };
    let release = () => {};
    let started = () => {};
    const running = new Promise<void>((resolve) => (started = resolve));
    const first = engine.run(slow, () => {
      started(); // the claim has landed: the work runs under it
      return new Promise((resolve) => (release = () => resolve(ok)));
    });
    await running;
    measure();
    await expect(engine.run(slow, async () => ok)).rejects.toMatchObject({ code: 'IN_FLIGHT', retryAfterMs: LEASE });
    expect(measure()).toBe(refusedClaimTrips);
    release();
    await first;
  });
}
