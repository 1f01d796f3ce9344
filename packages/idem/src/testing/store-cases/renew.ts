/**
 * @module The conformance cases of `renew`: the lease extended from now, past the original expiry, and never
 * shortened by a late renewal; each of the lease and the expiry kept at the later of stored and requested.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { LEASE, T0, TTL } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function renewCases<Tx>(kit: StoreKit<Tx>): void {
  const { request, claimed } = kit;
  it('renew with the token extends the lease from now and sets expiresAt as given', async () => {
    const req = request();
    const record = await claimed(req);
    const renewal = { pk: req.pk, token: req.token, now: T0 + 4_000, leaseMs: LEASE, expiresAt: T0 + TTL + 1 };
    expect(await kit.store.renew(renewal)).toEqual({ ok: true });
    expect(await kit.store.get(req.pk)).toEqual({
      ...record,
      leaseExpiresAt: T0 + 4_000 + LEASE,
      expiresAt: T0 + TTL + 1,
    });
  });

  it('a renewed lease outlives the original expiresAt: a claim after it meets the running attempt', async () => {
    // A short ttl, and work that runs past it while renewing its lease (the engine passes
    // expiresAt = max(previous expiresAt, now + leaseMs)).
    const req = request({ ttlMs: LEASE + 5_000 });
    const record = await claimed(req);
    const now = T0 + LEASE - 1;
    const expiresAt = now + LEASE;
    expect(await kit.store.renew({ pk: req.pk, token: req.token, now, leaseMs: LEASE, expiresAt })).toEqual({
      ok: true,
    });
    const renewed = { ...record, leaseExpiresAt: now + LEASE, expiresAt };
    expect(await kit.store.get(req.pk)).toEqual(renewed);
    // After the original expiresAt (T0 + 15 s), before the lease ends (T0 + 20 s - 1 ms).
    const retry = await kit.store.claim({ ...req, token: randomUUID(), id: randomUUID(), now: T0 + LEASE + 5_000 + 1 });
    expect(retry).toEqual({ kind: 'existing', record: renewed });
    expect(await kit.store.get(req.pk)).toEqual(renewed);
  });

  it('a late renewal with an older `now` does not shorten the lease', async () => {
    // The engine gave up on a renewal stuck on a dead connection and sent a newer one, which landed first.
    const req = request();
    const record = await claimed(req);
    const renew = (now: number, expiresAt: number) =>
      kit.store.renew({ pk: req.pk, token: req.token, now, leaseMs: LEASE, expiresAt });
    expect(await renew(T0 + 200, T0 + TTL + 200)).toEqual({ ok: true });
    const renewed = { ...record, leaseExpiresAt: T0 + 200 + LEASE, expiresAt: T0 + TTL + 200 };
    expect(await renew(T0 + 100, T0 + TTL + 100)).toEqual({ ok: true });
    expect(await kit.store.get(req.pk)).toEqual(renewed);
    // Past the stale lease (T0 + 100 + LEASE), before the one the store holds.
    const other = await kit.store.claim({ ...req, token: randomUUID(), id: randomUUID(), now: T0 + 100 + LEASE + 1 });
    expect(other).toEqual({ kind: 'existing', record: renewed });
  });

  it('renew keeps each of the lease and the expiry at the later of stored and requested', async () => {
    const req = request();
    const record = await claimed(req);
    const renewal = { pk: req.pk, token: req.token, leaseMs: LEASE };
    expect(await kit.store.renew({ ...renewal, now: T0 + 200, expiresAt: T0 + TTL + 500 })).toEqual({ ok: true });
    // A newer lease with an older expiry: the lease moves, the expiry stays.
    expect(await kit.store.renew({ ...renewal, now: T0 + 300, expiresAt: T0 + TTL })).toEqual({ ok: true });
    const moved = { ...record, leaseExpiresAt: T0 + 300 + LEASE, expiresAt: T0 + TTL + 500 };
    expect(await kit.store.get(req.pk)).toEqual(moved);
    // An older lease with a newer expiry: the expiry moves, the lease stays.
    expect(await kit.store.renew({ ...renewal, now: T0 + 250, expiresAt: T0 + TTL + 900 })).toEqual({ ok: true });
    expect(await kit.store.get(req.pk)).toEqual({ ...moved, expiresAt: T0 + TTL + 900 });
  });
}
