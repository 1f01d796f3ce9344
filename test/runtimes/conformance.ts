/**
 * @module Entry bundled by `runtimes.test.ts` and run on each runtime: the store conformance suite
 * (`describeStoreConformance`, unchanged, on the Vitest shim) against memory, Redis (ioredis) and PostgreSQL (pg).
 * Which stores run and where their services are come from the environment; it prints one line,
 * `IDEM_RESULT <json>`, and exits 0 whatever the cases did: the test asserts on that line.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { closingWith } from '../../packages/idem/src/testing/fixtures.js';
import { describeStoreConformance } from '../../packages/idem/src/testing/index.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { redisStore } from '../../packages/idem/src/stores/redis/index.js';
import { deleteKeysUnder } from '../fixtures/redis-keys.js';
import { run } from './vitest-shim.js';
import { runtimeName } from './runtime.js';

const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
const stores = (env.IDEM_STORES ?? 'memory').split(',').filter(Boolean);
const closing: Array<() => Promise<unknown>> = [];

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
      return closingWith(store, async () => {
        await deleteKeysUnder(admin, prefix);
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
      return closingWith(store, () => pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    },
  });
}

const started = performance.now();
const results = await run();
for (const close of closing) await close();
console.log(
  `IDEM_RESULT ${JSON.stringify({ runtime: runtimeName(), ms: Math.round(performance.now() - started), results })}`,
);
