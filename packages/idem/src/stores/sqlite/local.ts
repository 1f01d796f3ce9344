/**
 * Database-local work (`runLocal`): the claim, the work and the completion in one `BEGIN IMMEDIATE` transaction,
 * with the timeline of the race it closes in the comment on `localRunner`.
 */
import { configError, IdempotencyError } from '../../core/errors.js';
import { isThenable } from '../../core/local.js';
import type {
  ClaimRequest,
  ClaimResult,
  LocalTransactionRequest,
  LocalTransactionResult,
  Outcome,
} from '../contract.js';
import type { SqliteDatabase } from './sqlite-options.js';

/**
 * Thrown inside the local transaction to roll it back when the work returned null (better-sqlite3 commits unless
 * the function throws); caught by identity, never seen outside the store.
 */
const ROLL_BACK = new Error('idem: roll back the local transaction');

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
//
// `claimIn` is the claim's body (claim.ts) and `complete` the fenced completion, both run inside the transaction.
export function localRunner<Db extends SqliteDatabase>(
  database: Db,
  claimIn: (request: ClaimRequest) => ClaimResult,
  complete: (pk: string, token: string, outcome: Outcome) => boolean,
): (request: LocalTransactionRequest<Db>) => LocalTransactionResult {
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
    if (!complete(record.pk, record.token, outcome)) {
      // Unreachable unless the work deleted or rewrote the row it was handed: refuse to commit anything.
      throw new Error(`sqlite store: runLocal of ${record.pk} found its own claim gone before the completion`);
    }
    return { kind: 'committed', record: { ...record, ...outcome } };
  });
  return (request: LocalTransactionRequest<Db>): LocalTransactionResult => {
    // Inside a transaction already open on this connection, `.immediate` would be a SAVEPOINT: its "commit" is
    // undone by the outer ROLLBACK, and a result reported committed (and cached) would replay a charge never made.
    refuseInTransaction(database, 'runLocal');
    try {
      return localTx.immediate(request);
    } catch (error) {
      if (error === ROLL_BACK) return { kind: 'rolled-back' };
      throw error;
    }
  };
}

/**
 * Refuses (CONFIG_INVALID) while `database` has a transaction open (better-sqlite3's `inTransaction`): a store
 * write there joins it, and commits or vanishes with it, unknown to the store.
 */
export function refuseInTransaction(database: object, operation: string): void {
  if ((database as { inTransaction?: unknown }).inTransaction === true)
    throw new IdempotencyError(
      'CONFIG_INVALID',
      `${operation} cannot run inside an open transaction on this connection`,
    );
}
