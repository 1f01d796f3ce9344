/**
 * Removing what a cross-process test left in the shared services: its Postgres schema, its Redis keys.
 */
import pg from 'pg';
import { Redis } from 'ioredis';
import { deleteKeysUnder } from '../fixtures/redis-keys.js';
import { POSTGRES_URL, REDIS_URL } from '../services.js';

/** Drops `schema` and everything in it. */
export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** Deletes every key under `prefix`. */
export async function deleteRedisPrefix(prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL);
  try {
    await deleteKeysUnder(redis, prefix);
  } finally {
    redis.disconnect();
  }
}
