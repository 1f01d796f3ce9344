/** The MySQL store: one class, every query sent through `#send` (counted, reported, prepared when asked). */
import { configError } from '../../core/errors.js';
import type * as C from '../contract.js';
import { bindMethods, RoundTripMeter } from '../shared/round-trips.js';
import { checkPoolOptions, sweepInBatches, transaction, type Transactions } from '../shared/sql.js';
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
} from './mysql-options.js';
import { checkIdentifier, checkLengths, DEFAULT_TABLE, migrate, quote } from './schema.js';
import { bind, statements, type Run, type Statement, type Statements } from './statements.js';

const DEFAULT_SWEEP_BATCH = 500;
const DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

export class MysqlStoreImpl<Tx extends MysqlQueryable> implements MysqlStore<Tx> {
  readonly name = 'mysql';
  readonly maxResponseBytes: number;
  readonly #pool: MysqlPool<Tx & MysqlPoolConnection>;
  readonly #table: string;
  readonly #endPoolOnClose: boolean;
  readonly #prepared: boolean;
  readonly #sql: Statements;
  readonly #meter: RoundTripMeter;
  /** `#run`, bound once, for the claim in claim.ts. */
  readonly #bound: Run = (op, on, statement, params, prepare) => this.#run(op, on, statement, params, prepare);

  constructor({
    pool,
    table = DEFAULT_TABLE,
    endPoolOnClose = false,
    preparedStatements = true,
    maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES,
    onRoundTrip,
  }: MysqlStoreOptions<Tx & MysqlPoolConnection>) {
    if (typeof pool?.query !== 'function' || typeof pool.getConnection !== 'function') {
      throw configError('pool', 'a mysql2/promise Pool (an object with query() and getConnection())');
    }
    if (multipleStatementsOff(pool)) {
      throw configError(
        'pool',
        'a pool created with multipleStatements: true (a claim is one round trip of three statements)',
      );
    }
    checkIdentifier('table', table);
    checkPoolOptions(pool, endPoolOnClose, preparedStatements);
    if (preparedStatements && typeof pool.execute !== 'function') {
      throw configError(
        'pool',
        'a pool with execute() when preparedStatements is true (or set preparedStatements: false)',
      );
    }
    if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes <= 0) {
      throw configError('maxResponseBytes', 'a positive integer', maxResponseBytes);
    }
    this.#meter = new RoundTripMeter('mysql', onRoundTrip);
    this.#pool = pool;
    this.#table = table;
    this.#endPoolOnClose = endPoolOnClose;
    this.#prepared = preparedStatements;
    this.maxResponseBytes = maxResponseBytes;
    this.#sql = statements(quote(table));
    bindMethods(this);
  }

  get roundTrips(): number {
    return this.#meter.count;
  }

  /** One query of three statements, and the race it closes: claim.ts. */
  claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    return claim(this.#bound, this.#sql.claim, request, this.#pool);
  }

  async complete({ pk, token, outcome, effects }: C.CompleteRequest<Tx>): Promise<C.WriteResult> {
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

  async renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    const params = { pk: bin(pk), token: bin(token), leaseExpiresAt: now + leaseMs, expiresAt };
    return { ok: affected(await this.#run('renew', this.#pool, this.#sql.renew, params, true)) === 1 };
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    const params = { pk: bin(pk), token: bin(token) };
    return { ok: affected(await this.#run('release', this.#pool, this.#sql.release, params, true)) === 1 };
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    const rows = (await this.#run('get', this.#pool, this.#sql.get, { pk: bin(pk) }, true)) as Row[];
    return rows[0] ? toRecord(rows[0]) : null;
  }

  /**
   * Deletes expired records in batches of `batchSize` (default 500), one short statement each on the
   * `expires_at` index, so no statement holds many locks or a long transaction; a batch that comes back short
   * ends the sweep. MySQL has no `SKIP LOCKED` for a `DELETE`: a claim of a key in the batch waits for it.
   */
  sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: C.SweepRequest): Promise<number> {
    return sweepInBatches(batchSize, limit, async (batch) =>
      affected(await this.#run('sweep', this.#pool, this.#sql.sweep, { now, batch })),
    );
  }

  async list({ scope, limit }: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    const rows = (await this.#run('list', this.#pool, this.#sql.list, { scope: bin(scope), limit })) as Row[];
    return rows.map(toRecord);
  }

  /** Ends the pool only when `endPoolOnClose` was set; otherwise the pool is the caller's to end. */
  async close(): Promise<void> {
    if (this.#meter.closed) return;
    this.#meter.close();
    if (this.#endPoolOnClose) await this.#pool.end?.();
  }

  async migrate(): Promise<void> {
    await migrate((op, on, sql) => this.#send(op, on, sql), this.#pool, this.#table, this.maxResponseBytes);
  }

  /**
   * Every query the store sends goes through here, so `roundTrips` counts each one and `onRoundTrip` sees it.
   * `prepare` sends it with `execute` when `preparedStatements` is on.
   */
  #send(
    op: C.RoundTrip['op'],
    on: MysqlQueryable,
    sql: string,
    values?: MysqlValue[],
    prepare = false,
  ): Promise<unknown> {
    if (this.#meter.closed) return Promise.reject(new Error('mysql store is closed'));
    this.#meter.add();
    const sent = (
      prepare && this.#prepared && on.execute
        ? on.execute(sql, values ?? [])
        : values === undefined
          ? on.query(sql)
          : on.query(sql, values)
    ).then(([result]) => result, this.#missingTable);
    if (!this.#meter.onRoundTrip) return sent;
    const request: MysqlRoundTripRequest = values === undefined ? { sql } : { sql, values };
    return this.#meter.observe(op, request, sent);
  }

  /** A statement with named values, bound in the statement's order. */
  #run(
    op: C.RoundTrip['op'],
    on: MysqlQueryable,
    statement: Statement,
    params: Record<string, MysqlValue>,
    prepare = false,
  ) {
    return this.#send(op, on, statement.sql, bind(statement, params), prepare);
  }

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

  /** START TRANSACTION, `body` on one connection of the pool, then COMMIT or ROLLBACK (shared/sql.ts). */
  #transaction(
    op: C.RoundTrip['op'],
    body: (connection: Tx & MysqlPoolConnection) => Promise<boolean>,
  ): Promise<boolean> {
    return transaction(this.#meter, this.#transactions, op, body);
  }

  /**
   * A failed START TRANSACTION/COMMIT/ROLLBACK leaves the session's state unknown: the connection is closed rather
   * than handed to the next caller inside an open transaction.
   */
  readonly #transactions: Transactions<Tx & MysqlPoolConnection> = {
    begin: 'START TRANSACTION',
    connect: () => this.#pool.getConnection(),
    send: (op, connection, command) => this.#send(op, connection, command),
    done: (connection, broken) => (broken ? connection.destroy() : connection.release()),
  };
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
