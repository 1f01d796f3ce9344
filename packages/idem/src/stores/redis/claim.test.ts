/** The Redis store's claim under contention, and scripts resent after a lost reply. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { available, claimRequest, closing, ioredis, isolated } from '#test/fixtures/redis.js';
import { claimTwoHundredTimes } from '#test/fixtures/stores.js';
import type { Outcome } from '../contract.js';
import { T0 } from '../../testing/fixtures.js';
import type { RedisStore } from './index.js';

describe.skipIf(!available)('redis store', () => {
  it('200 concurrent claims of one key across 3 connections: exactly one is claimed', async () => {
    const prefix = `idemtest:${randomUUID()}:`;
    const stores = await Promise.all([1, 2, 3].map(() => isolated(ioredis, { prefix })));
    try {
      const base = claimRequest();
      const before = stores.reduce((sum, s) => sum + s.roundTrips, 0);
      const { token, total } = await claimTwoHundredTimes(stores, base);
      expect(total - before).toBe(200);
      expect((await (stores[0] as RedisStore).get(base.pk))?.token).toBe(token);
    } finally {
      for (const store of stores) await store.close();
    }
  });

  it('a script resent after its reply was lost (the same arguments again) counts as applied: claim, complete, release', async () => {
    // What ioredis's autoResendUnfulfilledCommands (on by default) does after a dropped connection: the server
    // runs the same EVALSHA twice.
    await closing(isolated(ioredis), async (store) => {
      const req = claimRequest();
      const first = await store.claim(req);
      expect(await store.claim(req)).toEqual({ kind: 'claimed', record: first.record });
      expect((await store.claim({ ...req, token: randomUUID() })).kind).toBe('existing');
      const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
      const completion = { pk: req.pk, token: req.token, now: T0 + 1, outcome };
      expect(await store.complete(completion)).toEqual({ ok: true });
      expect(await store.complete(completion)).toEqual({ ok: true });
      expect(await store.complete({ ...completion, outcome: { ...outcome, status: 'failed' } })).toEqual({ ok: false });
      expect(await store.complete({ ...completion, token: randomUUID() })).toEqual({ ok: false });
      const held = claimRequest();
      await store.claim(held);
      expect(await store.release({ pk: held.pk, token: held.token })).toEqual({ ok: true });
      expect(await store.release({ pk: held.pk, token: held.token })).toEqual({ ok: true });
      expect(await store.get(held.pk)).toBeNull();
    });
  });
});
