/**
 * @module `idem/stores/mysql` — records in a MySQL 8 or MariaDB (tested on 10.11) InnoDB table, through your own
 * `mysql2/promise` pool (or anything of the same shape). The work's own writes can commit in the same
 * transaction as the record's completion.
 */
import { configError } from '../../core/errors.js';
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
 * `multipleStatements: true`: a claim is one round trip of two statements. `end` is only called when
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

const DEFAULT_TABLE = 'idempotency_records';
const DEFAULT_SWEEP_BATCH = 500;
const DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;
/** A claim that keeps meeting deadlocks or a record changing under its read gives up after this many (fail closed). */
const MAX_CLAIM_ATTEMPTS = 5;
/** 40, not 64: the index names append up to 24 characters, and MySQL refuses names over 64. */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;
/** ER_LOCK_DEADLOCK: InnoDB chose this statement as a deadlock's victim and rolled it back whole. */
const ER_LOCK_DEADLOCK = 1213;
/** Column widths, in bytes: a longer value is refused before it is sent, never truncated by a lax `sql_mode`. */
const LIMITS = { pk: 1024, scope: 1024, key: 1024, fingerprint: 255, id: 255, token: 255, resultId: 1024 } as const;

const COLUMNS =
  'pk, scope, `key`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, ' +
  'result_id, response_status, response_headers, response_body';

/**
 * The DDL `migrate()` runs, for your own migration tool. Every text column is `VARBINARY`: keys compare byte for
 * byte, whatever the connection's character set or the server's collation (no case folding, no trailing-space
 * padding). Times are epoch milliseconds in `BIGINT` columns.
 *
 * @example
 * await writeFile('migrations/0001_idem.sql', mysqlSchemaSql({ table: 'idem_records' }))
 */
export function mysqlSchemaSql({ table = DEFAULT_TABLE }: Pick<MysqlStoreOptions, 'table'> = {}): string {
  checkIdentifier('table', table);
  return `CREATE TABLE IF NOT EXISTS ${quote(table)} (
  pk               VARBINARY(${LIMITS.pk})  NOT NULL,
  scope            VARBINARY(${LIMITS.scope})  NOT NULL,
  \`key\`            VARBINARY(${LIMITS.key})  NOT NULL,
  status           ENUM('in_progress', 'succeeded', 'failed') NOT NULL,
  fingerprint      VARBINARY(${LIMITS.fingerprint})   NOT NULL,
  id               VARBINARY(${LIMITS.id})   NOT NULL,
  token            VARBINARY(${LIMITS.token})   NOT NULL,
  claimed_at       BIGINT           NOT NULL,
  lease_expires_at BIGINT           NOT NULL,
  expires_at       BIGINT           NOT NULL,
  retryable        BOOLEAN          NOT NULL DEFAULT FALSE,
  result_id        VARBINARY(${LIMITS.resultId}),
  response_status  INT,
  response_headers LONGBLOB,
  response_body    LONGBLOB,
  PRIMARY KEY (pk),
  KEY ${quote(`${table}_expires_at_idx`)} (expires_at),
  KEY ${quote(`${table}_scope_claimed_at_idx`)} (scope, claimed_at)
) ENGINE = InnoDB;
`;
}

/**
 * Creates a MySQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each query sent is one): claim 1 (one query of two statements; 2 or more only when InnoDB picks
 * it as a deadlock victim, or the record changed between its two statements, see the comment on `claim`);
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
export function mysqlStore<Tx extends MysqlQueryable = MysqlQueryable>({
  pool,
  table = DEFAULT_TABLE,
  endPoolOnClose = false,
  preparedStatements = true,
  maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES,
  onRoundTrip,
}: MysqlStoreOptions<Tx & MysqlPoolConnection>): MysqlStore<Tx> {
  if (typeof pool?.query !== 'function' || typeof pool.getConnection !== 'function') {
    throw configError('pool', 'a mysql2/promise Pool (an object with query() and getConnection())');
  }
  if (multipleStatementsOff(pool)) {
    throw configError(
      'pool',
      'a pool created with multipleStatements: true (a claim is one round trip of two statements)',
    );
  }
  checkIdentifier('table', table);
  if (typeof endPoolOnClose !== 'boolean') throw configError('endPoolOnClose', 'a boolean', endPoolOnClose);
  if (endPoolOnClose && typeof pool.end !== 'function')
    throw configError('pool', 'a pool with end() when endPoolOnClose is true');
  if (typeof preparedStatements !== 'boolean') throw configError('preparedStatements', 'a boolean', preparedStatements);
  if (preparedStatements && typeof pool.execute !== 'function') {
    throw configError(
      'pool',
      'a pool with execute() when preparedStatements is true (or set preparedStatements: false)',
    );
  }
  if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes <= 0) {
    throw configError('maxResponseBytes', 'a positive integer', maxResponseBytes);
  }
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  }
  return new Store<Tx>(pool, table, endPoolOnClose, preparedStatements, maxResponseBytes, onRoundTrip);
}

/** A statement with `:name` placeholders, compiled once to mysql2's `?` form and the order of its values. */
interface Statement {
  readonly sql: string;
  readonly names: readonly string[];
}

