/**
 * @module The conformance cases of the token: `complete` with it stores the outcome exactly; a stale token, or a
 * record already completed, is refused and changes nothing.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import type { Outcome } from '../../core/record.js';
import { LEASE, T0, TTL } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function fencingCases<Tx>(kit: StoreKit<Tx>): void {
  const { request, succeeded, claimed, complete, plain } = kit;
  it('complete with the token stores the outcome, response bytes and headers exactly', async () => {
    const req = request();
    const record = await claimed(req);
    expect(await complete(req, succeeded)).toEqual({ ok: true });
    expect(plain(await kit.store.get(req.pk))).toEqual(plain({ ...record, ...succeeded }));
  });

  it('a write with a stale token is refused and changes nothing', async () => {
    const req = request();
    await claimed(req);
    const before = plain(await kit.store.get(req.pk));
    const stale = randomUUID();
    expect(await complete(req, succeeded, stale)).toEqual({ ok: false });
    expect(
      await kit.store.renew({ pk: req.pk, token: stale, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL }),
    ).toEqual({ ok: false });
    expect(await kit.store.release({ pk: req.pk, token: stale })).toEqual({ ok: false });
    expect(plain(await kit.store.get(req.pk))).toEqual(before);
  });

  it('a completed record cannot be completed again, even with its token', async () => {
    const req = request();
    await claimed(req);
    await complete(req, succeeded);
    const after = plain(await kit.store.get(req.pk));
    const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
    expect(await complete(req, failed)).toEqual({ ok: false });
    expect(
      await kit.store.renew({ pk: req.pk, token: req.token, now: T0 + 2, leaseMs: LEASE, expiresAt: T0 + TTL }),
    ).toEqual({
      ok: false,
    });
    expect(plain(await kit.store.get(req.pk))).toEqual(after);
  });
}
