/**
 * The SQLite store's public shapes: the subset of better-sqlite3 it calls, its options, the store's interface,
 * and what `onRoundTrip` receives.
 */
import type { LocalTransactionRequest, LocalTransactionResult } from '../contract.js';
import type { ClaimRequest, IdempotencyStore, RoundTripObserver } from '../contract.js';

/** The subset of a better-sqlite3 `Statement` the store calls. */
export interface SqliteStatement {
  run(...params: unknown[]): { readonly changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/**
 * The subset of better-sqlite3's `Database` the store calls. A better-sqlite3 12 `Database` satisfies it; the
 * store imports nothing from the driver.
 */
export interface SqliteDatabase {
  prepare(source: string): SqliteStatement;
  exec(source: string): unknown;
  pragma(source: string, options?: { readonly simple?: boolean }): unknown;
  transaction<A extends unknown[], R>(fn: (...args: A) => R): { immediate(...args: A): R };
  close(): unknown;
}

/** What `effects` receive: the store's own database handle, inside the completion's transaction. */
export type SqliteTx = SqliteDatabase;

/**
 * What `onRoundTrip` receives from this store: `request` lists the statements of the trip in order, and
 * `response` holds what each returned, in the same order — its rows (a `Buffer` for a BLOB), `{ changes }` for a
 * write without `RETURNING`, `null` for DDL. A claim first reads the row (`SELECT`); a refusal ends there. Otherwise
 * the upsert follows in the same trip, and if another connection took the key between the two, the upsert's
 * `RETURNING` is empty and a second `SELECT` reads the row that stopped it (then the upsert again, should that row
 * have moved on since). A completion without effects is its `UPDATE` alone.
 */
export interface SqliteRoundTripRequest {
  readonly statements: ReadonlyArray<{ readonly sql: string; readonly params?: Readonly<Record<string, unknown>> }>;
}

export interface SqliteStoreOptions<Db extends SqliteDatabase = SqliteDatabase> extends RoundTripObserver {
  /** An open better-sqlite3 `Database`, e.g. `new Database('idem.db')`. The store sets WAL and a busy timeout on it. */
  readonly database: Db;
  /** The records table: an SQL identifier. Default `idem_records`. */
  readonly table?: string;
  /**
   * How long a statement waits for another connection's write lock before failing with `SQLITE_BUSY`, in ms.
   * The wait is synchronous (it blocks this process's event loop). Default 5000.
   */
  readonly busyTimeoutMs?: number;
  /** Close `database` when the store is closed. Default false: the database is yours, and you close it. */
  readonly closeDatabase?: boolean;
  /**
   * For demonstrations only (the demo's model page in lab mode); leave it unset. Awaited after a claim's (or
   * `runLocal`'s) read found the key free or claimable, before its conditional write, which then runs as a round
   * trip of its own. Claims
   * that await one shared barrier have all read before any of them writes, so each loser is refused by the upsert's
   * `WHERE`, not by the read.
   */
  readonly claimBarrier?: (request: ClaimRequest) => Promise<void>;
}

/** An SQLite store: the contract, plus the database it uses and its migration. */
export interface SqliteStore<Db extends SqliteDatabase = SqliteDatabase> extends IdempotencyStore<Db> {
  readonly database: Db;
  readonly table: string;
  /** Creates the table and its indexes if they do not exist (idempotent). Run it once at startup. */
  migrate(): Promise<void>;
  /** Database-local work in one `BEGIN IMMEDIATE` transaction; `work` must be synchronous (see the factory). */
  runLocal(request: LocalTransactionRequest<Db>): Promise<LocalTransactionResult>;
}
