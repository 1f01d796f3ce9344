/** The MySQL store's claim under contention, its refusals (which change nothing), and keys as bytes. */
import { randomUUID } from 'node:crypto';
import type mysql from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { available, isolated, MYSQL, newPool, pool, request, rowOf, scope } from '#test/fixtures/mysql.js';
import { describeBlockedClaims } from '#test/fixtures/sql.js';
import { claimTwoHundredTimes, doneAndLive, expectRefusals } from '#test/fixtures/stores.js';
import { SUCCEEDED as succeeded, T0, tripMeter as trips } from '../../testing/fixtures.js';
import { mysqlStore, type MysqlPool } from './index.js';

describe.skipIf(!available)('mysql store', () => {
  describeBlockedClaims(MYSQL);

  describe('the claim decides on the latest committed row, under its lock', () => {
    /**
     * The pool sends the claim's statements as two queries (the reset and the upsert, then the read), with
     * `between` run on another connection in the gap: what the one-query claim allows whenever another
     * connection commits between its INSERT and its SELECT.
     */
    const splitting = (between: () => Promise<void>): MysqlPool<mysql.PoolConnection> => {
      let pending: (() => Promise<void>) | undefined = between;
      return {
        query: async (sql: string, values?: unknown[]) => {
          const at = sql.indexOf(';\nSELECT');
          if (at < 0 || pending === undefined || values === undefined) return pool.query(sql, values);
          const run = pending;
          pending = undefined;
          const [upsert] = await pool.query(sql.slice(0, at), values.slice(0, -1));
          await run();
          const [rows] = await pool.query(sql.slice(at + 2), values.slice(-1));
          return [[upsert, rows], undefined];
        },
        execute: (sql: string, values?: unknown[]) => pool.execute(sql, values as never),
        getConnection: () => pool.getConnection(),
      } as unknown as MysqlPool<mysql.PoolConnection>;
    };

    type Store = Awaited<ReturnType<typeof isolated>>['store'];
    type Holder = ReturnType<typeof request>;
    it.each([
      {
        title: 'a refused claim whose record was released before its SELECT runs again, and claims: 2 trips',
        between: (store: Store, holder: Holder) => store.release({ pk: holder.pk, token: holder.token }),
        expected: (holder: Holder, mine: Holder) => ['claimed', 'in_progress', mine.token, mine.id, null, 2],
      },
      {
        title: 'a refused claim whose record completed before its SELECT replays the completion: 1 trip',
        between: (store: Store, holder: Holder) =>
          store.complete({ pk: holder.pk, token: holder.token, now: T0 + 1, outcome: succeeded }),
        expected: (holder: Holder) => ['existing', 'succeeded', holder.token, holder.id, 'ch_1', 1],
      },
    ])('$title', async ({ between, expected }) => {
      const { name: table, store, drop } = await isolated();
      try {
        const holder = request();
        await store.claim(holder);
        const split = mysqlStore({ pool: splitting(async () => void (await between(store, holder))), table });
        const mine = { ...holder, token: randomUUID(), id: randomUUID(), now: T0 + 1 };
        const { kind, record } = await split.claim(mine);
        const seen = [kind, record.status, record.token, record.id, record.resultId, split.roundTrips];
        expect(seen).toEqual(expected(holder, mine));
      } finally {
        await drop();
      }
    });

    it('a claim picked as a deadlock victim runs again: 2 trips', async () => {
      const { name: table, drop } = await isolated();
      let failures = 0;
      const deadlocking = {
        query: (sql: string, values?: unknown[]) => {
          if (sql.includes('ON DUPLICATE KEY UPDATE') && failures++ === 0) {
            return Promise.reject(
              Object.assign(new Error('Deadlock found when trying to get lock'), {
                errno: 1213,
                code: 'ER_LOCK_DEADLOCK',
              }),
            );
          }
          return pool.query(sql, values);
        },
        getConnection: () => pool.getConnection(),
      } as unknown as MysqlPool<mysql.PoolConnection>;
      try {
        const store = mysqlStore({ pool: deadlocking, table, preparedStatements: false });
        const req = request();
        const result = await store.claim(req);
        expect([result.kind, result.record.token, store.roundTrips, failures]).toEqual(['claimed', req.token, 2, 2]);
      } finally {
        await drop();
      }
    });

    it('200 concurrent claims of one key from 3 pools (3 processes): exactly one claims', async () => {
      const { name: table, drop } = await isolated();
      const pools = Array.from({ length: 3 }, () => newPool({ connectionLimit: 10 }));
      try {
        const deadlocks: unknown[] = [];
        const stores = pools.map((p) =>
          mysqlStore<mysql.PoolConnection>({
            pool: p,
            table,
            onRoundTrip: (trip) => void (trip.error && deadlocks.push(trip.error)),
          }),
        );
        const base = request();
        const { token, total } = await claimTwoHundredTimes(stores, base);
        expect((await mysqlStore({ pool, table }).get(base.pk))?.token).toBe(token);
        console.log(
          `mysql: 200 contended claims took ${total} round trips; ${deadlocks.length} deadlock victims ran again`,
        );
        expect(deadlocks.every((error) => (error as { errno?: number }).errno === 1213)).toBe(true);
        expect(total).toBe(200 + deadlocks.length);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await drop();
      }
    });
  });

  describe('refusals change nothing', () => {
    it('a replay, a mismatch and a live lease leave the row byte for byte as it was', async () => {
      const { name: table, store, drop } = await isolated();
      try {
        const { done, live } = await doneAndLive(store, request);
        const before = [await rowOf(table, done.pk), await rowOf(table, live.pk)];
        await expectRefusals((r) => store.claim(r), { done, live });
        expect([await rowOf(table, done.pk), await rowOf(table, live.pk)]).toEqual(before);
      } finally {
        await drop();
      }
    });
  });

  describe('keys are bytes', () => {
    it('keys differing only in case, in trailing spaces or beyond ASCII are different records', async () => {
      const { store, drop } = await isolated();
      try {
        const keys = ['k', 'K', 'k ', 'ké', 'ke\u0301', 'k\u{1F4B3}'];
        for (const key of keys) expect((await store.claim(request({ key }))).kind).toBe('claimed');
        const records = await store.list({ scope, limit: 10 });
        expect(records.map((r) => r.key).sort()).toEqual([...keys].sort());
        for (const key of keys) expect((await store.get(recordPk(scope, key)))?.key).toBe(key);
      } finally {
        await drop();
      }
    });

    it('a value longer than its column is refused before it is sent, never truncated', async () => {
      const { store, drop } = await isolated();
      try {
        const measure = trips(store);
        const key = 'k'.repeat(1100);
        await expect(store.claim(request({ key }))).rejects.toThrow(
          `mysql store: pk is ${Buffer.byteLength(recordPk(scope, key))} bytes, longer than its column (1024 bytes)`,
        );
        const req = request();
        await store.claim(req);
        await expect(
          store.complete({
            pk: req.pk,
            token: req.token,
            now: T0 + 1,
            outcome: { ...succeeded, resultId: 'r'.repeat(1025) },
          }),
        ).rejects.toThrow('mysql store: resultId is 1025 bytes, longer than its column (1024 bytes)');
        expect(measure()).toBe(1);
      } finally {
        await drop();
      }
    });
  });
});
