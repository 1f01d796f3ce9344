/** The SQLite store's sweep: batches, limits, and a yield to the event loop between batches. */
import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { freshStore } from '#test/fixtures/sqlite.js';
import { T0, TTL } from '../../testing/fixtures.js';

describe('sqlite store: sweep', () => {
  /** Inserts `count` finished records directly (one statement), expiring at `expiresAt`. */
  const seed = (database: Database.Database, count: number, expiresAt: number): void => {
    database
      .prepare(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @count)
         INSERT INTO idem_records (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable)
         SELECT 'IDEMPOTENCY#acct_sweep#' || @prefix || i, 'acct_sweep', @prefix || i, 'succeeded', 'f', 'id' || i, 't' || i,
           @claimedAt, @claimedAt, @expiresAt, 0 FROM n`,
      )
      .run({ count, prefix: randomUUID(), claimedAt: expiresAt - TTL, expiresAt });
  };
  const countWhere = (database: Database.Database, condition: string, now: number) =>
    database.prepare(`SELECT count(*) FROM idem_records WHERE ${condition}`).pluck().get({ now });

  it('deletes 2500 expired records in batches of 1000 — 3 round trips — and keeps the 10 live ones', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    seed(store.database, 10, T0 + 1);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000 })).toBe(2_500);
    // 1000 + 1000 + 500: the third batch deletes fewer than a batch, so it is the last.
    expect(store.roundTrips - before).toBe(3);
    expect(countWhere(store.database, 'expires_at <= @now', T0)).toBe(0);
    expect(countWhere(store.database, 'expires_at > @now', T0)).toBe(10);
    await store.close();
  });

  it('a whole number of full batches takes one more, empty, batch to know it is done', async () => {
    const store = await freshStore();
    seed(store.database, 3_000, T0);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000 })).toBe(3_000);
    expect(store.roundTrips - before).toBe(4);
    await store.close();
  });

  it('stops at limit, capping the last batch', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000, limit: 1_500 })).toBe(1_500);
    expect(store.roundTrips - before).toBe(2);
    expect(countWhere(store.database, 'expires_at <= @now', T0)).toBe(1_000);
    await store.close();
  });

  it('yields to the event loop between batches', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    const events: Array<string | number> = [];
    // Queued before the sweep starts, so it runs at the sweep's first yield: after batch 1, before batch 2.
    setImmediate(() => events.push(countWhere(store.database, 'expires_at <= @now', T0) as number));
    const sweeping = store.sweep({ now: T0, batchSize: 1_000 });
    expect(await sweeping).toBe(2_500);
    events.push('swept');
    expect(events).toEqual([1_500, 'swept']);
    await store.close();
  });

  it('refuses a batch size that is not a positive integer', async () => {
    const store = await freshStore();
    await expect(store.sweep({ now: T0, batchSize: 0 })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: 'Expected `batchSize` to be a positive integer, got 0.',
    });
    await store.close();
  });
});
