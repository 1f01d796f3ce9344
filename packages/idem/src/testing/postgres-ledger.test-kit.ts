/**
 * @module For the database-local work tests (not part of the library): a Postgres store in a schema of its own on
 * `pool`, with a `ledger (ref, amount)` table beside the records. The schema's drop is pushed on `drops`, which the
 * test file runs after its cases.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { postgresStore } from '../stores/postgres/index.js';

/** One ledger row: the work's effect, written in the transaction that records its outcome. */
export interface LedgerRow {
  readonly ref: string;
  readonly amount: number;
}

/** A fresh schema `<name>_<random>` holding the records and the ledger; `insert` is the work's write, on `tx`. */
export async function postgresLedger(pool: pg.Pool, name: string, drops: Array<() => Promise<void>>) {
  const schema = `${name}_${randomBytes(6).toString('hex')}`;
  const store = postgresStore<pg.PoolClient>({ pool, schema });
  await store.migrate();
  await pool.query(`CREATE TABLE "${schema}".ledger (ref text PRIMARY KEY, amount integer NOT NULL)`);
  drops.push(async () => void (await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)));
  const insert = (tx: pg.PoolClient, ref: string, amount: number) =>
    tx.query(`INSERT INTO "${schema}".ledger (ref, amount) VALUES ($1, $2)`, [ref, amount]);
  const ledger = async () =>
    (await pool.query<LedgerRow>(`SELECT ref, amount FROM "${schema}".ledger ORDER BY ref`)).rows;
  return { schema, store, insert, ledger };
}
