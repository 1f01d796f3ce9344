/**
 * @module `idem/stores/mysql` — records in a MySQL 8 or MariaDB (tested on 10.11) InnoDB table, through your own
 * `mysql2/promise` pool (or anything of the same shape). The work's own writes can commit in the same
 * transaction as the record's completion.
 */
import type { MysqlQueryable, MysqlPoolConnection, MysqlStore, MysqlStoreOptions } from './mysql-options.js';
import { MysqlStoreImpl } from './mysql-store.js';
import { mysqlSchemaSql } from './schema.js';

export { mysqlSchemaSql };
export type * from './mysql-options.js';

/**
 * Creates a MySQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each query sent is one): claim 1 (one query of three statements; 2 or more only when InnoDB picks
 * it as a deadlock victim, or the record changed between its statements, see claim.ts);
 * complete 1; complete with `effects` 3 (`START TRANSACTION`, the fenced `UPDATE`, `COMMIT`/`ROLLBACK`) plus the
 * statements the effects send themselves, which are the work's and not counted; renew, release, get, list 1;
 * sweep 1 per batch. Checking a connection out of the pool is not counted. `onRoundTrip` sees each counted
 * query as a {@link MysqlRoundTripRequest} with the driver's result.
 *
 * The pool stays yours: `close()` only ends it with `endPoolOnClose: true`.
 *
 * @example
 * import mysql from 'mysql2/promise'
 * const pool = mysql.createPool({ uri: process.env.MYSQL_URL, multipleStatements: true })
 * const store = mysqlStore<mysql.PoolConnection>({ pool })
 * await store.migrate()
 * const engine = createEngine({ store })
 * await engine.run({ scope, key, fingerprint }, async ({ id }) => ({
 *   response: jsonResponse(201, { id }),
 *   // Commits with the record's completion, or not at all.
 *   effects: (tx) => tx.query('INSERT INTO ledger (record_id, amount) VALUES (?, ?)', [id, 500]),
 * }))
 */
export function mysqlStore<Tx extends MysqlQueryable = MysqlQueryable>(
  options: MysqlStoreOptions<Tx & MysqlPoolConnection>,
): MysqlStore<Tx> {
  return new MysqlStoreImpl<Tx>(options);
}
