/**
 * @module `idem/stores/sqlite` — the embedded default store, on a better-sqlite3 (v12) `Database` that you open
 * and pass in. Your own tables can live in the same database, and the work's writes can commit in the same
 * transaction as the record's completion (docs/DESIGN.md: The work's own writes).
 */
import { configError } from '../../core/errors.js';
import { isThenable } from '../../core/local.js';
import type { LocalTransactionRequest, LocalTransactionResult } from '../../core/record.js';
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
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { decodeHeaders, encodeHeaders, isClaimable } from '../contract.js';

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
 * `RETURNING` is empty and a second `SELECT` reads the row that stopped it.
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

/**
 * The DDL `migrate()` runs: the records table plus an index on `expires_at` (the sweep) and one on
 * `(scope, claimed_at)` (`list`). `schema.sql`, beside this file, is the same DDL for the default table name.
 *
 * @example
 * database.exec(sqliteSchema('idem_records'))
 */
export function sqliteSchema(table = 'idem_records'): string {
  checkTable(table);
  const t = `"${table}"`;
  return `CREATE TABLE IF NOT EXISTS ${t} (
  "pk" TEXT NOT NULL PRIMARY KEY,
  "scope" TEXT NOT NULL,
  "key" TEXT NOT NULL,
  "status" TEXT NOT NULL CHECK ("status" IN ('in_progress', 'succeeded', 'failed')),
  "fingerprint" TEXT NOT NULL,
  "id" TEXT NOT NULL,
  "token" TEXT NOT NULL,
  "claimed_at" INTEGER NOT NULL,
  "lease_expires_at" INTEGER NOT NULL,
  "expires_at" INTEGER NOT NULL,
  "retryable" INTEGER NOT NULL CHECK ("retryable" IN (0, 1)),
  "result_id" TEXT,
  "response_status" INTEGER,
  "response_headers" TEXT,
  "response_body" BLOB
);
CREATE INDEX IF NOT EXISTS "${table}_expires_at" ON ${t} ("expires_at");
CREATE INDEX IF NOT EXISTS "${table}_scope_claimed_at" ON ${t} ("scope", "claimed_at");
`;
}

