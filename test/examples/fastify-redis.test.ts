/**
 * examples/fastify-redis: Fastify 5 on Redis (CommonJS, `require`), installed from the packed tarball, driven to
 * a replay. The work is counted in the example's own hash of charges; the example's keys live under a prefix of
 * its own, deleted afterwards.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_URL, serviceAvailable } from '../services.js';
import { REPLAYED, runToReplay, useExample } from './kit.js';

const available = await serviceAvailable('Redis', REDIS_URL);
const prefix = `idem-example-${process.pid}:`;
const redis = new Redis(REDIS_URL, { lazyConnect: true });
const example = useExample('fastify-redis', {
  enabled: available,
  cleanup: async () => {
    if (available) {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
    }
    redis.disconnect();
  },
});

describe.skipIf(!available)('examples/fastify-redis', () => {
  it('charges once, replays the retry byte for byte, refuses the reused key; one charge in Redis', async () => {
    const replay = await runToReplay(example(), process.execPath, ['server.js'], {
      env: { REDIS_URL, REDIS_PREFIX: prefix },
      headers: { authorization: 'Bearer acct_bob' },
      executions: () => redis.hlen(`${prefix}charges`),
    });
    expect(replay).toEqual(REPLAYED);
    // Only the example's own prefix was written: its charges and its records.
    const keys = (await redis.keys(`${prefix}*`)).filter((key) => !key.startsWith(`${prefix}idem:`));
    expect(keys).toEqual([`${prefix}charges`]);
  }, 120_000);
});
