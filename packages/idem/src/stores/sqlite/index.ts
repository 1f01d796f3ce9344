/**
 * @module `idem/stores/sqlite` — the embedded default store, on a better-sqlite3 (v12) `Database` that you open
 * and pass in. Your own tables can live in the same database, and the work's writes can commit in the same
 * transaction as the record's completion (docs/DESIGN.md: The work's own writes).
 */
import type { SqliteDatabase, SqliteStore, SqliteStoreOptions } from './sqlite-options.js';
import { SqliteStoreImpl } from './sqlite-store.js';
import { sqliteSchema } from './schema.js';

export { sqliteSchema };
export type * from './sqlite-options.js';

/**
 * Creates an SQLite store on a database you opened with better-sqlite3. On creation it sets
 * `journal_mode = WAL` (readers never block the writer; persistent in the file) and `busy_timeout`
 * (`busyTimeoutMs`, so a second process waits for the write lock instead of failing). Call `migrate()` once
 * before use, or apply `schema.sql` yourself.
 *
 * Every call is synchronous inside the embedded engine, and is counted as one round trip (there is no
 * network; a claim's read and, when the key is free, its upsert under the write lock, run in one call). A claim
 * and a completion without effects are single statements, each atomic on its own, so neither opens a
 * transaction. `effects` given to `complete` receive `database` and must be synchronous: they run after the
 * token-conditional update, in one `BEGIN IMMEDIATE` transaction with it, and only if the token still holds. If they throw, everything rolls back and
 * the error is rethrown; if they return a promise, everything rolls back and `complete` rejects.
 *
 * `runLocal` (database-local work) runs the claim, the work and the completion in one `BEGIN IMMEDIATE`
 * transaction, in one round trip (a refusal is answered from a plain read first, without the lock). Its work
 * receives `database` and must be synchronous, for the same reason; a promise rolls everything back and
 * `runLocal` rejects with `CONFIG_INVALID`.
 *
 * `close()` does not close `database` unless `closeDatabase` is true. `onRoundTrip` sees every counted call,
 * including the two pragmas at creation (op `open`), as a {@link SqliteRoundTripRequest} and its results.
 *
 * @example
 * import Database from 'better-sqlite3'
 * const database = new Database('idem.db')
 * const store = sqliteStore({ database })
 * await store.migrate()
 * const engine = createEngine({ store })
 */
export function sqliteStore<Db extends SqliteDatabase = SqliteDatabase>(
  options: SqliteStoreOptions<Db>,
): SqliteStore<Db> {
  return new SqliteStoreImpl<Db>(options);
}