/**
 * Creates an SQLite store on a database you opened with better-sqlite3. On creation it sets
 * `journal_mode = WAL` (readers never block the writer; persistent in the file) and `busy_timeout`
 * (`busyTimeoutMs`, so a second process waits for the write lock instead of failing). Call `migrate()` once
 * before use, or apply `schema.sql` yourself.
 *
 * Every call is synchronous inside the embedded engine, and is counted as one round trip (there is no
 * network; a claim's read and, when the key is free, its upsert under the write lock, run in one call). `effects` given to `complete`
 * receive `database` and must be synchronous: they run after the token-conditional update, in the same
 * `BEGIN IMMEDIATE` transaction, and only if the token still holds. If they throw, everything rolls back and
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
export function sqliteStore<Db extends SqliteDatabase = SqliteDatabase>({
  database,
  table = 'idem_records',
  busyTimeoutMs = 5_000,
  closeDatabase = false,
  onRoundTrip,
  claimBarrier,
}: SqliteStoreOptions<Db>): SqliteStore<Db> {
  const methods = ['prepare', 'exec', 'pragma', 'transaction', 'close'] as const;
  if (typeof database !== 'object' || database === null || methods.some((m) => typeof database[m] !== 'function')) {
    throw configError('database', 'an open better-sqlite3 Database');
  }
  checkTable(table);
  if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw configError('busyTimeoutMs', 'a non-negative integer', busyTimeoutMs);
  }
  if (typeof closeDatabase !== 'boolean') throw configError('closeDatabase', 'a boolean', closeDatabase);
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  }
  if (claimBarrier !== undefined && typeof claimBarrier !== 'function') {
    throw configError('claimBarrier', 'a function', claimBarrier);
  }

  let roundTrips = 0;
  let closed = false;
  /** The trip in progress, recorded only while someone observes (every trip is synchronous, so one suffices). */
  let observed: { statements: SqliteRoundTripRequest['statements'][number][]; results: unknown[] } | undefined;

  /** One call into the engine: counted, and reported to `onRoundTrip` once it has returned or thrown. */
  const trip = <R>(op: RoundTrip['op'], call: () => R): R => {
    if (closed) throw new Error('sqlite store is closed');
    roundTrips++;
    if (!onRoundTrip) return call();
    const current = (observed = { statements: [], results: [] });
    const request: SqliteRoundTripRequest = { statements: current.statements };
    try {
      const value = call();
      report({ op, request, response: current.results });
      return value;
    } catch (error) {
      report({ op, request, error });
      throw error;
    } finally {
      observed = undefined;
    }
  };
  const report = (roundTrip: RoundTrip): void => {
    try {
      onRoundTrip?.(roundTrip);
    } catch {
      // An observer's failure is not the store's: the request already happened, and its result stands.
    }
  };

  // Statements are prepared on first use (the table may not exist until `migrate()`), then reused.
  const prepared = new Map<string, SqliteStatement>();
  const statement = (sql: string): SqliteStatement => {
    let found = prepared.get(sql);
    if (!found) {
      found = database.prepare(sql);
      prepared.set(sql, found);
    }
    return found;
  };
  /** Runs one statement of the current trip, noting it (before, so a failing one shows) and what it returned. */
  const execute = <R>(
    sql: string,
    params: Record<string, unknown> | undefined,
    call: () => R,
    result: (value: R) => unknown,
  ): R => {
    if (!observed) return call();
    const { statements, results } = observed;
    statements.push(params === undefined ? { sql } : { sql, params });
    const value = call();
    results.push(result(value));
    return value;
  };
  /** The statement's first row (a single-row upsert's `RETURNING`, a lookup by pk); reported as a row list. */
  const one = (sql: string, params: Record<string, unknown>): Row | undefined =>
    execute(
      sql,
      params,
      () => statement(sql).get(params) as Row | undefined,
      (row) => (row === undefined ? [] : [row]),
    );
  const all = (sql: string, params: Record<string, unknown>): Row[] =>
    execute(
      sql,
      params,
      () => statement(sql).all(params) as Row[],
      (rows) => rows,
    );
  const run = (sql: string, params: Record<string, unknown>): number =>
    execute(
      sql,
      params,
      () => statement(sql).run(params).changes,
      (changes) => ({ changes }),
    );

  const pragma = (source: string): unknown =>
    execute(
      `PRAGMA ${source}`,
      undefined,
      () => database.pragma(source),
      (rows) => rows,
    );

  trip('open', () => pragma(`busy_timeout = ${busyTimeoutMs}`));
  trip('open', () => pragma('journal_mode = WAL'));

  const t = `"${table}"`;
  const sql = {
    claim: `INSERT INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at",
        "lease_expires_at", "expires_at", "retryable", "result_id", "response_status", "response_headers", "response_body")
      VALUES (@pk, @scope, @key, 'in_progress', @fingerprint, @id, @token, @now, @leaseExpiresAt, @expiresAt, 0,
        NULL, NULL, NULL, NULL)
      ON CONFLICT ("pk") DO UPDATE SET
        "scope" = excluded."scope", "key" = excluded."key", "status" = 'in_progress',
        "fingerprint" = excluded."fingerprint",
        "id" = CASE WHEN ${t}."expires_at" > @now THEN ${t}."id" ELSE excluded."id" END,
        "token" = excluded."token", "claimed_at" = excluded."claimed_at",
        "lease_expires_at" = excluded."lease_expires_at", "expires_at" = excluded."expires_at",
        "retryable" = 0, "result_id" = NULL, "response_status" = NULL, "response_headers" = NULL,
        "response_body" = NULL
      WHERE ${t}."expires_at" <= @now
        OR (${t}."fingerprint" = excluded."fingerprint" AND (
          (${t}."status" = 'failed' AND ${t}."retryable" = 1)
          OR (${t}."status" = 'in_progress' AND ${t}."lease_expires_at" <= @now)))
      RETURNING *`,
    get: `SELECT * FROM ${t} WHERE "pk" = @pk`,
    complete: `UPDATE ${t} SET "status" = @status, "retryable" = @retryable, "result_id" = @resultId,
        "response_status" = @responseStatus, "response_headers" = @responseHeaders, "response_body" = @responseBody
      WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max.
    renew: `UPDATE ${t} SET "lease_expires_at" = max("lease_expires_at", @leaseExpiresAt),
      "expires_at" = max("expires_at", @expiresAt) WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    release: `DELETE FROM ${t} WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    sweep: `DELETE FROM ${t} WHERE rowid IN (SELECT rowid FROM ${t} WHERE "expires_at" <= @now LIMIT @take)`,
    list: `SELECT * FROM ${t} WHERE "scope" = @scope ORDER BY "claimed_at" DESC, rowid DESC LIMIT @limit`,
  } as const;

  // The race this closes — two requests (two processes, or two connections) claim one key with no record:
  //   A: BEGIN IMMEDIATE takes the database's write lock.
  //   B: BEGIN IMMEDIATE waits for the lock (busy_timeout); it does not read a snapshot that could go stale.
  //   A: the upsert inserts A's row and RETURNING yields it → 'claimed'; COMMIT releases the lock.
  //   B: its upsert conflicts with A's row; A's live lease fails the WHERE, so nothing is written and RETURNING
  //      yields no row; B's SELECT, still under the lock, reads A's row → 'existing'.
  // Both decide on the row under one write lock, so there is never a second winner, and the loser gets the
  // winner's record without another call. (A read-then-write would let both read "nothing", then both write.)
  // The same holds for takeovers: the WHERE is `isClaimable` from src/core/record.ts, evaluated on the stored row.
  const claimIn = (request: ClaimRequest): ClaimResult => {
    const won = one(sql.claim, {
      pk: request.pk,
      scope: request.scope,
      key: request.key,
      fingerprint: request.fingerprint,
      id: request.id,
      token: request.token,
      now: request.now,
      leaseExpiresAt: request.now + request.leaseMs,
      expiresAt: request.now + request.ttlMs,
    });
    if (won) return { kind: 'claimed', record: toRecord(won) };
    const existing = one(sql.get, { pk: request.pk });
    // Unreachable under the write lock: the conflicting row cannot vanish between the two statements.
    if (!existing) throw new Error(`sqlite store: claim of ${request.pk} conflicted with a row that is gone`);
    return { kind: 'existing', record: toRecord(existing) };
  };
  const claimTx = database.transaction(claimIn);

  /** The fenced completion: true when it changed the row (the token still held it `in_progress`). */
  const write = (statement: string, pk: string, token: string, outcome: Outcome): boolean =>
    run(statement, {
      pk,
      token,
      status: outcome.status,
      retryable: outcome.retryable ? 1 : 0,
      resultId: outcome.resultId,
      responseStatus: outcome.response?.status ?? null,
      responseHeaders: outcome.response ? encodeHeaders(outcome.response.headers) : null,
      responseBody: outcome.response?.body ?? null,
    }) === 1;

  // The update is conditional on the token and `in_progress`; the effects run only if it changed the row, and
  // both commit together or not at all.
  const completeTx = database.transaction(
    (pk: string, token: string, outcome: Outcome, effects: ((tx: Db) => unknown) | undefined): boolean => {
      if (!write(sql.complete, pk, token, outcome)) return false;
      if (effects) {
        const value = effects(database);
        if (isThenable(value)) {
          void value.then(undefined, () => {}); // Its rejection is not ours to report; the refusal below is.
          throw configError('effects', 'a synchronous function: SQLite transactions here are synchronous');
        }
      }
      return true;
    },
  );

  // runLocal: the claim, the work and the completion in one `BEGIN IMMEDIATE` transaction (the work is
  // synchronous, so nothing else in this process runs until it commits or rolls back). The race it closes —
  // two processes run local work on one new key:
  //   A: reads the key: absent. BEGIN IMMEDIATE takes the write lock; the upsert inserts A's row → claimed.
  //   B: reads the key: absent (A has not committed; WAL readers see the last commit). BEGIN IMMEDIATE waits
  //      for the write lock (busy_timeout).
  //   A: the work writes its rows; the fenced UPDATE writes the outcome; COMMIT releases the lock.
  //   B: takes the lock; its upsert meets A's committed, final row and the WHERE refuses it; the SELECT reads
  //      A's row → existing: B replays, and its work never runs.
  // Had A's work thrown or returned null, A's ROLLBACK would have left no row, and B would claim the key.
  const localTx = database.transaction((request: LocalTransactionRequest<Db>): LocalTransactionResult => {
    const claimed = claimIn(request);
    if (claimed.kind === 'existing') return claimed;
    const { record } = claimed;
    const outcome = request.work(database, record);
    if (isThenable(outcome)) {
      void Promise.resolve(outcome).then(undefined, () => {}); // Its rejection is not ours to report; the refusal is.
      throw configError('work', 'a synchronous function: SQLite transactions here are synchronous');
    }
    if (outcome === null) throw ROLL_BACK;
    if (!write(sql.complete, record.pk, record.token, outcome)) {
      // Unreachable unless the work deleted or rewrote the row it was handed: refuse to commit anything.
      throw new Error(`sqlite store: runLocal of ${record.pk} found its own claim gone before the completion`);
    }
    return { kind: 'committed', record: { ...record, ...outcome } };
  });
  const local = (request: LocalTransactionRequest<Db>): LocalTransactionResult => {
    try {
      return localTx.immediate(request);
    } catch (error) {
      if (error === ROLL_BACK) return { kind: 'rolled-back' };
      throw error;
    }
  };

  /** A plain read, without the write lock: the record when it refuses the claim, else undefined (see `claim`). */
  const refusal = (request: ClaimRequest): { kind: 'existing'; record: IdempotencyRecord } | undefined => {
    const row = one(sql.get, { pk: request.pk });
    const seen = row === undefined ? null : toRecord(row);
    return seen && !isClaimable(seen, request.fingerprint, request.now)
      ? { kind: 'existing', record: seen }
      : undefined;
  };

  return {
    name: 'sqlite',
    // The work must return at once: the transaction is on the process's one connection (see `runLocal`).
    localWork: 'sync',
    database,
    table,
    get roundTrips() {
      return roundTrips;
    },
    async migrate(): Promise<void> {
      const ddl = sqliteSchema(table);
      trip('migrate', () =>
        execute(
          ddl,
          undefined,
          () => database.exec(ddl),
          () => null,
        ),
      );
    },
    // A refusal (a replay, a mismatch, a live lease) is answered from a plain read, without the write lock: a row
    // that refuses the claim stops refusing only by expiring or lapsing (judged at `now`) or by its owner's fenced
    // write, so the answer holds at the moment of the read. Anything else — no row, or a claimable one — goes to
    // the transaction above, which decides again on the row under the write lock.
    async claim(request: ClaimRequest): Promise<ClaimResult> {
      if (!claimBarrier) return trip('claim', () => refusal(request) ?? claimTx.immediate(request));
      const refused = trip('claim', () => refusal(request));
      if (refused) return refused;
      await claimBarrier(request);
      return trip('claim', () => claimTx.immediate(request));
    },
    // The same plain read answers a refusal without the write lock (see `claim`); otherwise the transaction above.
    async runLocal(request: LocalTransactionRequest<Db>): Promise<LocalTransactionResult> {
      if (!claimBarrier) return trip('local', () => refusal(request) ?? local(request));
      const refused = trip('local', () => refusal(request));
      if (refused) return refused;
      await claimBarrier(request);
      return trip('local', () => local(request));
    },
    async complete({ pk, token, outcome, effects }: CompleteRequest<Db>): Promise<WriteResult> {
      return { ok: trip('complete', () => completeTx.immediate(pk, token, outcome, effects)) };
    },
    async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
      return { ok: trip('renew', () => run(sql.renew, { pk, token, leaseExpiresAt: now + leaseMs, expiresAt })) === 1 };
    },
    async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
      return { ok: trip('release', () => run(sql.release, { pk, token })) === 1 };
    },
    async get(pk: string): Promise<IdempotencyRecord | null> {
      const row = trip('get', () => one(sql.get, { pk }));
      return row ? toRecord(row) : null;
    },
    // Batched so no single statement holds the write lock for long, with a turn of the event loop between
    // batches so traffic in this process is served meanwhile. Each batch is one round trip.
    async sweep({ now, batchSize = 1_000, limit = Infinity }: SweepRequest): Promise<number> {
      if (!Number.isSafeInteger(batchSize) || batchSize <= 0)
        throw configError('batchSize', 'a positive integer', batchSize);
      if (!(Number.isSafeInteger(limit) || limit === Infinity) || limit < 0) {
        throw configError('limit', 'a non-negative integer', limit);
      }
      let deleted = 0;
      for (;;) {
        const take = Math.min(batchSize, limit - deleted);
        if (take <= 0) return deleted;
        const changes = trip('sweep', () => run(sql.sweep, { now, take }));
        deleted += changes;
        if (changes < take) return deleted;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    },
    async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
      return trip('list', () => all(sql.list, { scope, limit })).map(toRecord);
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      if (closeDatabase) database.close();
    },
  };
}

/** A row as SQLite returns it (integers may be bigints if the database was set to safe integers). */
interface Row {
  readonly pk: string;
  readonly scope: string;
  readonly key: string;
  readonly status: RecordStatus;
  readonly fingerprint: string;
  readonly id: string;
  readonly token: string;
  readonly claimed_at: number | bigint;
  readonly lease_expires_at: number | bigint;
  readonly expires_at: number | bigint;
  readonly retryable: number | bigint;
  readonly result_id: string | null;
  readonly response_status: number | bigint | null;
  readonly response_headers: string | null;
  readonly response_body: Uint8Array | null;
}

function toRecord(row: Row): IdempotencyRecord {
  return {
    pk: row.pk,
    scope: row.scope,
    key: row.key,
    status: row.status,
    fingerprint: row.fingerprint,
    id: row.id,
    token: row.token,
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: Number(row.retryable) === 1,
    resultId: row.result_id,
    response:
      row.response_status === null
        ? null
        : {
            status: Number(row.response_status),
            headers: decodeHeaders(row.response_headers ?? '[]'),
            // A copy, as a plain Uint8Array (the driver returns a Buffer).
            body: new Uint8Array(row.response_body ?? []),
          },
  };
}

function checkTable(table: unknown): asserts table is string {
  if (typeof table !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table) || /^sqlite_/i.test(table)) {
    throw configError(
      'table',
      'an SQL identifier (letters, digits and _, not starting with a digit or sqlite_)',
      table,
    );
  }
}

/**
 * Thrown inside the local transaction to roll it back when the work returned null (better-sqlite3 commits unless
 * the function throws); caught by identity, never seen outside the store.
 */
const ROLL_BACK = new Error('idem: roll back the local transaction');
