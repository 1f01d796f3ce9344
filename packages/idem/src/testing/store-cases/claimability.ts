/**
 * @module The conformance cases of who may claim a key again: after a release anyone; a live lease no one; a dead
 * lease or a retryable failure the same payload only, keeping the id; a final failure no one (it is replayed);
 * an expired record anyone, with a fresh id.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import type { Outcome } from '../../core/record.js';
import { LEASE, T0, TTL } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function claimabilityCases<Tx>(kit: StoreKit<Tx>): void {
  const { request, succeeded, claimed, complete, plain } = kit;
  it('release with the token deletes the record and frees the key for any payload', async () => {
    const req = request();
    await claimed(req);
    expect(await kit.store.release({ pk: req.pk, token: req.token })).toEqual({ ok: true });
    expect(await kit.store.get(req.pk)).toBeNull();
    const other = { ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), id: randomUUID() };
    expect((await claimed(other)).id).toBe(other.id);
  });

  it('a live in_progress record is not claimable, even with the same fingerprint', async () => {
    const req = request();
    await claimed(req);
    const again = await kit.store.claim({ ...req, token: randomUUID(), now: T0 + LEASE - 1 });
    expect(again.kind).toBe('existing');
  });

  it('a dead lease is taken over with the same fingerprint only, keeping the id with a new token', async () => {
    const req = request();
    await claimed(req);
    const later = T0 + LEASE;
    const other = await kit.store.claim({ ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), now: later });
    expect(other.kind).toBe('existing');
    expect(other.record.token).toBe(req.token);
    const takeover = { ...req, token: randomUUID(), id: randomUUID(), now: later };
    const record = await claimed(takeover);
    expect(record.id).toBe(req.id);
    expect(record.token).toBe(takeover.token);
    expect(record.claimedAt).toBe(later);
    expect(record.leaseExpiresAt).toBe(later + LEASE);
    // The first owner is fenced out.
    expect(await complete(req, succeeded)).toEqual({ ok: false });
    expect((await kit.store.get(req.pk))?.status).toBe('in_progress');
  });

  it('a retryable failure is claimable with the same fingerprint only, keeping the id', async () => {
    const req = request();
    await claimed(req);
    await complete(req, { status: 'failed', retryable: true, resultId: null, response: null });
    const other = await kit.store.claim({ ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), now: T0 + 2 });
    expect(other.kind).toBe('existing');
    const retry = { ...req, token: randomUUID(), id: randomUUID(), now: T0 + 2 };
    const record = await claimed(retry);
    expect(record.id).toBe(req.id);
    expect(record.status).toBe('in_progress');
    expect(record.response).toBeNull();
  });

  it('a final failure is not claimable: it is returned for replay, response intact', async () => {
    const req = request();
    await claimed(req);
    const declined: Outcome = {
      status: 'failed',
      retryable: false,
      resultId: 'ch_declined',
      response: {
        status: 402,
        headers: [['content-type', 'application/problem+json']],
        body: new TextEncoder().encode('{"declined":true}'),
      },
    };
    await complete(req, declined);
    const again = await kit.store.claim({ ...req, token: randomUUID(), now: T0 + LEASE * 2 });
    expect(again.kind).toBe('existing');
    expect(plain(again.record)).toEqual(plain({ ...again.record, ...declined }));
  });

  it('an expired record is claimable by any payload, with a fresh id', async () => {
    const req = request();
    await claimed(req);
    await complete(req, succeeded);
    const fresh = { ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), id: randomUUID(), now: T0 + TTL };
    const record = await claimed(fresh);
    expect(record.id).toBe(fresh.id);
    expect(record.fingerprint).toBe(fresh.fingerprint);
    expect(record.response).toBeNull();
  });
}
