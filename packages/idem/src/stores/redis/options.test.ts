/** The Redis store's options, its refusal of effects, and a closed store. */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_URL } from '#test/services.js';
import { admin, available, claimRequest, closing, ioredis, isolated, scope } from '#test/fixtures/redis.js';
import { recordPk } from '../../core/key.js';
import type { Outcome } from '../contract.js';
import { T0 } from '../../testing/fixtures.js';
import { fromNodeRedis, redisStore, type RedisClient } from './index.js';

describe.skipIf(!available)('redis store', () => {
  it('complete refuses effects (Redis cannot commit them with the record) and changes nothing', () =>
    closing(isolated(ioredis), async (store) => {
      const req = claimRequest();
      await store.claim(req);
      const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: null, response: null };
      await expect(
        store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome, effects: () => 1 }),
      ).rejects.toMatchObject({
        code: 'CONFIG_INVALID',
      });
      expect((await store.get(req.pk))?.status).toBe('in_progress');
    }));

  it('a closed store rejects calls and leaves the client open', async () => {
    const client = new Redis(REDIS_URL);
    try {
      const store = redisStore({ client, prefix: `idemtest:${randomUUID()}:` });
      await store.close();
      await expect(store.get(recordPk(scope, 'k'))).rejects.toThrow('redis store is closed');
      expect(store.roundTrips).toBe(0);
      expect(await client.ping()).toBe('PONG');
    } finally {
      await client.quit();
    }
  });

  it('options are validated at once, naming the option', () => {
    expect(() => redisStore({ client: admin, onRoundTrip: 'log' as never })).toThrow(
      'Expected `onRoundTrip` to be a function, got "log".',
    );
    expect(() => redisStore({ client: {} as RedisClient })).toThrow(
      'Expected `client` to be a Redis client with evalsha, eval, script and scan (an ioredis client, or fromNodeRedis(client)).',
    );
    expect(() => redisStore({ client: admin, prefix: 'a{b' })).toThrow(
      'Expected `prefix` to be a string without `{` or `}`, got "a{b".',
    );
    expect(() => redisStore({ client: admin, scanCount: 0 })).toThrow(
      'Expected `scanCount` to be a positive integer, got 0.',
    );
    expect(() => redisStore({ client: admin, replicas: 1.5 })).toThrow(
      'Expected `replicas` to be a non-negative integer, got 1.5.',
    );
    expect(() => redisStore({ client: admin, replicas: 1, replicaTimeoutMs: 0 })).toThrow(
      'Expected `replicaTimeoutMs` to be a positive integer (WAIT 0 would wait forever), got 0.',
    );
    // A node-redis client without multi(): fromNodeRedis offers no pipeline.
    const noPipeline = fromNodeRedis({
      evalSha: async () => null,
      eval: async () => null,
      scriptLoad: async () => null,
      scan: async () => ({ cursor: '0', keys: [] }),
    });
    expect('pipeline' in noPipeline).toBe(false);
    expect(() => redisStore({ client: noPipeline, replicas: 1 })).toThrow(
      'Expected `client` to be a client with pipeline() when `replicas` is set (an ioredis client, or fromNodeRedis(client) of one with multi()).',
    );
    expect(redisStore({ client: noPipeline, replicas: 0 }).name).toBe('redis');
  });
});
