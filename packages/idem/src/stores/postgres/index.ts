/**
 * @module `idem/stores/postgres` — records in a PostgreSQL table, through your own `pg.Pool` (or anything of
 * the same shape). The work's own writes can commit in the same transaction as the record's completion.
 */
import { createHash } from 'node:crypto';
import { configError } from '../../core/errors.js';
import { LocalWorkAbortedError, type LocalTransactionRequest, type LocalTransactionResult } from '../../core/record.js';
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  ListRequest,
  Outcome,
  RecordStatus,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  RoundTripObserver,
  StoredResponse,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { decodeHeaders, encodeHeaders, isClaimable } from '../contract.js';

/** The part of a query result the store reads (`pg`'s `QueryResult` has it). */
export interface PostgresQueryResult {
  readonly rows: readonly unknown[];
  readonly rowCount: number | null;
}

/** Anything that runs one parameterised statement: a pool, or a client checked out of it. */
export interface PostgresQueryable {
  query(text: string, values?: unknown[]): Promise<PostgresQueryResult>;
}

/** pg's config form of `query()`, used for the store's own statements when `preparedStatements` is on. */
interface NamedQueryable {
  query(config: { name: string; text: string; values: unknown[] }): Promise<PostgresQueryResult>;
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

const DEFAULT_SCHEMA = 'public';
const DEFAULT_TABLE = 'idempotency_records';
const DEFAULT_SWEEP_BATCH = 500;
/** A claim that keeps meeting a concurrent insert or delete gives up after this many statements (fail closed). */
const MAX_CLAIM_ATTEMPTS = 5;
/** 48, not 63: the index names append up to 15 characters, and Postgres would truncate them into one name. */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

const COLUMNS =
  'pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, ' +
  'result_id, response_status, response_headers::text AS response_headers, response_body';

/** The DDL for a schema and table, in the order `migrate()` runs it. */
function ddl(schema: string, table: string): { createSchema: string; rest: string[] } {
  const t = `${quote(schema)}.${quote(table)}`;
  return {
    createSchema: `CREATE SCHEMA IF NOT EXISTS ${quote(schema)};`,
    rest: [
      `CREATE TABLE IF NOT EXISTS ${t} (
  pk               text    PRIMARY KEY,
  scope            text    NOT NULL,
  key              text    NOT NULL,
  status           text    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')),
  fingerprint      text    NOT NULL,
  id               text    NOT NULL,
  token            text    NOT NULL,
  claimed_at       bigint  NOT NULL,
  lease_expires_at bigint  NOT NULL,
  expires_at       bigint  NOT NULL,
  retryable        boolean NOT NULL DEFAULT false,
  result_id        text,
  response_status  integer,
  response_headers jsonb,
  response_body    bytea
);`,
      `CREATE INDEX IF NOT EXISTS ${quote(`${table}_expires_at_idx`)} ON ${t} (expires_at);`,
      `CREATE INDEX IF NOT EXISTS ${quote(`${table}_scope_claimed_at_idx`)} ON ${t} (scope, claimed_at DESC);`,
    ],
  };
}

/**
 * The DDL `migrate()` runs, as one SQL script for your own migration tool. Times are epoch milliseconds in
 * `bigint` columns. `CREATE SCHEMA` is left out for `public`, which every database has.
 *
 * @example
 * await writeFile('migrations/0001_idem.sql', postgresSchemaSql({ schema: 'payments' }))
 */
export function postgresSchemaSql({
  schema = DEFAULT_SCHEMA,
  table = DEFAULT_TABLE,
}: Pick<PostgresStoreOptions, 'schema' | 'table'> = {}): string {
  checkIdentifier('schema', schema);
  checkIdentifier('table', table);
  const { createSchema, rest } = ddl(schema, table);
  return [...(schema === DEFAULT_SCHEMA ? [] : [createSchema]), ...rest].join('\n\n') + '\n';
}

/**
 * Creates a PostgreSQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each statement sent is one): claim 1, or 2 when it waited on a concurrent claim's insert or
 * update (see the comment on `claim`); complete 1; complete with `effects` 3 (`BEGIN`, the conditional
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
export function postgresStore<Tx extends PostgresQueryable = PostgresQueryable>({
  pool,
  schema = DEFAULT_SCHEMA,
  table = DEFAULT_TABLE,
  endPoolOnClose = false,
  preparedStatements = true,
  onRoundTrip,
  claimBarrier,
}: PostgresStoreOptions<Tx & PostgresPoolClient>): PostgresStore<Tx> {
  if (typeof pool?.query !== 'function' || typeof pool.connect !== 'function') {
    throw configError('pool', 'a pg.Pool (an object with query() and connect())');
  }
  checkIdentifier('schema', schema);
  checkIdentifier('table', table);
  if (typeof endPoolOnClose !== 'boolean') throw configError('endPoolOnClose', 'a boolean', endPoolOnClose);
  if (endPoolOnClose && typeof pool.end !== 'function')
    throw configError('pool', 'a pool with end() when endPoolOnClose is true');
  if (typeof preparedStatements !== 'boolean') throw configError('preparedStatements', 'a boolean', preparedStatements);
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  }
  if (claimBarrier !== undefined && typeof claimBarrier !== 'function') {
    throw configError('claimBarrier', 'a function', claimBarrier);
  }
  return new Store<Tx>(pool, schema, table, endPoolOnClose, preparedStatements, onRoundTrip, claimBarrier);
}

class Store<Tx extends PostgresQueryable> implements PostgresStore<Tx> {
  readonly name = 'postgres';
  /** The work may await: it runs on the transaction's own connection, which nothing else uses meanwhile. */
  readonly localWork = 'async';
  readonly #pool: PostgresPool<Tx & PostgresPoolClient>;
  readonly #schema: string;
  readonly #table: string;
  readonly #endPoolOnClose: boolean;
  readonly #sql: ReturnType<typeof statements>;
  /** Statement names by text, for the statements sent prepared; empty when `preparedStatements` is false. */
  readonly #names = new Map<string, string>();
  readonly #onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  readonly #claimBarrier: ((request: ClaimRequest) => Promise<void>) | undefined;
  #roundTrips = 0;
  #closed = false;

