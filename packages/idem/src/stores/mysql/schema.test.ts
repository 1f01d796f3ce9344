/** The MySQL store's sweep and list (and the indexes they read), its schema and migration, and its options. */
import { readFile } from 'node:fs/promises';
import mysql from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { available, database, hex, isolated, MYSQL, newPool, pool, request, url } from '#test/fixtures/mysql.js';
import { ddlOf, describeSweep, everyStatement } from '#test/fixtures/sql.js';
import { T0, TTL } from '../../testing/fixtures.js';
import { mysqlSchemaSql, mysqlStore, type MysqlPool, type MysqlStore } from './index.js';

describe.skipIf(!available)('mysql store', () => {
  describeSweep(MYSQL);

  describe('list', () => {
    it('list reads the (scope, claimed_at) index and sweep the expires_at index, in their order', async () => {
      const { name: table, store, drop } = await isolated();
      try {
        await MYSQL.expire(`\`${table}\``, 50);
        await MYSQL.expire(`\`${table}\``, 2_000, T0 + 100 * TTL, 'live');
        await pool.query(`ANALYZE TABLE \`${table}\``);
        const explain = async (sql: string, values: unknown[]) => {
          const [rows] = await pool.query<mysql.RowDataPacket[]>(`EXPLAIN ${sql}`, values);
          return rows.map((r) => [String(r.key), String(r.Extra ?? '').includes('filesort')]);
        };
        expect(
          await explain(`SELECT pk FROM \`${table}\` WHERE scope = ? ORDER BY claimed_at DESC, pk DESC LIMIT 10`, [
            Buffer.from('old'),
          ]),
        ).toEqual([[`${table}_scope_claimed_at_idx`, false]]);
        expect(
          await explain(`DELETE FROM \`${table}\` WHERE expires_at <= ? ORDER BY expires_at LIMIT 500`, [T0]),
        ).toEqual([[`${table}_expires_at_idx`, false]]);
        // And the statements the store sends are those.
        const seen: string[] = [];
        const observed = mysqlStore({
          pool,
          table,
          onRoundTrip: (trip) => void seen.push((trip.request as { sql: string }).sql),
        });
        await observed.list({ scope: 'old', limit: 10 });
        await observed.sweep({ now: T0 - 1 });
        expect(seen).toEqual([
          `SELECT pk, scope, \`key\`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, result_id, response_status, response_headers, response_body FROM \`${table}\` WHERE scope = ? ORDER BY claimed_at DESC, pk DESC LIMIT ?`,
          `DELETE FROM \`${table}\` WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`,
        ]);
        expect(await store.list({ scope: 'old', limit: 3 })).toHaveLength(3);
      } finally {
        await drop();
      }
    });
  });

  describe('migrate and options', () => {
    it('runs concurrently from several stores, and again, without failing', async () => {
      const table = `idem_${hex()}`;
      const pools = Array.from({ length: 2 }, () => newPool({ connectionLimit: 2 }));
      try {
        const stores = [...pools, ...pools].map((p) => mysqlStore<mysql.PoolConnection>({ pool: p, table }));
        await Promise.all(stores.map((s) => s.migrate()));
        await (stores[0] as MysqlStore<mysql.PoolConnection>).migrate();
        const [rows] = await pool.query<mysql.RowDataPacket[]>(
          `SELECT DISTINCT index_name AS name FROM information_schema.STATISTICS WHERE table_schema = ? AND table_name = ? ORDER BY index_name`,
          [database, table],
        );
        expect(rows.map((r) => String(r.name)).sort()).toEqual([
          'PRIMARY',
          `${table}_expires_at_idx`,
          `${table}_scope_claimed_at_idx`,
        ]);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      }
    });

    it('the built schema.sql holds the same DDL as migrate() for the default table', async () => {
      const file = await readFile(new URL('../../../dist/stores/mysql/schema.sql', import.meta.url), 'utf8');
      expect(ddlOf(file)).toBe(mysqlSchemaSql().trim());
      expect(mysqlSchemaSql({ table: 'keys' }).split('\n')[0]).toBe('CREATE TABLE IF NOT EXISTS `keys` (');
    });

    it('refuses a maxResponseBytes the server’s max_allowed_packet cannot carry, naming both', async () => {
      const [rows] = await pool.query<mysql.RowDataPacket[]>('SELECT @@max_allowed_packet AS p');
      const packet = Number(rows[0]?.p);
      const table = `idem_${hex()}`;
      try {
        const fits = Math.floor((packet - 1024 * 1024) / 2);
        await mysqlStore({ pool, table, maxResponseBytes: fits }).migrate();
        await expect(mysqlStore({ pool, table, maxResponseBytes: fits + 1 }).migrate()).rejects.toThrow(
          `Expected \`maxResponseBytes\` to be at most (max_allowed_packet − 1 MiB) / 2 = ${fits} bytes on this server ` +
            `(max_allowed_packet is ${packet}; raise it to ${2 * (fits + 1) + 1024 * 1024} or more, or lower maxResponseBytes), got ${fits + 1}.`,
        );
        expect(mysqlStore({ pool }).maxResponseBytes).toBe(4 * 1024 * 1024);
      } finally {
        await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      }
    });

    it('validates options, naming the one that is wrong', async () => {
      expect(() => mysqlStore({ pool, table: 'records; DROP TABLE x' })).toThrow(
        'Expected `table` to be an identifier of letters, digits and _ (not starting with a digit, at most 40 characters), got "records; DROP TABLE x".',
      );
      expect(() => mysqlStore({ pool: {} as never })).toThrow(/^Expected `pool` to be a mysql2\/promise Pool/);
      expect(() => mysqlStore({ pool, maxResponseBytes: 0 })).toThrow(
        'Expected `maxResponseBytes` to be a positive integer, got 0.',
      );
      expect(() => mysqlStore({ pool, onRoundTrip: 'log' as never })).toThrow(
        'Expected `onRoundTrip` to be a function, got "log".',
      );
      const single = mysql.createPool({ uri: url, connectionLimit: 1 });
      try {
        expect(() => mysqlStore({ pool: single })).toThrow(
          'Expected `pool` to be a pool created with multipleStatements: true (a claim is one round trip of three statements).',
        );
      } finally {
        await single.end();
      }
      const noExecute = {
        query: pool.query.bind(pool),
        getConnection: pool.getConnection.bind(pool),
      } as unknown as MysqlPool;
      expect(() => mysqlStore({ pool: noExecute })).toThrow(/^Expected `pool` to be a pool with execute\(\)/);
      expect(mysqlStore({ pool: noExecute, preparedStatements: false }).name).toBe('mysql');
    });

    it('sends complete, renew, release and get as prepared statements, parsed once per connection', async () => {
      const { name: table, drop } = await isolated();
      const one = newPool({ connectionLimit: 1 });
      const prepares = async () =>
        Number((await one.query<mysql.RowDataPacket[]>(`SHOW SESSION STATUS LIKE 'Com_stmt_prepare'`))[0][0]?.Value);
      try {
        const start = await prepares();
        const plain = mysqlStore({ pool: one, table, preparedStatements: false });
        const p = request();
        await everyStatement(plain, p);
        expect(await prepares()).toBe(start);
        const store = mysqlStore({ pool: one, table });
        for (let i = 0; i < 3; i++) await everyStatement(store, request());
        expect((await store.get(p.pk))?.response?.body).toEqual(new Uint8Array([0x7b, 0x7d]));
        expect(await prepares()).toBe(start + 4); // renew, complete, release, get: once each on the one connection
      } finally {
        await one.end();
        await drop();
      }
    });

    it('close() leaves the pool open unless endPoolOnClose is set', async () => {
      const own = newPool({ connectionLimit: 1 });
      const store = mysqlStore({ pool: own });
      await store.close();
      await expect(store.get('IDEMPOTENCY#x#y')).rejects.toThrow('mysql store is closed');
      expect((await own.query<mysql.RowDataPacket[]>('SELECT 1 AS one'))[0]).toEqual([{ one: 1 }]);
      await mysqlStore({ pool: own, endPoolOnClose: true }).close();
      await expect(own.query('SELECT 1')).rejects.toThrow('Pool is closed.');
    });
  });
});
