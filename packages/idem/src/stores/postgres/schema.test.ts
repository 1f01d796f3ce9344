/** The PostgreSQL store's sweep, its schema and migration, and its options. */
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL } from '#test/services.js';
import { available, freshSchema, isolated, pool, POSTGRES, request } from '#test/fixtures/postgres.js';
import { ddlOf, describeSweep, everyStatement } from '#test/fixtures/sql.js';
import { SUCCEEDED as succeeded, T0 } from '../../testing/fixtures.js';
import { postgresSchemaSql, postgresStore, type PostgresStore } from './index.js';

describe.skipIf(!available)('postgres store', () => {
  describeSweep(POSTGRES);

  describe('migrate and options', () => {
    it('runs concurrently from several stores, and again, without failing', async () => {
      const schema = freshSchema();
      const pools = Array.from({ length: 2 }, () => new pg.Pool({ connectionString: POSTGRES_URL, max: 2 }));
      try {
        const stores = [...pools, ...pools].map((p) => postgresStore<pg.PoolClient>({ pool: p, schema }));
        await Promise.all(stores.map((s) => s.migrate()));
        await (stores[0] as PostgresStore<pg.PoolClient>).migrate();
        const { rows } = await pool.query<{ indexname: string }>(
          'SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname',
          [schema],
        );
        expect(rows.map((r) => r.indexname)).toEqual([
          'idempotency_records_expires_at_idx',
          'idempotency_records_pkey',
          'idempotency_records_scope_claimed_at_idx',
        ]);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    });

    it('the built schema.sql holds the same DDL as migrate() for the default names', async () => {
      const file = await readFile(new URL('../../../dist/stores/postgres/schema.sql', import.meta.url), 'utf8');
      expect(ddlOf(file)).toBe(postgresSchemaSql().trim());
      expect(postgresSchemaSql({ schema: 'payments', table: 'keys' }).split('\n')[0]).toBe(
        'CREATE SCHEMA IF NOT EXISTS "payments";',
      );
    });

    it('validates options, naming the one that is wrong', () => {
      expect(() => postgresStore({ pool, table: 'records; DROP TABLE x' })).toThrow(
        'Expected `table` to be an identifier of letters, digits and _ (not starting with a digit, at most 48 characters), got "records; DROP TABLE x".',
      );
      expect(() => postgresStore({ pool, schema: '1abc' })).toThrow(/^Expected `schema` to be/);
      expect(() => postgresStore({ pool: {} as never })).toThrow(/^Expected `pool` to be a pg\.Pool/);
    });

    it('sends claim, complete, renew, release and get as named statements, once parsed per connection', async () => {
      const { schema, drop } = await isolated();
      const one = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const prepared = async () =>
        (await one.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).rows.map(
          (r) => r.name,
        );
      try {
        const plain = postgresStore({ pool: one, schema, preparedStatements: false });
        const req = request();
        await plain.claim(req);
        await plain.get(req.pk);
        expect(await prepared()).toEqual([]);
        const store = postgresStore({ pool: one, schema });
        for (let i = 0; i < 2; i++) await everyStatement(store, request());
        const names = await prepared();
        expect(names.map((name) => name.replace(/_[0-9a-f]{16}$/, ''))).toEqual([
          'idem_claim',
          'idem_complete',
          'idem_get',
          'idem_release',
          'idem_renew',
        ]);
        // Another table on the same pool gets its own names: pg refuses one name for two texts.
        const other = await isolated(one);
        try {
          expect((await other.store.claim(request())).kind).toBe('claimed');
          expect((await prepared()).length).toBe(6);
        } finally {
          await other.drop();
        }
      } finally {
        await one.end();
        await drop();
      }
    });

    it('with preparedStatements false, a pool whose query() takes only (text, values) works', async () => {
      const { schema, drop } = await isolated();
      const textOnly = {
        query: (text: string, values?: unknown[]) => {
          if (typeof text !== 'string') throw new TypeError('text only');
          return pool.query(text, values);
        },
        connect: () => pool.connect(),
      };
      try {
        const store = postgresStore({ pool: textOnly, schema, preparedStatements: false });
        const req = request();
        expect((await store.claim(req)).kind).toBe('claimed');
        expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded })).toEqual({
          ok: true,
        });
        expect((await store.get(req.pk))?.status).toBe('succeeded');
        expect(() => postgresStore({ pool, preparedStatements: 'yes' as never })).toThrow(
          'Expected `preparedStatements` to be a boolean, got "yes".',
        );
      } finally {
        await drop();
      }
    });

    it('close() leaves the pool open unless endPoolOnClose is set', async () => {
      const own = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const store = postgresStore({ pool: own });
      await store.close();
      expect(own.ended).toBe(false);
      await expect(store.get('IDEMPOTENCY#x#y')).rejects.toThrow('postgres store is closed');
      await postgresStore({ pool: own, endPoolOnClose: true }).close();
      expect(own.ended).toBe(true);
    });
  });
});
