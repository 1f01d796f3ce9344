/**
 * @module Database-local work: the claim, the work's own writes and the completion in ONE transaction, for work
 * whose every write goes to the records' own SQL database and that makes no outside call (SQLite, PostgreSQL).
 */
import {
  classifyStatus,
  type Engine,
  type EngineOptions,
  type IdempotencyEvent,
  type KeyEventFields,
  type OutcomeKind,
  type RunRequest,
  type RunResult,
} from './engine.js';
import { configError, IdempotencyError, isIdempotencyError } from './errors.js';
import { fingerprintsEqual } from './fingerprint.js';
import { recordPk } from './key.js';
import { LocalWorkAbortedError, type IdempotencyRecord, type Outcome, type StoredResponse } from './record.js';

/** What local work sees. No lease and no `signal`: the transaction holds the key until it ends, and nothing takes it over. */
export interface LocalContext {
  readonly scope: string;
  readonly key: string;
  /** The record's stable id (kept when this attempt reclaimed a retryable failure or a dead lease-mode attempt). */
  readonly id: string;
  /** True when this attempt reclaimed the key from a retryable failure or a lapsed lease. */
  readonly reclaimed: boolean;
}

/** What local work returns. Its writes are already made, on `tx`: there are no `effects` to hand over. */
export interface LocalWorkResult {
  readonly response: StoredResponse;
  /** Overrides the classification by status code. `failed-retryable` and `release` roll everything back. */
  readonly outcome?: OutcomeKind;
  readonly resultId?: string | null;
}

/**
 * The work, run inside the claim's transaction. Write only through `tx` (the store's transaction: a pg client,
 * the better-sqlite3 database) and call nothing outside the database. SQLite requires it to be synchronous.
 */
export type LocalWork<Tx> = (tx: Tx, context: LocalContext) => LocalWorkResult | PromiseLike<LocalWorkResult>;

/** What the engine does not expose, given again: the same `generateId` and `onEvent` as the engine's, if any. */
export type LocalOptions = Pick<EngineOptions<never>, 'generateId' | 'onEvent'>;

/**
 * Runs database-local work once per (scope, key): the store claims the key, runs `work` and writes its outcome in
 * one transaction, and commits once. A concurrent duplicate waits on the key (PostgreSQL: the uncommitted row;
 * SQLite: the write lock) and then replays the committed answer byte for byte.
 *
 * - final outcome (2xx, 3xx, a final 4xx): the claim, the work's writes and the record commit together;
 * - retryable outcome (5xx, 408, 429), `release`, or a thrown error: everything rolls back, the claim too — the
 *   key is free, nothing is remembered and nothing happened. The response is returned (`record: null`); the
 *   error is rethrown as is;
 * - a record in the way: replay (`replayed: true`), `FINGERPRINT_MISMATCH`, or `IN_FLIGHT` (a lease-mode
 *   attempt holds the key) — thrown as {@link IdempotencyError}, as `engine.run` does;
 * - the store fails: `STORE_UNAVAILABLE`, and nothing was committed unless the failure was the commit's reply.
 *
 * Only for work with no outside call: a processor charge inside would be charged again after a rollback, and
 * would hold the transaction (a lock and a connection) while it waits. The store must offer `runLocal` (SQLite,
 * PostgreSQL); otherwise this throws `CONFIG_INVALID`.
 *
 * @example
 * const engine = createEngine({ store: postgresStore<pg.PoolClient>({ pool }) })
 * const { response, replayed } = await runLocal(engine, { scope, key, fingerprint }, async (tx, { id }) => {
 *   await tx.query('INSERT INTO transfers (ref, amount) VALUES ($1, $2)', [id, 500])
 *   return { response: jsonResponse(201, { id }), resultId: id }
 * })
 */
