/**
 * The MySQL store's public shapes: the subset of `mysql2/promise` it calls (pool, connection, query result), its
 * options, the store's interface, and what `onRoundTrip` receives.
 */
import type { IdempotencyStore, RoundTripObserver } from '../contract.js';

/**
 * What a statement resolves to with mysql2's promise API: `[result, fields]`. The store reads `result`: rows for a
 * `SELECT`, a header with `affectedRows` for a write, and one of those per statement for a multi-statement query.
 */
export type MysqlQueryResult = readonly [unknown, unknown];

/** A value the store binds: text for a VARBINARY column goes as its UTF-8 bytes. */
export type MysqlValue = Buffer | string | number | null;

/** Anything that runs one SQL text with `?` placeholders: a pool, or a connection checked out of it. */
export interface MysqlQueryable {
  /** Client-side interpolation (mysql2 escapes every value), the text protocol. */
  query(sql: string, values?: MysqlValue[]): Promise<MysqlQueryResult>;
  /** A server-side prepared statement, cached per connection (mysql2's `execute`). Used when `preparedStatements`. */
  execute?(sql: string, values?: MysqlValue[]): Promise<MysqlQueryResult>;
}

/** A connection checked out of the pool: the store runs a transaction on it, then gives it back. */
export interface MysqlPoolConnection extends MysqlQueryable {
  /** Returns the connection to the pool. */
  release(): void;
  /** Closes the connection instead (its session state is unknown after a failed `COMMIT` or `ROLLBACK`). */
  destroy(): void;
}

/**
 * The subset of `mysql2/promise`'s `Pool` the store calls. The pool must be created with
 * `multipleStatements: true`: a claim is one round trip of three statements. `end` is only called when
 * `endPoolOnClose` is true.
 */
export interface MysqlPool<Connection extends MysqlPoolConnection = MysqlPoolConnection> extends MysqlQueryable {
  getConnection(): Promise<Connection>;
  end?(): Promise<void>;
}

/**
 * What `onRoundTrip` receives from this store for each query it sends: `request` is `{ sql, values }` as passed to
 * the driver (no `values` for `START TRANSACTION`/`COMMIT`/`ROLLBACK` and DDL), `response` is the `result` the
 * driver returned: rows (VARBINARY and BLOB columns as `Buffer`s with mysql2), a `ResultSetHeader` for a write, or,
 * for the claim, both in order (`[header, rows]`).
 */
export interface MysqlRoundTripRequest {
  readonly sql: string;
  readonly values?: readonly MysqlValue[];
}

export interface MysqlStoreOptions<
  Connection extends MysqlPoolConnection = MysqlPoolConnection,
> extends RoundTripObserver {
  /** A `mysql2/promise` pool created with `multipleStatements: true`, in the database that holds the table. */
  readonly pool: MysqlPool<Connection>;
  /** The records table. Default `idempotency_records`. A plain identifier of at most 40 characters. */
  readonly table?: string;
  /** End the pool in `close()`. Default false: the pool is yours, and stays open for your own queries. */
  readonly endPoolOnClose?: boolean;
  /**
   * Send complete, renew, release and get as server-side prepared statements (mysql2's `execute`), so each
   * connection parses them once and a response body travels as raw bytes. Default true. Set false for a pool
   * without `execute`, or behind a proxy that does not carry prepared statements. The claim always goes as text:
   * a prepared statement holds one statement only.
   */
  readonly preparedStatements?: boolean;
  /**
   * The largest response stored, in bytes (body plus header names and values). Default 4 MiB. Bound by the
   * server's `max_allowed_packet`, which must hold the completion's statement: `migrate()` checks that it is at
   * least `2 × maxResponseBytes + 1 MiB` (the text protocol sends bytes as hex).
   */
  readonly maxResponseBytes?: number;
}

/**
 * The MySQL store: the {@link IdempotencyStore} contract plus `migrate()`. `Tx` is what `effects` receive: a
 * connection inside the transaction (never release it yourself). By default it is typed by the shape the store
 * needs; name your driver's type to get all of it, e.g. `mysqlStore<mysql.PoolConnection>({ pool })`.
 */
export interface MysqlStore<Tx extends MysqlQueryable = MysqlQueryable> extends IdempotencyStore<Tx> {
  readonly maxResponseBytes: number;
  /**
   * Creates the table and its indexes if they are missing (idempotent; several processes may run it at once),
   * then checks that the server's `max_allowed_packet` holds a response of `maxResponseBytes`. `schema.sql` holds
   * the same DDL.
   */
  migrate(): Promise<void>;
}
