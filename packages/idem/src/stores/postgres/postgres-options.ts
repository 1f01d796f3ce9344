/**
 * The PostgreSQL store's public shapes: the subset of `pg` it calls (pool, checked-out client, query result), its
 * options, the store's interface, and what `onRoundTrip` receives.
 */
import type { LocalTransactionRequest, LocalTransactionResult } from '../contract.js';
import type { ClaimRequest, IdempotencyStore, RoundTripObserver } from '../contract.js';

/** The part of a query result the store reads (`pg`'s `QueryResult` has it). */
export interface PostgresQueryResult {
  readonly rows: readonly unknown[];
  readonly rowCount: number | null;
}

/** Anything that runs one parameterised statement: a pool, or a client checked out of it. */
export interface PostgresQueryable {
  query(text: string, values?: unknown[]): Promise<PostgresQueryResult>;
}

/** A connection checked out of the pool: the store runs a transaction on it, then gives it back. */
export interface PostgresPoolClient extends PostgresQueryable {
  /**
   * True when the client pipelines (pg's `pipeline: true`): `runLocal` then sends `BEGIN` with the claim and the
   * UPDATE with `COMMIT` without waiting between them.
   */
  readonly pipeline?: boolean;
  /** Returns the connection; with an error, the pool discards it instead (pg's `PoolClient.release`). */
  release(error?: Error): void;
}

/** The subset of `pg.Pool` the store calls. `end` is only called when `endPoolOnClose` is true. */
export interface PostgresPool<Client extends PostgresPoolClient = PostgresPoolClient> extends PostgresQueryable {
  connect(): Promise<Client>;
  end?(): Promise<void>;
}

/**
 * What `onRoundTrip` receives from this store for each statement it sends: `request` is `{ text, values }` as
 * passed to `query()` (no `values` for `BEGIN`/`COMMIT`/`ROLLBACK` and DDL; a prepared statement's name is left
 * out), `response` is `{ rows, rowCount }` as the driver returned them (`bigint` columns as strings, `bytea` as a
 * `Buffer` with pg).
 */
export interface PostgresRoundTripRequest {
  readonly text: string;
  readonly values?: readonly unknown[];
}

export interface PostgresStoreOptions<
  Client extends PostgresPoolClient = PostgresPoolClient,
> extends RoundTripObserver {
  readonly pool: PostgresPool<Client>;
  /** Schema of the records table. Default `public`. A plain identifier (letters, digits, `_`), quoted as given. */
  readonly schema?: string;
  /** The records table. Default `idempotency_records`. A plain identifier of at most 48 characters. */
  readonly table?: string;
  /** End the pool in `close()`. Default false: the pool is yours, and stays open for your own queries. */
  readonly endPoolOnClose?: boolean;
  /**
   * Send claim, complete (and `runLocal`'s), renew, release and get as named prepared statements, pg's
   * `query({ name, text, values })` form, so each connection parses and plans them once. Default true. The pool, and the clients it checks out,
   * must then accept that form (pg's do). Set false for a pool whose `query()` only takes `(text, values)`, or
   * behind PgBouncer in transaction mode older than 1.21 or without `max_prepared_statements`.
   */
  readonly preparedStatements?: boolean;
  /**
   * For demonstrations only (the demo's model page in lab mode); leave it unset. Awaited before the claim statement
   * is sent. The statement then runs in a transaction of its own, and a claim that wrote holds its `COMMIT` until
   * another connection waits on the row it wrote (`pg_blocking_pids`, polled for up to about a second). Claims that
   * await one shared barrier thus all take their snapshot before the winner commits, so each loser is refused by
   * the upsert's `DO UPDATE … WHERE`, not by the statement's read of `cur`.
   */
  readonly claimBarrier?: (request: ClaimRequest) => Promise<void>;
}

/**
 * The Postgres store: the {@link IdempotencyStore} contract plus `migrate()`. `Tx` is what `effects` receive: a
 * connection inside the transaction (never release it yourself). By default it is typed by the shape the store
 * needs; name your driver's client type to get all of it, e.g. `postgresStore<pg.PoolClient>({ pool })`.
 */
export interface PostgresStore<Tx extends PostgresQueryable = PostgresQueryable> extends IdempotencyStore<Tx> {
  /** The pool the store sends its statements on, as given. */
  readonly pool: PostgresPool<Tx & PostgresPoolClient>;
  readonly schema: string;
  readonly table: string;
  /**
   * Creates the schema, table and indexes if they are missing. Idempotent, and safe to run from several
   * processes at once (serialised by a transaction-scoped advisory lock). `schema.sql` holds the same DDL.
   */
  migrate(): Promise<void>;
  /** Database-local work in one transaction: `BEGIN`, the claim, the work on the same connection, the UPDATE, `COMMIT`. */
  runLocal(request: LocalTransactionRequest<Tx>): Promise<LocalTransactionResult>;
}
