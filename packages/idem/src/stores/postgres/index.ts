/**
 * @module `idem/stores/postgres` — records in a PostgreSQL table, through your own `pg.Pool` (or anything of
 * the same shape). The work's own writes can commit in the same transaction as the record's completion.
 */
import type { PostgresQueryable, PostgresStore, PostgresStoreOptions, PostgresPoolClient } from './postgres-options.js';
import { PostgresStoreImpl } from './postgres-store.js';
import { postgresSchemaSql } from './schema.js';

export { postgresSchemaSql };
export type * from './postgres-options.js';

/**
 * Creates a PostgreSQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each statement sent is one): claim 1, or 2 when it waited on a concurrent claim's insert or
 * update (see claim.ts); complete 1; complete with `effects` 3 (`BEGIN`, the conditional
 * `UPDATE`, `COMMIT`/`ROLLBACK`) plus the statements the effects send themselves, which are the work's and not
 * counted; renew, release, get, list 1; sweep 1 per batch. `runLocal` (database-local work) 4 for a new key
 * (`BEGIN`, the claim, the fenced `UPDATE`, `COMMIT`: one commit, the work's own statements between) and 3 for
 * a refusal (`BEGIN`, the claim, `ROLLBACK`), plus 3 more each time it met a concurrent transaction on the key;
 * on a pipelining client (pg's `pipeline: true`) they travel in pairs, so a new key waits on 2 network round
 * trips of the store's and a refusal on 2. Checking a connection out of the pool is not counted.
 * `onRoundTrip` sees each counted statement as a {@link PostgresRoundTripRequest} with its `{ rows, rowCount }`.
 *
 * The pool stays yours: `close()` only ends it with `endPoolOnClose: true`.
 *
 * @example
 * import pg from 'pg'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * const store = postgresStore<pg.PoolClient>({ pool })
 * await store.migrate()
 * const engine = createEngine({ store })
 * await engine.run({ scope, key, fingerprint }, async ({ id }) => ({
 *   response: jsonResponse(201, { id }),
 *   // Commits with the record's completion, or not at all.
 *   effects: (tx) => tx.query('INSERT INTO ledger (record_id, amount) VALUES ($1, $2)', [id, 500]),
 * }))
 */
export function postgresStore<Tx extends PostgresQueryable = PostgresQueryable>(
  options: PostgresStoreOptions<Tx & PostgresPoolClient>,
): PostgresStore<Tx> {
  return new PostgresStoreImpl<Tx>(options);
}