class Store<Tx extends MysqlQueryable> implements MysqlStore<Tx> {
  readonly name = 'mysql';
  readonly maxResponseBytes: number;
  readonly #pool: MysqlPool<Tx & MysqlPoolConnection>;
  readonly #table: string;
  readonly #endPoolOnClose: boolean;
  readonly #prepared: boolean;
  readonly #sql: ReturnType<typeof statements>;
  readonly #onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  #roundTrips = 0;
  #closed = false;

  constructor(
    pool: MysqlPool<Tx & MysqlPoolConnection>,
    table: string,
    endPoolOnClose: boolean,
    preparedStatements: boolean,
    maxResponseBytes: number,
    onRoundTrip: ((trip: RoundTrip) => void) | undefined,
  ) {
    this.#pool = pool;
    this.#table = table;
    this.#endPoolOnClose = endPoolOnClose;
    this.#prepared = preparedStatements;
    this.maxResponseBytes = maxResponseBytes;
    this.#sql = statements(quote(table));
    this.#onRoundTrip = onRoundTrip;
  }

  get roundTrips(): number {
    return this.#roundTrips;
  }

  /**
   * Every query the store sends goes through here, so `roundTrips` counts each one and `onRoundTrip` sees it.
   * `prepare` sends it with `execute` when `preparedStatements` is on.
   */
  #send(
    op: RoundTrip['op'],
    on: MysqlQueryable,
    sql: string,
    values?: MysqlValue[],
    prepare = false,
  ): Promise<unknown> {
    if (this.#closed) return Promise.reject(new Error('mysql store is closed'));
    this.#roundTrips++;
    const sent = (
      prepare && this.#prepared && on.execute
        ? on.execute(sql, values ?? [])
        : values === undefined
          ? on.query(sql)
          : on.query(sql, values)
    ).then(([result]) => result);
    if (!this.#onRoundTrip) return sent;
    const request: MysqlRoundTripRequest = values === undefined ? { sql } : { sql, values };
    return sent.then(
      (response) => {
        this.#report({ op, request, response });
        return response;
      },
      (error: unknown) => {
        this.#report({ op, request, error });
        throw error;
      },
    );
  }

  /** A statement with named values, bound in the statement's order. */
  #run(
    op: RoundTrip['op'],
    on: MysqlQueryable,
    statement: Statement,
    params: Record<string, MysqlValue>,
    prepare = false,
  ) {
    return this.#send(op, on, statement.sql, bind(statement, params), prepare);
  }

  #report(trip: RoundTrip): void {
    try {
      this.#onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the statement already ran, and its result stands.
    }
  }

  async migrate(): Promise<void> {
    // CREATE TABLE IF NOT EXISTS is atomic under InnoDB's metadata lock: a second migrator finds the table made.
    await this.#send('migrate', this.#pool, mysqlSchemaSql({ table: this.#table }).trim());
    const rows = (await this.#send(
      'migrate',
      this.#pool,
      'SELECT @@max_allowed_packet AS max_allowed_packet',
    )) as Row[];
    const packet = Number(rows[0]?.max_allowed_packet);
    const needed = requiredPacket(this.maxResponseBytes);
    if (!(packet >= needed)) {
      throw configError(
        'maxResponseBytes',
        `at most (max_allowed_packet − 1 MiB) / 2 = ${Math.floor((packet - 1024 * 1024) / 2)} bytes on this server ` +
          `(max_allowed_packet is ${packet}; raise it to ${needed} or more, or lower maxResponseBytes)`,
        this.maxResponseBytes,
      );
    }
  }

  // The claim is one atomic statement, INSERT … ON DUPLICATE KEY UPDATE, and a SELECT of the row in the same
  // round trip. No row: the INSERT writes ours. A row: InnoDB takes its exclusive lock and the UPDATE decides on
  // its latest committed version, under that lock, whatever the isolation level. Every assignment keeps the old
  // value unless the row is claimable (`CLAIMABLE`, the contract's `isClaimable`). Assignments run left to right
  // and see the columns already assigned, so the condition is decided once, by the first one: `token` becomes
  // ours only if the row is claimable, and every later one asks `token = ours` (true only if this statement just
  // wrote it: tokens are fresh on every claim). MariaDB's SIMULTANEOUS_ASSIGNMENT mode shows every assignment the
  // old row instead, where the same condition repeated (`OR claimable`) decides the same way.
  //
  //   A: INSERT … ON DUPLICATE KEY UPDATE   no row: inserts, holds the new row's lock until its statement commits
  //   B: INSERT … ON DUPLICATE KEY UPDATE   duplicate key: waits for A's lock, then reads A's committed claim:
  //                                         live, so every column keeps A's value; B's token is never written
  //   A: SELECT … WHERE pk                  token = A's: claimed
  //   B: SELECT … WHERE pk                  token = A's: existing, A's record
  //
  // The SELECT runs after the upsert has committed (autocommit), so the row it reads may have moved on in between:
  // A's record completed (B replays it, which is right), or released, lapsed or expired since (gone, or claimable
  // again). Zero rows, or a row the claim condition accepts, means "decided on an older version": B runs the
  // query again. Our token in the row means our upsert wrote it (tokens are fresh), so "claimed" is never wrong;
  // had a takeover after our own lease replaced it before the SELECT, we would answer from the taker's row, as a
  // refusal. A deadlock victim (ER_LOCK_DEADLOCK, its statement rolled back whole) runs the query again too.
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const { pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs } = request;
    checkLengths({ pk, scope, key, fingerprint, id, token });
    const params = {
      pk: bin(pk),
      scope: bin(scope),
      key: bin(key),
      fingerprint: bin(fingerprint),
      id: bin(id),
      token: bin(token),
      now,
      leaseExpiresAt: now + leaseMs,
      expiresAt: now + ttlMs,
    };
    for (let attempt = 1; ; attempt++) {
      let results: unknown;
      try {
        results = await this.#run('claim', this.#pool, this.#sql.claim, params);
      } catch (error) {
        if (errno(error) === ER_LOCK_DEADLOCK && attempt < MAX_CLAIM_ATTEMPTS) continue;
        throw error;
      }
      const row = ((results as unknown[])[1] as Row[] | undefined)?.[0];
      if (row) {
        const record = toRecord(row);
        if (record.token === token) return { kind: 'claimed', record };
        if (!isClaimable(record, fingerprint, now)) return { kind: 'existing', record };
      }
      if (attempt >= MAX_CLAIM_ATTEMPTS) {
        throw new Error(`mysql claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} queries`);
      }
    }
  }

  async complete({ pk, token, outcome, effects }: CompleteRequest<Tx>): Promise<WriteResult> {
    if (outcome.resultId !== null) checkLengths({ resultId: outcome.resultId });
    const params = { pk: bin(pk), token: bin(token), ...outcomeParams(outcome) };
    if (!effects)
      return { ok: affected(await this.#run('complete', this.#pool, this.#sql.complete, params, true)) === 1 };
    // The work's writes first, then the fenced update: if the token no longer matches, both roll back. The row
    // lock is only held from the UPDATE to the COMMIT, so claims of this key (which lock the row) are not kept
    // waiting while the effects run.
    const ok = await this.#transaction('complete', async (connection) => {
      await effects(connection);
      return affected(await this.#run('complete', connection, this.#sql.complete, params, true)) === 1;
    });
    return { ok };
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
    const params = { pk: bin(pk), token: bin(token), leaseExpiresAt: now + leaseMs, expiresAt };
    return { ok: affected(await this.#run('renew', this.#pool, this.#sql.renew, params, true)) === 1 };
  }

  async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
    const params = { pk: bin(pk), token: bin(token) };
    return { ok: affected(await this.#run('release', this.#pool, this.#sql.release, params, true)) === 1 };
  }

  async get(pk: string): Promise<IdempotencyRecord | null> {
    const rows = (await this.#run('get', this.#pool, this.#sql.get, { pk: bin(pk) }, true)) as Row[];
    return rows[0] ? toRecord(rows[0]) : null;
  }

  /**
   * Deletes expired records in batches of `batchSize` (default 500), one short statement each on the
   * `expires_at` index, so no statement holds many locks or a long transaction; a batch that comes back short
   * ends the sweep. MySQL has no `SKIP LOCKED` for a `DELETE`: a claim of a key in the batch waits for it.
   */
  async sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: SweepRequest): Promise<number> {
    if (!Number.isInteger(batchSize) || batchSize <= 0) throw configError('batchSize', 'a positive integer', batchSize);
    if (limit !== Infinity && (!Number.isInteger(limit) || limit < 0)) {
      throw configError('limit', 'a non-negative integer', limit);
    }
    let deleted = 0;
    while (deleted < limit) {
      const batch = Math.min(batchSize, limit - deleted);
      const count = affected(await this.#run('sweep', this.#pool, this.#sql.sweep, { now, batch }));
      deleted += count;
      if (count < batch) break;
    }
    return deleted;
  }

  async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
    const rows = (await this.#run('list', this.#pool, this.#sql.list, { scope: bin(scope), limit })) as Row[];
    return rows.map(toRecord);
  }

  /** Ends the pool only when `endPoolOnClose` was set; otherwise the pool is the caller's to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#endPoolOnClose) await this.#pool.end?.();
  }

  /**
   * START TRANSACTION, `body`, then COMMIT when it returns true, ROLLBACK when it returns false or throws
   * (rethrown).
   */
  async #transaction(
    op: RoundTrip['op'],
    body: (connection: Tx & MysqlPoolConnection) => Promise<boolean>,
  ): Promise<boolean> {
    if (this.#closed) throw new Error('mysql store is closed');
    const connection = await this.#pool.getConnection();
    // Set when START TRANSACTION/COMMIT/ROLLBACK itself fails: the session's state is unknown, so the connection
    // is closed rather than handed to the next caller inside an open transaction. An error from the body (the
    // work's effects, the UPDATE) leaves a healthy connection once rolled back.
    let broken = false;
    const control = async (command: 'START TRANSACTION' | 'COMMIT' | 'ROLLBACK'): Promise<void> => {
      try {
        await this.#send(op, connection, command);
      } catch (error) {
        broken = true;
        throw error;
      }
    };
    try {
      await control('START TRANSACTION');
      let commit: boolean;
      try {
        commit = await body(connection);
      } catch (error) {
        await control('ROLLBACK').catch(() => {}); // The body's error is the one to report.
        throw error;
      }
      await control(commit ? 'COMMIT' : 'ROLLBACK');
      return commit;
    } finally {
      if (broken) connection.destroy();
      else connection.release();
    }
  }
}

/**
 * The claim condition (`isClaimable`) over the stored row's columns, for the request's `:fingerprint` and `:now`.
 */
const CLAIMABLE = `(expires_at <= :now
    OR (fingerprint = :fingerprint
        AND ((status = 'failed' AND retryable)
             OR (status = 'in_progress' AND lease_expires_at <= :now))))`;

/** The statements, built once per store with the table's quoted name. */
function statements(t: string) {
  /** True in every assignment after `token`'s exactly when this statement claims the row (see `claim`). */
  const won = `(token = :token OR ${CLAIMABLE})`;
  const keep = (column: string, value: string) => `${column} = IF(${won}, ${value}, ${column})`;
  return {
    claim: named(`INSERT INTO ${t} (${COLUMNS})
VALUES (:pk, :scope, :key, 'in_progress', :fingerprint, :id, :token, :now, :leaseExpiresAt, :expiresAt, FALSE,
  NULL, NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
  token = IF(${CLAIMABLE}, :token, token),
  ${keep('id', 'IF(expires_at > :now, id, :id)')},
  ${keep('scope', ':scope')}, ${keep('`key`', ':key')}, ${keep('status', `'in_progress'`)},
  ${keep('fingerprint', ':fingerprint')}, ${keep('claimed_at', ':now')},
  ${keep('lease_expires_at', ':leaseExpiresAt')}, ${keep('expires_at', ':expiresAt')},
  ${keep('retryable', 'FALSE')}, ${keep('result_id', 'NULL')}, ${keep('response_status', 'NULL')},
  ${keep('response_headers', 'NULL')}, ${keep('response_body', 'NULL')};
SELECT ${COLUMNS} FROM ${t} WHERE pk = :pk`),
    complete: named(`UPDATE ${t} SET status = :status, retryable = :retryable, result_id = :resultId,
  response_status = :responseStatus, response_headers = :responseHeaders, response_body = :responseBody
WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max. A
    // renewal that moves nothing still counts 1 (affectedRows is rows matched, under mysql2's default FOUND_ROWS).
    renew: named(`UPDATE ${t} SET lease_expires_at = GREATEST(lease_expires_at, :leaseExpiresAt),
  expires_at = GREATEST(expires_at, :expiresAt) WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    release: named(`DELETE FROM ${t} WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    get: named(`SELECT ${COLUMNS} FROM ${t} WHERE pk = :pk`),
    sweep: named(`DELETE FROM ${t} WHERE expires_at <= :now ORDER BY expires_at LIMIT :batch`),
    list: named(`SELECT ${COLUMNS} FROM ${t} WHERE scope = :scope ORDER BY claimed_at DESC, pk DESC LIMIT :limit`),
  };
}

/** Compiles `:name` placeholders to `?`, remembering the order. */
function named(text: string): Statement {
  const names: string[] = [];
  const sql = text.replace(/:([A-Za-z]+)/g, (_, name: string) => {
    names.push(name);
    return '?';
  });
  return { sql, names };
}

function bind(statement: Statement, params: Record<string, MysqlValue>): MysqlValue[] {
  return statement.names.map((name) => {
    const value = params[name];
    if (value === undefined) throw new Error(`mysql store: no value for :${name}`);
    return value;
  });
}

type Row = Record<string, unknown>;

function outcomeParams({ status, retryable, resultId, response }: Outcome): Record<string, MysqlValue> {
  return {
    status,
    retryable: retryable ? 1 : 0,
    resultId: resultId === null ? null : bin(resultId),
    responseStatus: response?.status ?? null,
    responseHeaders: response ? bin(encodeHeaders(response.headers)) : null,
    responseBody: response
      ? Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength)
      : null,
  };
}

/** The packet a completion of `maxResponseBytes` needs: hex doubles bytes in the text protocol; 1 MiB for the rest. */
function requiredPacket(maxResponseBytes: number): number {
  return 2 * maxResponseBytes + 1024 * 1024;
}

/** Text for a VARBINARY column, as UTF-8 bytes: exact whatever the connection's character set. */
function bin(text: string): Buffer {
  return Buffer.from(text, 'utf8');
}

/** A VARBINARY column back to text (a pool with its own `typeCast` may already have made it a string). */
function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (typeof value === 'string') return value;
  throw new Error(`mysql store cannot read a text column of type ${typeof value}`);
}

function checkLengths(values: Partial<Record<keyof typeof LIMITS, string>>): void {
  for (const [name, value] of Object.entries(values) as Array<[keyof typeof LIMITS, string]>) {
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > LIMITS[name]) {
      throw new Error(`mysql store: ${name} is ${bytes} bytes, longer than its column (${LIMITS[name]} bytes)`);
    }
  }
}

/** `affectedRows` of a write: rows matched, with mysql2's default `FOUND_ROWS` flag. */
function affected(result: unknown): number {
  return Number((result as { affectedRows?: unknown }).affectedRows ?? 0);
}

/** Converts a row at the store's edge: `VARBINARY` to text, `BIGINT` ms to number, `LONGBLOB` to a plain Uint8Array. */
function toRecord(row: Row): IdempotencyRecord {
  const response: StoredResponse | null =
    row.response_status === null || row.response_status === undefined
      ? null
      : {
          status: Number(row.response_status),
          headers: decodeHeaders(text(row.response_headers)),
          body: toBytes(row.response_body),
        };
  return {
    pk: text(row.pk),
    scope: text(row.scope),
    key: text(row.key),
    status: row.status as RecordStatus,
    fingerprint: text(row.fingerprint),
    id: text(row.id),
    token: text(row.token),
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: Number(row.retryable) === 1,
    resultId: row.result_id === null || row.result_id === undefined ? null : text(row.result_id),
    response,
  };
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  // Never replay a guess: a body the store cannot read is an error, not an empty response.
  throw new Error(`mysql store cannot read response_body of type ${typeof value}`);
}

/**
 * True when the pool is visibly a mysql2 pool without `multipleStatements` (its config is read where mysql2 keeps
 * it: `pool.pool.config` for the promise wrapper, `pool.config` for the callback pool). Unknown shapes pass.
 */
function multipleStatementsOff(pool: unknown): boolean {
  const core = (pool as { pool?: unknown }).pool ?? pool;
  const config = (core as { config?: { connectionConfig?: { multipleStatements?: unknown } } }).config;
  const value = config?.connectionConfig?.multipleStatements;
  return value !== undefined && value !== true;
}

function checkIdentifier(name: string, value: unknown): void {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw configError(
      name,
      'an identifier of letters, digits and _ (not starting with a digit, at most 40 characters)',
      value,
    );
  }
}

function quote(identifier: string): string {
  return `\`${identifier}\``;
}

function errno(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? (error as { errno?: unknown }).errno : undefined;
}