  constructor(
    pool: PostgresPool<Tx & PostgresPoolClient>,
    schema: string,
    table: string,
    endPoolOnClose: boolean,
    preparedStatements: boolean,
    onRoundTrip: ((trip: RoundTrip) => void) | undefined,
    claimBarrier: ((request: ClaimRequest) => Promise<void>) | undefined,
  ) {
    this.#pool = pool;
    this.#schema = schema;
    this.#table = table;
    this.#endPoolOnClose = endPoolOnClose;
    this.#sql = statements(`${quote(schema)}.${quote(table)}`);
    if (preparedStatements) {
      for (const op of ['claim', 'complete', 'completeLocal', 'renew', 'release', 'get'] as const) {
        // The hash tells apart the same op on two tables sharing a pool: pg refuses one name for two texts.
        const text = this.#sql[op];
        this.#names.set(text, `idem_${op}_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`);
      }
    }
    this.#onRoundTrip = onRoundTrip;
    this.#claimBarrier = claimBarrier;
  }

  get roundTrips(): number {
    return this.#roundTrips;
  }

  get pool(): PostgresPool<Tx & PostgresPoolClient> {
    return this.#pool;
  }

  get schema(): string {
    return this.#schema;
  }

  get table(): string {
    return this.#table;
  }

  /** Every statement the store sends goes through here, so `roundTrips` counts each one and `onRoundTrip` sees it. */
  #query(op: RoundTrip['op'], on: PostgresQueryable, text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    if (this.#closed) return Promise.reject(new Error('postgres store is closed'));
    this.#roundTrips++;
    const name = this.#names.get(text);
    const sent =
      name !== undefined
        ? (on as unknown as NamedQueryable).query({ name, text, values: values ?? [] })
        : values === undefined
          ? on.query(text)
          : on.query(text, values);
    if (!this.#onRoundTrip) return sent;
    const request: PostgresRoundTripRequest = values === undefined ? { text } : { text, values };
    return sent.then(
      (result) => {
        this.#report({ op, request, response: { rows: result.rows, rowCount: result.rowCount } });
        return result;
      },
      (error: unknown) => {
        this.#report({ op, request, error });
        throw error;
      },
    );
  }

