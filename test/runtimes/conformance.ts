/**
 * @module Entry bundled by `runtimes.test.ts` and run on each runtime: the store conformance suite
 * (`describeStoreConformance`, unchanged, on the Vitest shim) against memory, Redis (ioredis) and PostgreSQL (pg).
 * Which stores run and where their services are come from the environment; it prints one line,
 * `IDEM_RESULT <json>`, and exits 0 whatever the cases did: the test asserts on that line.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { describeStoreConformance } from '../../packages/idem/src/testing/index.js';
import type { IdempotencyStore } from '../../packages/idem/src/core/record.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { redisStore } from '../../packages/idem/src/stores/redis/index.js';
import { run } from './vitest-shim.js';
import { runtimeName } from './runtime.js';

const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
const stores = (env.IDEM_STORES ?? 'memory').split(',').filter(Boolean);
const closing: Array<() => Promise<unknown>> = [];

/** The store as the suite sees it, delegating (its `#private` fields need `this`), with `close` also running `cleanup`. */
const withCleanup = <Tx>(store: IdempotencyStore<Tx>, cleanup: () => Promise<void>): IdempotencyStore<Tx> => ({
  name: store.name,
  get roundTrips() {
    return store.roundTrips;
  },
  claim: (r) => store.claim(r),
  complete: (r) => store.complete(r),
  renew: (r) => store.renew(r),
  release: (r) => store.release(r),
  get: (pk) => store.get(pk),
  sweep: (r) => store.sweep(r),
  list: (r) => store.list(r),
  close: async () => {
    await store.close();
    await cleanup();
  },
});

if (stores.includes('memory')) describeStoreConformance({ name: 'memory', create: async () => memoryStore() });

if (stores.includes('redis')) {
  const url = env.IDEM_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
  const admin = new Redis(url);
  closing.push(() => admin.quit());
  describeStoreConformance({
    name: 'redis (ioredis)',
    create: async () => {
      const client = new Redis(url);
      const prefix = `idemtest:runtimes:${crypto.randomUUID()}:`;
      const store = redisStore({ client, prefix });
      await store.load();
      return withCleanup(store, async () => {
        let cursor = '0';
        do {
          const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
          cursor = next;
          if (keys.length > 0) await admin.del(...keys);
        } while (cursor !== '0');
        await client.quit();
      });
    },
  });
}

if (stores.includes('postgres')) {
  const pool = new pg.Pool({
    connectionString: env.IDEM_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    max: 20,
  });
  closing.push(() => pool.end());
  describeStoreConformance({
    name: 'postgres (pg)',
    contendedClaimExtraTrips: 1,
    create: async () => {
      const schema = `idem_rt_${crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`;
      const store = postgresStore<pg.PoolClient>({ pool, schema });
      await store.migrate();
      return withCleanup(store, async () => {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      });
    },
  });
}

const started = performance.now();
const results = await run();
for (const close of closing) await close();
console.log(
  `IDEM_RESULT ${JSON.stringify({ runtime: runtimeName(), ms: Math.round(performance.now() - started), results })}`,
);
