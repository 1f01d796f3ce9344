/**
 * A PostgreSQL or MySQL store whose table was never created: the store's error names the table and the command
 * that creates it (the driver says only `relation … does not exist`), keeps the driver's code, and is the cause
 * of the engine's STORE_UNAVAILABLE.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../packages/idem/src/core/engine.js';
import { recordPk } from '../../packages/idem/src/core/key.js';
import type { IdempotencyStore } from '../../packages/idem/src/core/record.js';
import { mysqlStore } from '../../packages/idem/src/stores/mysql/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../services.js';

const suffix = randomBytes(4).toString('hex');

/** What `store.get` rejects with, and the engine's error for a claim on the same store. */
async function refusals(store: IdempotencyStore<unknown>) {
  const got = (await store.get(recordPk('acct_a', 'k-1')).then(
    () => null,
    (error: unknown) => error,
  )) as (Error & { code?: unknown }) | null;
  const engine = createEngine({ store, ttlMs: 86_400_000 });
  const begun = await engine.begin({ scope: 'acct_a', key: 'k-1', fingerprint: 'f'.repeat(64) });
  const refused = begun.kind === 'refused' ? begun.error : undefined;
  return {
    store: [got?.message, got?.code],
    engine: [refused?.code, (refused?.cause as Error | undefined)?.message],
  };
}

describe.skipIf(!(await serviceAvailable('PostgreSQL', POSTGRES_URL)))('postgres store, no table', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  afterAll(() => pool.end());

  it.each([
    [`idem_nohint_${suffix}`, undefined, ''],
    ['public', `idem_nohint_${suffix}`, `&table=idem_nohint_${suffix}`],
  ])('schema %s, table %s: the error names it and says how to create it', async (schema, table, query) => {
    const store = postgresStore({ pool, schema, ...(table === undefined ? {} : { table }) });
    const message =
      `postgres store: Idem's table ${schema}.${table ?? 'idempotency_records'} does not exist. Create it: ` +
      `idem migrate --store 'postgres://…?schema=${schema}${query}', or await store.migrate().`;
    expect(await refusals(store)).toEqual({ store: [message, '42P01'], engine: ['STORE_UNAVAILABLE', message] });
  });
});

describe.skipIf(!(await serviceAvailable('MySQL', MYSQL_URL)))('mysql store, no table', () => {
  const pool = mysql.createPool({ uri: MYSQL_URL, multipleStatements: true, connectionLimit: 2 });
  afterAll(() => pool.end());

  it('the error names the table and says how to create it', async () => {
    const table = `idem_nohint_${suffix}`;
    const message =
      `mysql store: Idem's table ${table} does not exist in this database. Create it: ` +
      `idem migrate --store 'mysql://…/<database>?table=${table}', or await store.migrate().`;
    expect(await refusals(mysqlStore({ pool, table }))).toEqual({
      store: [message, 'ER_NO_SUCH_TABLE'],
      engine: ['STORE_UNAVAILABLE', message],
    });
  });
});
