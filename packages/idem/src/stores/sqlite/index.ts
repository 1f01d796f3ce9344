/**
 * @module `idem/stores/sqlite` — the embedded default store, on a better-sqlite3 (v12) `Database` that you open
 * and pass in. Your own tables can live in the same database, and the work's writes can commit in the same
 * transaction as the record's completion (docs/DESIGN.md: The work's own writes).
 */
import { configError } from '../../core/errors.js';
import { isThenable } from '../../core/local.js';
import type { LocalTransactionRequest, LocalTransactionResult } from '../contract.js';
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  ListRequest,
  Outcome,
  ReleaseRequest,
  RenewRequest,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { claimAlone, claimer, refusal } from './claim.js';
import { outcomeParams, toRecord } from './codec.js';
import { localRunner, refuseInTransaction } from './local.js';
import type { SqliteDatabase, SqliteStore, SqliteStoreOptions } from './options.js';
import { checkTable, DEFAULT_TABLE, sqliteSchema } from './schema.js';
import { sqliteCalls } from './send.js';
import { statements } from './statements.js';

export { sqliteSchema };
export type * from './options.js';

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
export function sqliteStore<Db extends SqliteDatabase = SqliteDatabase>({
  database,
  table = DEFAULT_TABLE,
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
  const calls = sqliteCalls(database, onRoundTrip);
  calls.trip('open', () => calls.pragma(`busy_timeout = ${busyTimeoutMs}`));
  calls.trip('open', () => calls.pragma('journal_mode = WAL'));

  const sql = statements(table);
  const claimIn = claimer(calls, sql);

  /** The fenced completion: true when it changed the row (the token still held it `in_progress`). */
  const write = (pk: string, token: string, outcome: Outcome): boolean =>
    calls.run(sql.complete, outcomeParams(pk, token, outcome)) === 1;

  // The update is conditional on the token and `in_progress`; the effects run only if it changed the row, and
  // both commit together or not at all.
  const completeTx = database.transaction(
    (pk: string, token: string, outcome: Outcome, effects: ((tx: Db) => unknown) | undefined): boolean => {
      if (!write(pk, token, outcome)) return false;
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
  const local = localRunner(database, claimIn, write);

  return {
    name: 'sqlite',
    // The work must return at once: the transaction is on the process's one connection (see `runLocal`).
    localWork: 'sync',
    database,
    table,
    get roundTrips() {
      return calls.roundTrips;
    },
    async migrate(): Promise<void> {
      const ddl = sqliteSchema(table);
      calls.trip('migrate', () =>
        calls.execute(
          ddl,
          undefined,
          () => database.exec(ddl),
          () => null,
        ),
      );
    },
    // A refusal is answered from a plain read, without the write lock; otherwise the upsert under it: claim.ts.
    async claim(request: ClaimRequest): Promise<ClaimResult> {
      refuseInTransaction(database, 'claim');
      if (!claimBarrier)
        return calls.trip('claim', () => refusal(calls, sql, request) ?? claimAlone(calls, sql, request));
      const refused = calls.trip('claim', () => refusal(calls, sql, request));
      if (refused) return refused;
      await claimBarrier(request);
      return calls.trip('claim', () => claimAlone(calls, sql, request));
    },
    // The same plain read answers a refusal without the write lock (see `claim`); otherwise local.ts's transaction.
    async runLocal(request: LocalTransactionRequest<Db>): Promise<LocalTransactionResult> {
      if (!claimBarrier) return calls.trip('local', () => refusal(calls, sql, request) ?? local(request));
      const refused = calls.trip('local', () => refusal(calls, sql, request));
      if (refused) return refused;
      await claimBarrier(request);
      return calls.trip('local', () => local(request));
    },
    // Without effects, the fenced UPDATE alone (one statement, atomic); with them, a transaction around both.
    async complete({ pk, token, outcome, effects }: CompleteRequest<Db>): Promise<WriteResult> {
      refuseInTransaction(database, 'complete');
      if (!effects) return { ok: calls.trip('complete', () => write(pk, token, outcome)) };
      return { ok: calls.trip('complete', () => completeTx.immediate(pk, token, outcome, effects)) };
    },
    async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
      const params = { pk, token, leaseExpiresAt: now + leaseMs, expiresAt };
      return { ok: calls.trip('renew', () => calls.run(sql.renew, params)) === 1 };
    },
    async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
      return { ok: calls.trip('release', () => calls.run(sql.release, { pk, token })) === 1 };
    },
    async get(pk: string): Promise<IdempotencyRecord | null> {
      const row = calls.trip('get', () => calls.one(sql.get, { pk }));
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
        const changes = calls.trip('sweep', () => calls.run(sql.sweep, { now, take }));
        deleted += changes;
        if (changes < take) return deleted;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    },
    async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
      return calls.trip('list', () => calls.all(sql.list, { scope, limit })).map(toRecord);
    },
    async close(): Promise<void> {
      if (calls.closed) return;
      calls.close();
      if (closeDatabase) database.close();
    },
  };
}
