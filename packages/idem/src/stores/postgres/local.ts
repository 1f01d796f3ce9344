/**
 * Database-local work (`runLocal`): the claim, the work's own statements and the completion in one transaction on
 * one connection, with the timeline of the race it closes in the comment on `runLocal`.
 */
import {
  isClaimable,
  LocalWorkAbortedError,
  type LocalTransactionRequest,
  type LocalTransactionResult,
  type Outcome,
} from '../contract.js';
import { claimValues, MAX_CLAIM_ATTEMPTS, sqlState } from './claim.js';
import { outcomeValues, toRecord, type Row } from './codec.js';
import type { PostgresPool, PostgresPoolClient, PostgresQueryable, PostgresQueryResult } from './postgres-options.js';
import type { Query, Statements } from './statements.js';

/** What `runLocal` needs of the store. */
export interface LocalStore<Tx extends PostgresQueryable> {
  readonly pool: PostgresPool<Tx & PostgresPoolClient>;
  readonly sql: Statements;
  readonly query: Query;
  closed(): boolean;
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
export async function runLocal<Tx extends PostgresQueryable>(
  store: LocalStore<Tx>,
  request: LocalTransactionRequest<Tx>,
): Promise<LocalTransactionResult> {
  const { pk, fingerprint, token, now, work } = request;
  const values = claimValues(request);
  for (let attempt = 1; ; attempt++) {
    if (store.closed()) throw new Error('postgres store is closed');
    const client = await store.pool.connect();
    // Set when BEGIN/COMMIT/ROLLBACK itself fails: the connection's state is unknown, so the pool discards it.
    let broken: Error | undefined;
    const rollback = async (): Promise<void> => {
      try {
        await store.query('local', client, 'ROLLBACK');
      } catch (error) {
        broken = asError(error);
      }
    };
    let retry: unknown;
    try {
      const [begun, claimed] = await both(store.query, client, ['BEGIN'], [store.sql.claim, values]);
      if (begun.status === 'rejected') {
        broken = asError(begun.reason);
        // Only a pipelining client sends the claim after a failed BEGIN, and then it autocommitted: free the key.
        if (claimed?.status === 'fulfilled' && (claimed.value.rows[0] as Row | undefined)?.claimed === true) {
          await store.query('local', store.pool, store.sql.release, [pk, token]).catch(() => undefined);
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
        const [updated, committed] = await both(store.query, client, [store.sql.completeLocal, completion], ['COMMIT']);
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
async function both(
  query: Query,
  client: PostgresPoolClient,
  [firstText, firstValues]: readonly [string, unknown[]?],
  [secondText, secondValues]: readonly [string, unknown[]?],
): Promise<[PromiseSettledResult<PostgresQueryResult>, PromiseSettledResult<PostgresQueryResult> | undefined]> {
  const send = (text: string, values?: unknown[]) => query('local', client, text, values);
  if (client.pipeline === true) {
    const [first, second] = await Promise.allSettled([send(firstText, firstValues), send(secondText, secondValues)]);
    return [first, second];
  }
  const [first] = await Promise.allSettled([send(firstText, firstValues)]);
  if (first.status === 'rejected') return [first, undefined];
  const [second] = await Promise.allSettled([send(secondText, secondValues)]);
  return [first, second];
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

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
