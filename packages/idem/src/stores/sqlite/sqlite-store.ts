/** The SQLite store: one class; every call into the engine is a trip of send.ts (counted, reported). */
import { configError } from '../../core/errors.js';
import { isThenable } from '../../core/local.js';
import type * as C from '../contract.js';
import { bindMethods, RoundTripMeter } from '../shared/round-trips.js';
import { sweepInBatches } from '../shared/sql.js';
import { claimAlone, claimer, refusal } from './claim.js';
import { outcomeParams, toRecord } from './codec.js';
import { localRunner, refuseInTransaction } from './local.js';
import { checkTable, DEFAULT_TABLE, sqliteSchema } from './schema.js';
import { sqliteCalls, type SqliteCalls } from './send.js';
import type { SqliteDatabase, SqliteStore, SqliteStoreOptions } from './sqlite-options.js';
import { statements, type Statements } from './statements.js';

export class SqliteStoreImpl<Db extends SqliteDatabase> implements SqliteStore<Db> {
  readonly name = 'sqlite';
  /** The work must return at once: the transaction is on the process's one connection (see `runLocal`). */
  readonly localWork = 'sync';
  readonly database: Db;
  readonly table: string;
  readonly #closeDatabase: boolean;
  readonly #claimBarrier: ((request: C.ClaimRequest) => Promise<void>) | undefined;
  readonly #calls: SqliteCalls;
  readonly #sql: Statements;
  /** The fenced completion with effects, in one `BEGIN IMMEDIATE` transaction. */
  readonly #completeTx: {
    immediate(pk: string, token: string, outcome: C.Outcome, effects: (tx: Db) => unknown): boolean;
  };
  readonly #local: (request: C.LocalTransactionRequest<Db>) => C.LocalTransactionResult;

  constructor({
    database,
    table = DEFAULT_TABLE,
    busyTimeoutMs = 5_000,
    closeDatabase = false,
    onRoundTrip,
    claimBarrier,
  }: SqliteStoreOptions<Db>) {
    const methods = ['prepare', 'exec', 'pragma', 'transaction', 'close'] as const;
    if (typeof database !== 'object' || database === null || methods.some((m) => typeof database[m] !== 'function')) {
      throw configError('database', 'an open better-sqlite3 Database');
    }
    checkTable(table);
    if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw configError('busyTimeoutMs', 'a non-negative integer', busyTimeoutMs);
    }
    if (typeof closeDatabase !== 'boolean') throw configError('closeDatabase', 'a boolean', closeDatabase);
    const meter = new RoundTripMeter('sqlite', onRoundTrip);
    if (claimBarrier !== undefined && typeof claimBarrier !== 'function') {
      throw configError('claimBarrier', 'a function', claimBarrier);
    }
    this.database = database;
    this.table = table;
    this.#closeDatabase = closeDatabase;
    this.#claimBarrier = claimBarrier;
    const calls = (this.#calls = sqliteCalls(database, meter));
    calls.trip('open', () => calls.pragma(`busy_timeout = ${busyTimeoutMs}`));
    calls.trip('open', () => calls.pragma('journal_mode = WAL'));
    this.#sql = statements(table);
    // The update is conditional on the token and `in_progress`; the effects run only if it changed the row, and
    // both commit together or not at all.
    this.#completeTx = database.transaction(
      (pk: string, token: string, outcome: C.Outcome, effects: (tx: Db) => unknown): boolean => {
        if (!this.#write(pk, token, outcome)) return false;
        const value = effects(database);
        if (isThenable(value)) {
          void value.then(undefined, () => {}); // Its rejection is not ours to report; the refusal below is.
          throw configError('effects', 'a synchronous function: SQLite transactions here are synchronous');
        }
        return true;
      },
    );
    this.#local = localRunner(database, claimer(calls, this.#sql), (pk, token, outcome) =>
      this.#write(pk, token, outcome),
    );
    bindMethods(this);
  }

  get roundTrips(): number {
    return this.#calls.roundTrips;
  }

  // A refusal is answered from a plain read, without the write lock; otherwise the upsert under it: claim.ts.
  async claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    refuseInTransaction(this.database, 'claim');
    const [calls, sql] = [this.#calls, this.#sql];
    if (!this.#claimBarrier)
      return calls.trip('claim', () => refusal(calls, sql, request) ?? claimAlone(calls, sql, request));
    const refused = calls.trip('claim', () => refusal(calls, sql, request));
    if (refused) return refused;
    await this.#claimBarrier(request);
    return calls.trip('claim', () => claimAlone(calls, sql, request));
  }

  // Without effects, the fenced UPDATE alone (one statement, atomic); with them, a transaction around both.
  async complete({ pk, token, outcome, effects }: C.CompleteRequest<Db>): Promise<C.WriteResult> {
    refuseInTransaction(this.database, 'complete');
    if (!effects) return { ok: this.#calls.trip('complete', () => this.#write(pk, token, outcome)) };
    return { ok: this.#calls.trip('complete', () => this.#completeTx.immediate(pk, token, outcome, effects)) };
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    const params = { pk, token, leaseExpiresAt: now + leaseMs, expiresAt };
    return { ok: this.#calls.trip('renew', () => this.#calls.run(this.#sql.renew, params)) === 1 };
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    return { ok: this.#calls.trip('release', () => this.#calls.run(this.#sql.release, { pk, token })) === 1 };
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    const row = this.#calls.trip('get', () => this.#calls.one(this.#sql.get, { pk }));
    return row ? toRecord(row) : null;
  }

  // The same plain read answers a refusal without the write lock (see `claim`); otherwise local.ts's transaction.
  async runLocal(request: C.LocalTransactionRequest<Db>): Promise<C.LocalTransactionResult> {
    const [calls, sql] = [this.#calls, this.#sql];
    if (!this.#claimBarrier) return calls.trip('local', () => refusal(calls, sql, request) ?? this.#local(request));
    const refused = calls.trip('local', () => refusal(calls, sql, request));
    if (refused) return refused;
    await this.#claimBarrier(request);
    return calls.trip('local', () => this.#local(request));
  }

  // Batched so no single statement holds the write lock for long, with a turn of the event loop between
  // batches so traffic in this process is served meanwhile. Each batch is one round trip.
  sweep({ now, batchSize = 1_000, limit = Infinity }: C.SweepRequest): Promise<number> {
    return sweepInBatches(
      batchSize,
      limit,
      (take) => this.#calls.trip('sweep', () => this.#calls.run(this.#sql.sweep, { now, take })),
      () => new Promise<void>((resolve) => setImmediate(resolve)),
    );
  }

  async list({ scope, limit }: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    return this.#calls.trip('list', () => this.#calls.all(this.#sql.list, { scope, limit })).map(toRecord);
  }

  async close(): Promise<void> {
    if (this.#calls.closed) return;
    this.#calls.close();
    if (this.#closeDatabase) this.database.close();
  }

  async migrate(): Promise<void> {
    const ddl = sqliteSchema(this.table);
    this.#calls.trip('migrate', () =>
      this.#calls.execute(
        ddl,
        undefined,
        () => this.database.exec(ddl),
        () => null,
      ),
    );
  }

  /** The fenced completion: true when it changed the row (the token still held it `in_progress`). */
  #write(pk: string, token: string, outcome: C.Outcome): boolean {
    return this.#calls.run(this.#sql.complete, outcomeParams(pk, token, outcome)) === 1;
  }
}
