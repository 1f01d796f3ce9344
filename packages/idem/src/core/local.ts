/**
 * @module Database-local work: the claim, the work's own writes and the completion in ONE transaction, for work
 * whose every write goes to the records' own SQL database and that makes no outside call (SQLite, PostgreSQL).
 */
import {
  answered,
  classifyStatus,
  enginePhases,
  subject,
  type Answer,
  type Engine,
  type Lease,
  type OutcomeKind,
  type RunRequest,
  type RunResult,
  type Settlement,
  type WorkContext,
  type WorkResult,
} from './engine.js';
import { configError, IdempotencyError, isIdempotencyError } from './errors.js';
import { recordPk } from './key.js';
import { LocalWorkAbortedError, type IdempotencyRecord, type Outcome, type StoredResponse } from './record.js';

/** What local work sees: a lease's context without `signal` (the transaction holds the key; nothing takes it over). */
export type LocalContext = Omit<WorkContext, 'signal'>;

/** What local work returns: its writes are already made, on `tx`. `failed-retryable` and `release` roll all back. */
export type LocalWorkResult = Omit<WorkResult, 'effects'>;

/**
 * The work, run inside the claim's transaction. Write only through `tx` (the store's transaction: a pg client,
 * the better-sqlite3 database) and call nothing outside the database. SQLite requires it to be synchronous.
 */
export type LocalWork<Tx> = (tx: Tx, context: LocalContext) => LocalWorkResult | PromiseLike<LocalWorkResult>;

/**
 * Runs database-local work once per (scope, key): the store claims the key, runs `work` and writes its outcome in
 * one transaction, and commits once. A concurrent duplicate waits on the key (PostgreSQL: the uncommitted row;
 * SQLite: the write lock) and then replays the committed answer byte for byte. The engine's own phases run around
 * the transaction: its checks before a claim and its cache, its answers from a record in the way, its events
 * (`onEvent`) and ids (`generateId`); there is no lease to renew (docs/LOCAL.md).
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
export async function runLocal<Tx>(engine: Engine<Tx>, request: RunRequest, work: LocalWork<Tx>): Promise<RunResult> {
  const { store, leaseMs } = engine;
  const phases = enginePhases(engine);
  if (phases === undefined) throw configError('engine', 'an engine made by createEngine');
  if (typeof store.runLocal !== 'function') {
    throw configError('store', 'a store with runLocal (SQLite or PostgreSQL) for database-local work', store.name);
  }
  if (typeof work !== 'function') throw configError('work', 'a function (tx, context) => result', work);
  const { clock, emit, generateId } = phases;
  const { scope, key, fingerprint } = request;
  const pk = recordPk(scope, key);
  const ttlMs = request.ttlMs ?? phases.ttlMs;
  const early = phases.precheck(request, pk, ttlMs);
  if (early) return answered(early);

  const token = generateId();
  const freshId = generateId();
  const startedAt = clock.now();
  /** Set when the work threw: its error, rethrown as is (the store rolled back and rethrew it too). */
  let failure: { readonly error: unknown } | undefined;
  /** The record's id once claimed: the fresh one, or the one kept by a reclaim. */
  let claimedId = freshId;
  /** Set when the work returned: how it ended, and its response. */
  let answer: { readonly kind: OutcomeKind; readonly response: StoredResponse } | undefined;
  const executed = (kind: OutcomeKind, status: number | null): void =>
    emit({ type: 'executed', ...subject(request, claimedId), outcome: kind, status, ms: clock.now() - startedAt });

  const decide = (result: LocalWorkResult): Outcome | null => {
    const kind = result.outcome ?? classifyStatus(result.response.status);
    answer = { kind, response: result.response };
    // A retryable outcome means the next attempt runs the work again: nothing of this one may stay.
    if (kind === 'failed-retryable' || kind === 'release') return null;
    const status = kind === 'succeeded' ? 'succeeded' : 'failed';
    return { status, retryable: false, resultId: result.resultId ?? null, response: result.response };
  };
  const failed = (error: unknown): never => {
    failure = { error };
    throw error;
  };
  // Synchronous when the work is (SQLite runs it inside a synchronous transaction).
  const inTransaction = (tx: Tx, record: IdempotencyRecord): Outcome | null | PromiseLike<Outcome | null> => {
    claimedId = record.id;
    const reclaimed = record.id !== freshId;
    if (reclaimed) emit({ type: 'takeover', ...subject(request, record.id) });
    try {
      const result = work(tx, { scope, key, id: record.id, reclaimed });
      return isThenable(result) ? Promise.resolve(result).then(decide).catch(failed) : decide(result);
    } catch (error) {
      return failed(error);
    }
  };

  let settled;
  try {
    const claim = { pk, scope, key, fingerprint, token, id: freshId, now: startedAt, leaseMs, ttlMs };
    settled = await store.runLocal({ ...claim, work: inTransaction });
  } catch (error) {
    // SQLite's refusal of asynchronous work, even if that work has failed since.
    if (isIdempotencyError(error, 'CONFIG_INVALID') && error !== failure?.error) throw error;
    // The work broke its own transaction (a failed statement it caught): the work's failure, not an outage.
    if (!failure && error instanceof LocalWorkAbortedError) failure = { error };
    if (!failure) {
      const cause = { cause: error };
      throw phases.unavailable(
        request,
        new IdempotencyError('STORE_UNAVAILABLE', 'The idempotency store failed during runLocal.', cause),
      ).error;
    }
    // The work threw: rolled back with everything it wrote, and the key is free.
    executed('failed-retryable', null);
    throw failure.error;
  }
  if (settled.kind === 'existing') return answered(phases.answer(settled.record, request));
  const { kind, response } = answer as NonNullable<typeof answer>;
  executed(kind, response.status);
  if (settled.kind === 'rolled-back') return { replayed: false, response, record: null };
  phases.remember(settled.record);
  return { replayed: false, response, record: settled.record };
}