export async function runLocal<Tx>(
  engine: Engine<Tx>,
  request: RunRequest,
  work: LocalWork<Tx>,
  { generateId = () => crypto.randomUUID(), onEvent }: LocalOptions = {},
): Promise<RunResult> {
  const { store, clock, leaseMs } = engine;
  if (typeof store.runLocal !== 'function') {
    throw configError('store', 'a store with runLocal (SQLite or PostgreSQL) for database-local work', store.name);
  }
  if (typeof work !== 'function') throw configError('work', 'a function (tx, context) => result', work);
  const { scope, key, fingerprint, route } = request;
  const ttlMs = request.ttlMs ?? engine.ttlMs;
  if (!Number.isFinite(ttlMs) || ttlMs <= leaseMs) {
    throw configError('ttlMs', `a number of ms greater than leaseMs (${leaseMs})`, ttlMs);
  }
  const emit = (event: IdempotencyEvent): void => {
    try {
      onEvent?.(event);
    } catch {
      // A metrics hook must never change what happens to a payment.
    }
  };
  const about = (id: string): KeyEventFields => (route === undefined ? { scope, key, id } : { scope, key, id, route });

  const token = generateId();
  const freshId = generateId();
  const startedAt = clock.now();
  /** Set when the work threw: its error, rethrown as is (the store rolled back and rethrew it too). */
  let failure: { readonly error: unknown } | undefined;
  /** The record's id once claimed: the fresh one, or the one kept by a reclaim. */
  let claimedId = freshId;
  /** Set when the work returned: how it ended, and its response. */
  let answered: { readonly kind: OutcomeKind; readonly response: StoredResponse } | undefined;

  const decide = (result: LocalWorkResult): Outcome | null => {
    const kind = result.outcome ?? classifyStatus(result.response.status);
    answered = { kind, response: result.response };
    // A retryable outcome means the next attempt runs the work again: nothing of this one may stay.
    if (kind === 'failed-retryable' || kind === 'release') return null;
    const status = kind === 'succeeded' ? 'succeeded' : 'failed';
    return { status, retryable: false, resultId: result.resultId ?? null, response: result.response };
  };
  // Synchronous when the work is (SQLite runs it inside a synchronous transaction).
  const inTransaction = (tx: Tx, record: IdempotencyRecord): Outcome | null | PromiseLike<Outcome | null> => {
    claimedId = record.id;
    const reclaimed = record.id !== freshId;
    if (reclaimed) emit({ type: 'takeover', ...about(record.id) });
    const failed = (error: unknown): never => {
      failure = { error };
      throw error;
    };
    try {
      const result = work(tx, { scope, key, id: record.id, reclaimed });
      if (!isThenable(result)) return decide(result);
      return Promise.resolve(result).then((value) => {
        try {
          return decide(value);
        } catch (error) {
          return failed(error);
        }
      }, failed);
    } catch (error) {
      return failed(error);
    }
  };

  let settled;
  try {
    const pk = recordPk(scope, key);
    const claim = { pk, scope, key, fingerprint, token, id: freshId, now: startedAt, leaseMs, ttlMs };
    settled = await store.runLocal({ ...claim, work: inTransaction });
  } catch (error) {
    // SQLite's refusal of asynchronous work, even if that work has failed since.
    if (isIdempotencyError(error, 'CONFIG_INVALID') && error !== failure?.error) throw error;
    // The work broke its own transaction (a failed statement it caught): the work's failure, not an outage.
    if (!failure && error instanceof LocalWorkAbortedError) failure = { error };
    if (failure) {
      // The work threw: rolled back with everything it wrote, and the key is free.
      emit({
        type: 'executed',
        ...about(claimedId),
        outcome: 'failed-retryable',
        status: null,
        ms: clock.now() - startedAt,
      });
      throw failure.error;
    }
    emit({ type: 'refused', reason: 'STORE_UNAVAILABLE', scope, ...(route === undefined ? {} : { route }) });
    throw new IdempotencyError('STORE_UNAVAILABLE', 'The idempotency store failed during runLocal.', { cause: error });
  }

  if (settled.kind === 'existing') return answer(settled.record);
  const { kind, response } = answered as NonNullable<typeof answered>;
  const ms = clock.now() - startedAt;
  if (settled.kind === 'rolled-back') {
    emit({ type: 'executed', ...about(claimedId), outcome: kind, status: response.status, ms });
    return { replayed: false, response, record: null };
  }
  emit({ type: 'executed', ...about(settled.record.id), outcome: kind, status: response.status, ms });
  return { replayed: false, response, record: settled.record };

  /** A record refused the claim: the same answers as `engine.begin` gives. */
  function answer(existing: IdempotencyRecord): RunResult {
    if (!fingerprintsEqual(existing.fingerprint, fingerprint)) {
      emit({ type: 'mismatch', ...about(existing.id) });
      throw new IdempotencyError(
        'FINGERPRINT_MISMATCH',
        'This Idempotency-Key was already used with a different request (method, path, query or body).',
      );
    }
    const final = existing.status === 'succeeded' || (existing.status === 'failed' && !existing.retryable);
    if (final && existing.response !== null) {
      emit({ type: 'replayed', ...about(existing.id), status: existing.response.status });
      return { replayed: true, response: existing.response, record: existing };
    }
    // Only a lease-mode attempt leaves a visible `in_progress` record: local work commits final records only.
    emit({ type: 'in_flight', ...about(existing.id) });
    throw new IdempotencyError('IN_FLIGHT', 'A request with this Idempotency-Key is still being processed.', {
      retryAfterMs: Math.max(0, existing.leaseExpiresAt - clock.now()),
    });
  }
}

/** Whether `value` is a promise or promise-like: work that returned one is asynchronous. */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
