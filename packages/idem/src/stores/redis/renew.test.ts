import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_URL, serviceAvailable } from '../../../../../test/services.js';
import { recordPk } from '../../core/key.js';
import { redisStore } from './index.js';

const available = await serviceAvailable('Redis', REDIS_URL);

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;

describe.skipIf(!available)('redis store: a late renewal', () => {
  it('an older renewal landing after a newer one leaves the key’s native expiry (PTTL) where the newer put it', async () => {
    const client = new Redis(REDIS_URL);
    const prefix = `idemtest:${randomUUID()}:`;
    const store = redisStore({ client, prefix });
    const scope = 'acct_redis_renew';
    const key = randomUUID();
    const pk = recordPk(scope, key);
    const record = `${prefix}{IDEMPOTENCY#${scope}}#${key}`;
    const index = `${prefix}{IDEMPOTENCY#${scope}}:claims`;
    try {
      const token = randomUUID();
      const claim = { pk, scope, key, fingerprint: 'a'.repeat(64), token, id: randomUUID(), now: T0 };
      expect((await store.claim({ ...claim, leaseMs: LEASE, ttlMs: TTL })).kind).toBe('claimed');
      const renew = (now: number, expiresAt: number) => store.renew({ pk, token, now, leaseMs: LEASE, expiresAt });
      // The newer renewal asks for 3 × TTL from its now; the older one, landing late, for TTL from its own.
      expect(await renew(T0 + 200, T0 + 200 + 3 * TTL)).toEqual({ ok: true });
      expect(await renew(T0 + 100, T0 + 100 + TTL)).toEqual({ ok: true });
      const [recordTtl, indexTtl] = await Promise.all([client.pttl(record), client.pttl(index)]);
      expect(recordTtl).toBeGreaterThan(2 * TTL);
      expect(recordTtl).toBeLessThanOrEqual(3 * TTL);
      // A renewal leaves the index alone: it has no expiry (list and sweep prune it).
      expect(indexTtl).toBe(-1);
      expect(await client.hmget(record, 'leaseExpiresAt', 'expiresAt')).toEqual([
        String(T0 + 200 + LEASE),
        String(T0 + 200 + 3 * TTL),
      ]);
    } finally {
      await store.close();
      await client.del(record, index);
      await client.quit();
    }
  });
});