/**
 * A key claimed inside the store's open transaction, for work that answers later (the HTTP `local` route, whose
 * handler runs after the gate admits it): what a {@link Lease} is to `begin`. `complete` runs the result's
 * `effects` on `tx`, hands the answer to the transaction and resolves once it committed or rolled back (`ok:
 * false` with the work's error or the store's); `fail` rolls everything back. Its `signal` never aborts (and it is
 * never given up: no `onGivenUp`).
 */
export type LocalLease<Tx> = Omit<Lease<Tx>, 'release' | 'abandon' | 'onGivenUp'> & { readonly tx: Tx };

/** What {@link beginLocal} decided: `engine.begin`'s answers, or a local lease. */
export type LocalDecision<Tx> = Answer | { readonly kind: 'lease'; readonly lease: LocalLease<Tx> };

const NEVER_ABORTED: AbortSignal = new AbortController().signal;
/** A local lease's `fail`: everything rolled back, nothing recorded, whatever the rollback answered. */
const none = (): Settlement => ({ ok: true, record: null });

/**
 * `engine.begin` for database-local work whose answer comes later: a replay or a refusal, or a {@link LocalLease}
 * once the store has opened its transaction and claimed the key in it. Only on stores whose transaction can wait
 * (`localWork: 'async'`, PostgreSQL); the gate checks that when a route is built. The transaction is the store's
 * callback (`runLocal`), so the lease is that callback held open: the one place two resolvers bridge it.
 */
export function beginLocal<Tx>(engine: Engine<Tx>, request: RunRequest): Promise<LocalDecision<Tx>> {
  let open: (decision: LocalDecision<Tx>) => void = () => {};
  const opened = new Promise<LocalDecision<Tx>>((resolve) => (open = resolve));
  const done = runLocal(engine, request, (tx, context) => {
    return new Promise<LocalWorkResult>((answer, abort) => {
      let settlement: Promise<Settlement> | undefined;
      const ended = (): Promise<Settlement> =>
        done.then(
          (result) => ({ ok: true, record: result.record }),
          (error: unknown) => ({ ok: false, error: error as IdempotencyError }),
        );
      const lease: LocalLease<Tx> = {
        ...context,
        tx,
        signal: NEVER_ABORTED,
        get settled() {
          return settlement !== undefined;
        },
        complete: (result) =>
          (settlement ??= (async () => void (await result.effects?.(tx)))()
            .then(() => answer(result), abort)
            .then(ended)),
        fail: () => (settlement ??= (abort(new Error('idem: the work produced no answer')), done.then(none, none))),
      };
      open({ kind: 'lease', lease });
    });
  });
  // Settled before the work started: a record in the way answered (a replay) or refused, or the store failed.
  const first = done.then(
    (result): LocalDecision<Tx> => ({
      kind: 'replay',
      response: result.response,
      record: result.record as IdempotencyRecord,
    }),
    (error: unknown): LocalDecision<Tx> => ({ kind: 'refused', error: error as IdempotencyError }),
  );
  return Promise.race([opened, first]);
}

/** Whether `value` is a promise or promise-like: work that returned one is asynchronous. */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
