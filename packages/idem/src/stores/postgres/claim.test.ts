/** The PostgreSQL store's claim under contention, and its refusals: read-only, answered from a snapshot. */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL } from '#test/services.js';
import { available, blockedOn, insertClaim, isolated, pool, POSTGRES, request } from '#test/fixtures/postgres.js';
import { describeBlockedClaims } from '#test/fixtures/sql.js';
import { claimTwoHundredTimes, doneAndLive, expectRefusals } from '#test/fixtures/stores.js';
import { T0, tripMeter as trips, waitFor } from '../../testing/fixtures.js';
import { postgresStore } from './index.js';

describe.skipIf(!available)('postgres store', () => {
  describeBlockedClaims(POSTGRES);

  describe('claim under READ COMMITTED', () => {
    it('200 concurrent claims of one key from 3 pools (3 processes): exactly one claims', async () => {
      const { schema, drop } = await isolated();
      const pools = Array.from({ length: 3 }, () => new pg.Pool({ connectionString: POSTGRES_URL, max: 10 }));
      try {
        const stores = pools.map((p) => postgresStore<pg.PoolClient>({ pool: p, schema }));
        const base = request();
        const { token, total } = await claimTwoHundredTimes(stores, base);
        expect((await postgresStore({ pool, schema }).get(base.pk))?.token).toBe(token);
        const extra = total - 200;
        console.log(
          `postgres: 200 contended claims took ${total} round trips; ${extra} re-ran after the READ COMMITTED gap`,
        );
        expect(extra).toBeGreaterThanOrEqual(0);
        expect(extra).toBeLessThanOrEqual(199);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await drop();
      }
    });

    it('under a SERIALIZABLE default the same race raises 40001, and the claim retries it: 2 trips', async () => {
      const strict = new pg.Pool({
        connectionString: POSTGRES_URL,
        max: 2,
        options: '-c default_transaction_isolation=serializable',
      });
      const { schema, table, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const level = await strict.query<{ transaction_isolation: string }>('SHOW transaction_isolation');
        expect(level.rows[0]?.transaction_isolation).toBe('serializable');
        const store = postgresStore<pg.PoolClient>({ pool: strict, schema });
        const winner = request();
        await blocker.query('BEGIN');
        await insertClaim((sql, params) => blocker.query(sql, params), table, winner);
        const measure = trips(store);
        const pending = store.claim({ ...winner, token: randomUUID(), id: randomUUID() });
        await blockedOn(table);
        await blocker.query('COMMIT');
        const result = await pending;
        expect(result.kind).toBe('existing');
        expect(result.record.token).toBe(winner.token);
        expect(measure()).toBe(2);
      } finally {
        blocker.release();
        await strict.end();
        await drop();
      }
    });
  });

  describe('refusals are read-only', () => {
    it('a replay, a mismatch and a live lease assign no transaction id and lock no row; a claim does', async () => {
      const { schema, table, store, drop } = await isolated();
      const client = await pool.connect();
      try {
        const { done, live } = await doneAndLive(store, request);
        // The same store, on one connection inside an open transaction, so Postgres can tell whether it wrote.
        const onClient = {
          query: client.query.bind(client),
          connect: () => Promise.reject(new Error('not used by claim')),
        };
        const inTx = postgresStore({ pool: onClient, schema });
        const xid = async () =>
          (await client.query<{ xid: string | null }>('SELECT txid_current_if_assigned()::text AS xid')).rows[0]?.xid;
        await client.query('BEGIN');
        await expectRefusals((r) => inTx.claim(r), { done, live });
        expect(await xid()).toBeNull();
        expect((await inTx.claim(request({ now: T0 + 2 }))).kind).toBe('claimed');
        expect(await xid()).not.toBeNull();
        await client.query('ROLLBACK');
        // A lock would have left the refusing transaction's id in xmax, even after the rollback.
        const { rows } = await pool.query<{ xmax: string }>(
          `SELECT xmax::text FROM ${table} WHERE pk = ANY($1) ORDER BY pk`,
          [[done.pk, live.pk]],
        );
        expect(rows).toEqual([{ xmax: '0' }, { xmax: '0' }]);
      } finally {
        client.release();
        await drop();
      }
    });

    it('a refusal does not wait for a concurrent writer that holds the row: it answers from its snapshot', async () => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const holder = request();
        await store.claim(holder);
        // The holder is completing in a transaction (its effects still running): the row is locked, uncommitted.
        await blocker.query('BEGIN');
        await blocker.query(`UPDATE ${table} SET status = 'succeeded' WHERE pk = $1`, [holder.pk]);
        const measure = trips(store);
        let answered = false;
        const claim = store.claim({ ...holder, token: randomUUID(), now: T0 + 1 }).finally(() => (answered = true));
        // Not a timer: the claim either answers, or Postgres shows it waiting on the blocker's row lock.
        const waited = waitFor('the claim to answer or wait on the lock', async () => {
          if (answered) return 'answered' as const;
          const { rows } = await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
            [`%${schema}%`],
          );
          return (rows[0]?.n ?? 0) > 0 && ('waited on the lock' as const);
        });
        const result = await Promise.race([claim, waited]);
        expect(result).not.toBe('waited on the lock');
        expect(result).toMatchObject({ kind: 'existing', record: { status: 'in_progress', token: holder.token } });
        expect(measure()).toBe(1);
      } finally {
        await blocker.query('ROLLBACK');
        blocker.release();
        await drop();
      }
    });
  });
});
