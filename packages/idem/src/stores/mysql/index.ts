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
  ListRequest,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { claim } from './claim.js';
import { affected, bin, outcomeParams, toRecord, type Row } from './codec.js';
import type {
  MysqlPool,
  MysqlPoolConnection,
  MysqlQueryable,
  MysqlRoundTripRequest,
  MysqlStore,
  MysqlStoreOptions,
  MysqlValue,
} from './options.js';
import { checkIdentifier, checkLengths, DEFAULT_TABLE, migrate, mysqlSchemaSql, quote } from './schema.js';
import { bind, statements, type Run, type Statement, type Statements } from './statements.js';

export { mysqlSchemaSql };
export type * from './options.js';

const DEFAULT_SWEEP_BATCH = 500;
const DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/**
 * Creates a MySQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each query sent is one): claim 1 (one query of two statements; 2 or more only when InnoDB picks
 * it as a deadlock victim, or the record changed between its two statements, see claim.ts);
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

class Store<Tx extends MysqlQueryable> implements MysqlStore<Tx> {
  readonly name = 'mysql';
  readonly maxResponseBytes: number;
  readonly #pool: MysqlPool<Tx & MysqlPoolConnection>;
  readonly #table: string;
  readonly #endPoolOnClose: boolean;
  readonly #prepared: boolean;
  readonly #sql: Statements;
  readonly #onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  /** `#run`, bound once, for the claim in claim.ts. */
  readonly #bound: Run = (op, on, statement, params, prepare) => this.#run(op, on, statement, params, prepare);
  #roundTrips = 0;
  #closed = false;
  /**
   * MySQL says `Table 'db.t' doesn't exist` (ER_NO_SUCH_TABLE) when Idem's table is missing: this adds the command
   * that creates it. Its `code`, `errno` and `sqlState` stay the driver's.
   */
  readonly #missingTable = (error: unknown): never => {
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== 'ER_NO_SUCH_TABLE' || !String((error as Error).message).includes(this.#table)) throw error;
    const query = this.#table === DEFAULT_TABLE ? '' : `?table=${this.#table}`;
    const message =
      `mysql store: Idem's table ${this.#table} does not exist in this database. Create it: ` +
      `idem migrate --store 'mysql://…/<database>${query}', or await store.migrate().`;
    const { errno, sqlState } = error as { errno?: unknown; sqlState?: unknown };
    throw Object.assign(new Error(message, { cause: error }), { code, errno, sqlState });
  };

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
    ).then(([result]) => result, this.#missingTable);
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
    await migrate((op, on, sql) => this.#send(op, on, sql), this.#pool, this.#table, this.maxResponseBytes);
  }

  /** One query of two statements, and the race it closes: claim.ts. */
  claim(request: ClaimRequest): Promise<ClaimResult> {
    return claim(this.#bound, this.#sql.claim, request, this.#pool);
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
 * True when the pool is visibly a mysql2 pool without `multipleStatements` (its config is read where mysql2 keeps
 * it: `pool.pool.config` for the promise wrapper, `pool.config` for the callback pool). Unknown shapes pass.
 */
function multipleStatementsOff(pool: unknown): boolean {
  const core = (pool as { pool?: unknown }).pool ?? pool;
  const config = (core as { config?: { connectionConfig?: { multipleStatements?: unknown } } }).config;
  const value = config?.connectionConfig?.multipleStatements;
  return value !== undefined && value !== true;
}