  #report(trip: RoundTrip): void {
    try {
      this.#onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the statement already ran, and its result stands.
    }
  }

  async migrate(): Promise<void> {
    const { createSchema, rest } = ddl(this.#schema, this.#table);
    await this.#transaction('migrate', async (client) => {
      // Concurrent CREATE ... IF NOT EXISTS of the same object can still fail on a catalog unique index; the
      // lock makes a second migrator wait for the first to commit, then find everything in place.
      const lock = `idem:migrate:${this.#schema}.${this.#table}`;
      await this.#query('migrate', client, 'SELECT pg_advisory_xact_lock(hashtext($1))', [lock]);
      // Checked first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the database even when the
      // schema exists, and many application roles lack it.
      const found = await this.#query('migrate', client, 'SELECT 1 FROM pg_namespace WHERE nspname = $1', [
        this.#schema,
      ]);
      if (found.rows.length === 0) await this.#query('migrate', client, createSchema);
      for (const statement of rest) await this.#query('migrate', client, statement);
      return true;
    });
  }

  // The claim is one statement. `cur` reads the row in the statement's snapshot; if that row refuses the claim
  // (a replay, a mismatch, a live lease), the INSERT gets no source row, so the refusal locks and writes nothing
  // (no transaction id, no row lock) and returns `cur` with claimed = false. Otherwise the upsert runs, and its
  // DO UPDATE checks the same condition again on the latest committed version of the row, under the row's lock.
  //
  // READ COMMITTED leaves one gap: B's snapshot shows no row, or a claimable one (expired, a retryable failure, a
  // dead lease), while A inserts or claims that row. B's INSERT waits for A, then meets A's live claim: the DO
  // UPDATE condition is false, `ins` is empty, and `cur` is B's stale view (nothing, or a claimable version). So
  // zero rows, or a row the claim condition accepts, means "stale snapshot": B runs the statement again (one more
  // round trip, a new snapshot) and sees A's row, or claims if A has released it since. Under a REPEATABLE READ
  // or SERIALIZABLE default the same race raises 40001 instead, retried the same way.
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    if (!this.#claimBarrier) return this.#claim(request, this.#pool);
    await this.#claimBarrier(request);
    let result: ClaimResult | undefined;
    await this.#transaction('claim', async (client) => {
      result = await this.#claim(request, client, () => this.#heldUntilWaitedOn(client));
      return true;
    });
    return result as ClaimResult;
  }

  async #claim(request: ClaimRequest, on: PostgresQueryable, wrote?: () => Promise<void>): Promise<ClaimResult> {
    const { pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs } = request;
    const values = [pk, scope, key, fingerprint, id, token, now, now + leaseMs, now + ttlMs];
    for (let attempt = 1; ; attempt++) {
      let rows: readonly unknown[];
      try {
        ({ rows } = await this.#query('claim', on, this.#sql.claim, values));
      } catch (error) {
        if (sqlState(error) === '40001' && attempt < MAX_CLAIM_ATTEMPTS) continue;
        throw error;
      }
      const row = rows[0] as Row | undefined;
      if (row) {
        const record = toRecord(row);
        if (row.claimed === true) {
          await wrote?.();
          return { kind: 'claimed', record };
        }
        if (!isClaimable(record, fingerprint, now)) return { kind: 'existing', record };
      }
      if (attempt >= MAX_CLAIM_ATTEMPTS) {
        throw new Error(`postgres claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} statements`);
      }
    }
  }

  /** `claimBarrier` only: polls until another backend waits on this transaction's uncommitted row (bounded). */
  async #heldUntilWaitedOn(client: PostgresQueryable): Promise<void> {
    const waiting =
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))';
    for (let poll = 0; poll < 200; poll++) {
      const { rows } = await this.#query('claim', client, waiting);
      if (((rows[0] as { n?: number } | undefined)?.n ?? 0) > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  async complete({ pk, token, outcome, effects }: CompleteRequest<Tx>): Promise<WriteResult> {
    const values = [pk, token, ...outcomeValues(outcome)];
    if (!effects) return { ok: (await this.#query('complete', this.#pool, this.#sql.complete, values)).rowCount === 1 };
    // The work's writes first, then the fenced update: if the token no longer matches, both roll back. The row
    // lock is only held from the UPDATE to the COMMIT, so concurrent claims of this key are not kept waiting
    // while the effects run.
    const ok = await this.#transaction('complete', async (client) => {
      await effects(client);
      return (await this.#query('complete', client, this.#sql.complete, values)).rowCount === 1;
    });
    return { ok };
  }

  // runLocal: BEGIN, the claim statement, the work's own statements on the same connection, the fenced UPDATE,
  // COMMIT — one transaction, one commit. The race it closes — two connections run local work on one new key:
  //   A: BEGIN; the claim inserts A's row (uncommitted) → claimed. A holds the row's lock and its unique-index
  //      entry until it commits or rolls back; nobody else can see the row meanwhile.
  //   B: BEGIN; the claim's `cur` sees no row, so its INSERT runs and waits on A's transaction (the unique index
  //      wait: pg_blocking_pids(B) = {A}).
  //   A: the work's INSERTs; the fenced UPDATE writes the final outcome; COMMIT.
  //   B: wakes; the conflicting row is A's committed, final row, so DO UPDATE … WHERE refuses it; `ins` is empty
  //      and `cur` is B's stale view (no row) → zero rows. (Under REPEATABLE READ or SERIALIZABLE, 40001 instead.)
  //      B rolls back — it has written nothing and its work has not run — and starts again: BEGIN; the claim now
  //      reads A's row and refuses without writing → existing: B replays.
  // Had A rolled back (its work threw, or returned null), B's INSERT would have proceeded: B claims the key.
  // Restarting the whole transaction, rather than re-running the statement in it, makes this hold at every
  // isolation level: the claim is the transaction's first statement, so nothing else is lost.
  //
  // On a pipelining client (pg's `pipeline: true`) `BEGIN` goes out with the claim, and the UPDATE with `COMMIT`,
  // without waiting between them: 2 network round trips instead of 4. The UPDATE fails (division by zero) when it
  // changes no row, so a `COMMIT` already sent behind it can only end an aborted transaction, i.e. roll back.
  async runLocal(request: LocalTransactionRequest<Tx>): Promise<LocalTransactionResult> {
    const { pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs, work } = request;
    const values = [pk, scope, key, fingerprint, id, token, now, now + leaseMs, now + ttlMs];
    for (let attempt = 1; ; attempt++) {
      if (this.#closed) throw new Error('postgres store is closed');
      const client = await this.#pool.connect();
      // Set when BEGIN/COMMIT/ROLLBACK itself fails: the connection's state is unknown, so the pool discards it.
      let broken: Error | undefined;
      const rollback = async (): Promise<void> => {
        try {
          await this.#query('local', client, 'ROLLBACK');
        } catch (error) {
          broken = asError(error);
        }
      };
      let retry: unknown;
      try {
        const [begun, claimed] = await this.#both(client, ['BEGIN'], [this.#sql.claim, values]);
        if (begun.status === 'rejected') {
          broken = asError(begun.reason);
          // Only a pipelining client sends the claim after a failed BEGIN, and then it autocommitted: free the key.
          if (claimed?.status === 'fulfilled' && (claimed.value.rows[0] as Row | undefined)?.claimed === true) {
            await this.#query('local', this.#pool, this.#sql.release, [pk, token]).catch(() => undefined);
          }
          throw begun.reason;
        }
        if (claimed?.status !== 'fulfilled') {
          await rollback();
          if (sqlState(claimed?.reason) === '40001' && attempt < MAX_CLAIM_ATTEMPTS) continue;
          throw claimed?.reason;
        }
        const row = claimed.value.rows[0] as Row | undefined;
        const record = row && toRecord(row);
        if (row?.claimed !== true || record === undefined) {
          // A refusal wrote nothing. No row, or a claimable one, is a stale snapshot: start again.
          await rollback();
          if (record && !isClaimable(record, fingerprint, now)) return { kind: 'existing', record };
          retry = `${pk} kept meeting concurrent transactions`;
        } else {
          let outcome: Outcome | null;
          // The work gets the connection behind a guard that refuses statements once the transaction has ended
          // (a late write would otherwise run in whatever transaction the pooled connection serves next), and the
          // wait for it ends if the connection does (the server ended an idle transaction, or was killed):
          // otherwise a handler that never answers would hold a dead connection out of the pool for good.
          const guard = guarded(client);
          try {
            outcome = await Promise.race([work(guard.tx, record), guard.lost]);
          } catch (error) {
            guard.end();
            if (guard.connectionLost) broken = asError(error);
            else await rollback();
            throw error;
          }
          guard.end();
          if (outcome === null) {
            await rollback();
            return { kind: 'rolled-back' };
          }
          const completion = [pk, token, ...outcomeValues(outcome)];
          const [updated, committed] = await this.#both(client, [this.#sql.completeLocal, completion], ['COMMIT']);
          if (updated.status === 'rejected') {
            // Pipelined, the COMMIT behind it has already ended the aborted transaction (as a ROLLBACK).
            if (committed?.status !== 'fulfilled') await rollback();
            if (sqlState(updated.reason) === '25P02') {
              // The work caught a failed statement of its own and answered anyway: nothing can commit now.
              throw new LocalWorkAbortedError(
                `postgres store: a statement of the work on \`tx\` failed and aborted the transaction (SQLSTATE 25P02), so nothing of ${pk} was committed; let that error propagate, or wrap the statement in a SAVEPOINT`,
                { cause: updated.reason },
              );
            }
            if (sqlState(updated.reason) !== '22012') throw updated.reason;
            // Unreachable unless the work deleted or rewrote the row it was handed: nothing was committed.
            throw new Error(`postgres store: runLocal of ${pk} found its own claim gone before the completion`);
          }
          if (committed?.status !== 'fulfilled') {
            broken = asError(committed?.reason);
            throw committed?.reason;
          }
          return { kind: 'committed', record: { ...record, ...outcome } };
        }
      } finally {
        client.release(broken);
      }
      if (attempt >= MAX_CLAIM_ATTEMPTS)
        throw new Error(`postgres runLocal of ${String(retry)} after ${MAX_CLAIM_ATTEMPTS} transactions`);
    }
  }

  /**
   * Two statements on one connection: on a pipelining client (pg's `pipeline: true`) both are sent at once; on
   * any other, the second only once the first succeeded (`undefined`: not sent).
   */
  async #both(
    client: PostgresPoolClient,
    [firstText, firstValues]: readonly [string, unknown[]?],
    [secondText, secondValues]: readonly [string, unknown[]?],
  ): Promise<[PromiseSettledResult<PostgresQueryResult>, PromiseSettledResult<PostgresQueryResult> | undefined]> {
    const send = (text: string, values?: unknown[]) => this.#query('local', client, text, values);
    if (client.pipeline === true) {
      const [first, second] = await Promise.allSettled([send(firstText, firstValues), send(secondText, secondValues)]);
      return [first, second];
    }
    const [first] = await Promise.allSettled([send(firstText, firstValues)]);
    if (first.status === 'rejected') return [first, undefined];
    const [second] = await Promise.allSettled([send(secondText, secondValues)]);
    return [first, second];
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
    const values = [pk, token, now + leaseMs, expiresAt];
    return { ok: (await this.#query('renew', this.#pool, this.#sql.renew, values)).rowCount === 1 };
  }

  async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
    return { ok: (await this.#query('release', this.#pool, this.#sql.release, [pk, token])).rowCount === 1 };
  }

  async get(pk: string): Promise<IdempotencyRecord | null> {
    const row = (await this.#query('get', this.#pool, this.#sql.get, [pk])).rows[0] as Row | undefined;
    return row ? toRecord(row) : null;
  }

  /**
   * Deletes expired records in batches of `batchSize` (default 500), one short statement each, so no statement
   * holds many locks or a long transaction. Rows locked by a concurrent claim are skipped, never waited for;
   * a batch that comes back short ends the sweep (the next sweep picks up what was skipped).
   */
  async sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: SweepRequest): Promise<number> {
    if (!Number.isInteger(batchSize) || batchSize <= 0) throw configError('batchSize', 'a positive integer', batchSize);
    if (limit !== Infinity && (!Number.isInteger(limit) || limit < 0)) {
      throw configError('limit', 'a non-negative integer', limit);
    }
    let deleted = 0;
    while (deleted < limit) {
      const batch = Math.min(batchSize, limit - deleted);
      const count = (await this.#query('sweep', this.#pool, this.#sql.sweep, [now, batch])).rowCount ?? 0;
      deleted += count;
      if (count < batch) break;
    }
    return deleted;
  }

  async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
    const { rows } = await this.#query('list', this.#pool, this.#sql.list, [scope, limit]);
    return rows.map((row) => toRecord(row as Row));
  }

  /** Ends the pool only when `endPoolOnClose` was set; otherwise the pool is the caller's to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#endPoolOnClose) await this.#pool.end?.();
  }

  /**
   * BEGIN, `body`, then COMMIT when it returns true, ROLLBACK when it returns false or throws (rethrown).
   */
  async #transaction(
    op: RoundTrip['op'],
    body: (client: Tx & PostgresPoolClient) => Promise<boolean>,
  ): Promise<boolean> {
    if (this.#closed) throw new Error('postgres store is closed');
    const client = await this.#pool.connect();
    // Set when BEGIN/COMMIT/ROLLBACK itself fails: the connection's state is unknown, so the pool discards it.
    // An error from the body (the work's effects, the UPDATE) leaves a healthy connection once rolled back.
    let broken: Error | undefined;
    const control = async (command: 'BEGIN' | 'COMMIT' | 'ROLLBACK'): Promise<void> => {
      try {
        await this.#query(op, client, command);
      } catch (error) {
        broken = asError(error);
        throw error;
      }
    };
    try {
      await control('BEGIN');
      let commit: boolean;
      try {
        commit = await body(client);
      } catch (error) {
        await control('ROLLBACK').catch(() => {}); // The body's error is the one to report.
        throw error;
      }
      await control(commit ? 'COMMIT' : 'ROLLBACK');
      return commit;
    } finally {
      client.release(broken);
    }
  }
}

/**
 * The claim condition (`isClaimable`) over `row`'s columns, for the request's fingerprint `$4` and now `$7`. The
 * claim statement uses it twice, on its snapshot's row and in the DO UPDATE, so the two cannot drift apart.
 */
function claimable(row: string): string {
  return `${row}.expires_at <= $7::bigint
     OR (${row}.fingerprint = $4
         AND ((${row}.status = 'failed' AND ${row}.retryable)
              OR (${row}.status = 'in_progress' AND ${row}.lease_expires_at <= $7::bigint)))`;
}

/** The statements, built once per store with the table's quoted name. */
function statements(t: string) {
  return {
    claim: `WITH cur AS (
  SELECT ${COLUMNS} FROM ${t} WHERE pk = $1
), ins AS (
  INSERT INTO ${t} AS r (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at,
    retryable, result_id, response_status, response_headers, response_body)
  SELECT $1, $2, $3, 'in_progress', $4, $5, $6, $7::bigint, $8::bigint, $9::bigint, false, NULL, NULL, NULL, NULL
  WHERE NOT EXISTS (SELECT 1 FROM cur WHERE NOT (${claimable('cur')}))
  ON CONFLICT (pk) DO UPDATE SET
    scope = EXCLUDED.scope, key = EXCLUDED.key, status = 'in_progress', fingerprint = EXCLUDED.fingerprint,
    id = CASE WHEN r.expires_at > $7::bigint THEN r.id ELSE EXCLUDED.id END,
    token = EXCLUDED.token, claimed_at = EXCLUDED.claimed_at, lease_expires_at = EXCLUDED.lease_expires_at,
    expires_at = EXCLUDED.expires_at, retryable = false, result_id = NULL,
    response_status = NULL, response_headers = NULL, response_body = NULL
  WHERE ${claimable('r')}
  RETURNING ${COLUMNS}
)
SELECT *, true AS claimed FROM ins
UNION ALL
SELECT *, false AS claimed FROM cur WHERE NOT EXISTS (SELECT 1 FROM ins)`,
    complete: `UPDATE ${t} SET status = $3, retryable = $4, result_id = $5,
  response_status = $6, response_headers = $7::jsonb, response_body = $8
WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    // The same UPDATE, failing its transaction (22012) when it changes no row: runLocal may have sent COMMIT already.
    completeLocal: `WITH done AS (
  UPDATE ${t} SET status = $3, retryable = $4, result_id = $5,
    response_status = $6, response_headers = $7::jsonb, response_body = $8
  WHERE pk = $1 AND token = $2 AND status = 'in_progress'
  RETURNING 1
)
SELECT 1 / count(*) AS done FROM done`,
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max.
    renew: `UPDATE ${t} SET lease_expires_at = GREATEST(lease_expires_at, $3::bigint),
  expires_at = GREATEST(expires_at, $4::bigint) WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    release: `DELETE FROM ${t} WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    get: `SELECT ${COLUMNS} FROM ${t} WHERE pk = $1`,
    sweep: `DELETE FROM ${t} WHERE pk IN (
  SELECT pk FROM ${t} WHERE expires_at <= $1::bigint ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
) AND expires_at <= $1::bigint`,
    list: `SELECT ${COLUMNS} FROM ${t} WHERE scope = $1 ORDER BY claimed_at DESC, pk LIMIT $2`,
  };
}

type Row = Record<string, unknown>;

function outcomeValues({ status, retryable, resultId, response }: Outcome): unknown[] {
  return [
    status,
    retryable,
    resultId,
    response?.status ?? null,
    response ? encodeHeaders(response.headers) : null,
    response ? Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength) : null,
  ];
}

/** Converts a row at the store's edge: `bigint` ms (a string in `pg`) to number, `bytea` to a plain Uint8Array. */
function toRecord(row: Row): IdempotencyRecord {
  const response: StoredResponse | null =
    row.response_status === null || row.response_status === undefined
      ? null
      : {
          status: Number(row.response_status),
          headers: decodeHeaders(row.response_headers as string),
          body: toBytes(row.response_body),
        };
  return {
    pk: row.pk as string,
    scope: row.scope as string,
    key: row.key as string,
    status: row.status as RecordStatus,
    fingerprint: row.fingerprint as string,
    id: row.id as string,
    token: row.token as string,
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: row.retryable === true,
    resultId: (row.result_id as string | null) ?? null,
    response,
  };
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  // A driver without a bytea parser hands back the hex text form, `\x0a0b…`.
  if (typeof value === 'string' && value.startsWith('\\x')) return new Uint8Array(Buffer.from(value.slice(2), 'hex'));
  // Never replay a guess: a body the store cannot read is an error, not an empty response.
  throw new Error(`postgres store cannot read response_body of type ${typeof value}`);
}

function checkIdentifier(name: string, value: unknown): void {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw configError(
      name,
      'an identifier of letters, digits and _ (not starting with a digit, at most 48 characters)',
      value,
    );
  }
}

function quote(identifier: string): string {
  return `"${identifier}"`;
}

/**
 * The connection as local work sees it: `tx` refuses statements (and `release`) once `end()` was called, and
 * `lost` rejects if the connection ends or fails while the work runs.
 */
function guarded<Client extends PostgresPoolClient>(
  client: Client,
): {
  tx: Client;
  lost: Promise<never>;
  connectionLost: boolean;
  end(): void;
} {
  const events = client as unknown as {
    once?(event: string, listener: (error?: unknown) => void): unknown;
    off?(event: string, listener: (error?: unknown) => void): unknown;
  };
  let open = true;
  let fail = (_error: Error): void => {};
  const state = {
    connectionLost: false,
    lost: new Promise<never>((_resolve, reject) => (fail = reject)),
    tx: new Proxy(client, {
      get(target, name) {
        if (name === 'release') {
          return () => {
            throw new Error('idem: the store releases this connection; local work must not');
          };
        }
        if (name === 'query' && !open) {
          return () => {
            throw new Error('idem: this transaction has ended; local work may use `tx` only until it answers');
          };
        }
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }),
    end(): void {
      open = false;
      events.off?.('error', onLost);
      events.off?.('end', onLost);
    },
  };
  function onLost(error?: unknown): void {
    state.connectionLost = true;
    fail(error instanceof Error ? error : new Error('postgres store: the connection ended during local work'));
  }
  // Never unhandled: the race above settles on it only when it rejects first.
  state.lost.catch(() => undefined);
  events.once?.('error', onLost);
  events.once?.('end', onLost);
  return state;
}

function sqlState(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
