/**
 * @module The takeover policy (docs/DESIGN.md: Takeover policy): what a claim does when it took over a lapsed lease,
 * i.e. when the previous holder died (or went silent) with the work's outcome unknown.
 */
import type { Clock } from './clock.js';
import { configError, IdempotencyError } from './errors.js';
import type { Lease } from './lease.js';
import type { IdempotencyRecord, StoredResponse } from './record.js';

/**
 * `'rerun'` (the default): run the work again under the same `id` — safe when everything downstream dedupes on it.
 * `'reconcile'`: ask the application's `reconcile` hook what happened to the `id` first. `'quarantine'`: never run
 * it again; the key answers 409 `operation_state: "unknown"` until an operator resolves it (`idem records resolve`).
 */
export type TakeoverPolicy = 'rerun' | 'reconcile' | 'quarantine';

/** What the `reconcile` hook is asked about: the record whose previous holder's lease lapsed. */
export interface ReconcileContext {
  /** The record's stable id: what the dead attempt passed downstream. Ask the processor or the ledger about it. */
  readonly id: string;
  readonly scope: string;
  readonly key: string;
  /** 1 on this process's first reconcile of this id, +1 after each one that threw or timed out (per process). */
  readonly attempt: number;
  /** Aborted when the hook's time (`reconcileTimeoutMs`) is up or the lease is lost: stop asking. */
  readonly signal: AbortSignal;
}

/**
 * The hook's answer: the work happened (`succeeded`, with the response to record and replay: 200–399), it failed for good
 * (`failed`, recorded as a final failure and replayed: 400–599), or it did not happen (`not_done`: the work runs now).
 * `resultId` names what the work made (the charge found), recorded as a handler's `resultId` would be.
 */
export type ReconcileAnswer =
  | { readonly state: 'succeeded'; readonly response: StoredResponse; readonly resultId?: string | null }
  | { readonly state: 'failed'; readonly response: StoredResponse; readonly resultId?: string | null }
  | { readonly state: 'not_done' };

export type ReconcileHook = (context: ReconcileContext) => ReconcileAnswer | Promise<ReconcileAnswer>;

/** The engine options of the takeover policy (per route in the HTTP layer, per `idempotent()` call). */
export interface TakeoverOptions {
  /** What a takeover of a lapsed lease does. Default `'rerun'`. */
  readonly takeover?: TakeoverPolicy;
  /** Required with `takeover: 'reconcile'`: what happened to the `id`? A throw or a timeout answers 503. */
  readonly reconcile?: ReconcileHook;
  /**
   * How long the hook may take before it counts as failed (503, the work does not run): less than `maxHoldMs`.
   * Default 5 s, or half `maxHoldMs` when that is less.
   */
  readonly reconcileTimeoutMs?: number;
}

/** What a takeover turned into: the lease to run the work under, a replay of the reconciled answer, or a refusal. */
export type TakeoverDecision<Tx> =
  | { readonly kind: 'lease'; readonly lease: Lease<Tx> }
  | { readonly kind: 'replay'; readonly response: StoredResponse; readonly record: IdempotencyRecord }
  | { readonly kind: 'refused'; readonly error: IdempotencyError };

/** The refusal of a quarantined key: HTTP 409, `operation_state: "unknown"`. */
export function outcomeUnknown(): IdempotencyError {
  return new IdempotencyError(
    'OUTCOME_UNKNOWN',
    'An earlier attempt with this Idempotency-Key stopped before recording its outcome, which is unknown. ' +
      'It will not be run again; an operator resolves it (idem records resolve).',
  );
}

/**
 * What a retry meeting a held key (IN_FLIGHT, 409) is told. Under `'quarantine'` a held key is as often a
 * quarantined one (its last takeover's lease, left to lapse) as a running one, and under `'reconcile'` one whose
 * hook failed (its lease left to lapse); the record cannot tell them apart, so the refusal says both.
 */
export function heldKeyDetail(takeover: TakeoverPolicy | undefined): string {
  if (takeover === 'quarantine')
    return 'A request with this Idempotency-Key is still being processed, or it stopped with its outcome unknown and waits for an operator (idem records resolve).';
  if (takeover === 'reconcile')
    return 'A request with this Idempotency-Key is still being processed, or its earlier outcome could not be reconciled yet and the key is held until its lease lapses.';
  return 'A request with this Idempotency-Key is still being processed.';
}

const POLICIES: ReadonlySet<unknown> = new Set(['rerun', 'reconcile', 'quarantine']);
/** Per-process reconcile attempts kept, at most (the oldest is forgotten first). */
const MAX_ATTEMPTS_KEPT = 1_000;

/**
 * Validates the options and returns what to do with a lease that took over a lapsed one, or undefined under
 * `'rerun'` (the lease is used as it is, at no cost). The engine asks it when the claim says `takeover`, or, from
 * a store that does not say, whenever the claim kept the stored `id` (a retryable failure counts too, then).
 */
export function takeoverPolicy(
  { takeover = 'rerun', reconcile, reconcileTimeoutMs: timeoutMs }: TakeoverOptions,
  clock: Clock,
  { maxHoldMs, leaseMs }: { readonly maxHoldMs: number; readonly leaseMs: number },
): (<Tx>(lease: Lease<Tx>) => Promise<TakeoverDecision<Tx>>) | undefined {
  const reconcileTimeoutMs = timeoutMs === undefined ? Math.min(5_000, Math.ceil(maxHoldMs / 2)) : timeoutMs;
  if (!POLICIES.has(takeover)) throw configError('takeover', "'rerun', 'reconcile' or 'quarantine'", takeover);
  if (takeover === 'reconcile' && typeof reconcile !== 'function')
    throw configError(
      'reconcile',
      "a function ({ id, scope, key, attempt, signal }) => answer with takeover: 'reconcile'",
      reconcile,
    );
  if (reconcile !== undefined && typeof reconcile !== 'function')
    throw configError('reconcile', 'a function', reconcile);
  if (!Number.isInteger(reconcileTimeoutMs) || reconcileTimeoutMs <= 0 || reconcileTimeoutMs > 2_147_483_647)
    throw configError('reconcileTimeoutMs', 'a whole number of ms from 1 to 2147483647', reconcileTimeoutMs);
  // A hook still asking at maxHoldMs would see its lease given up under it: refused here, not found out then.
  if (takeover === 'reconcile' && reconcileTimeoutMs >= maxHoldMs)
    throw configError('reconcileTimeoutMs', `less than maxHoldMs (${maxHoldMs})`, reconcileTimeoutMs);
  if (takeover === 'rerun') return undefined;
  if (takeover === 'quarantine') {
    // Nothing runs and nothing is written: the record stays in_progress and its new lease lapses unrenewed, so
    // the next takeover (on any instance with this policy) answers the same, until an operator resolves the key.
    return async (lease) => {
      await lease.abandon();
      return { kind: 'refused', error: outcomeUnknown() };
    };
  }
  const hook = reconcile as ReconcileHook;
  const attempts = new Map<string, number>();
  return async <Tx>(lease: Lease<Tx>): Promise<TakeoverDecision<Tx>> => {
    const { id, scope, key } = lease;
    const about = `${scope}\n${key}\n${id}`;
    const attempt = (attempts.get(about) ?? 0) + 1;
    attempts.delete(about);
    attempts.set(about, attempt);
    if (attempts.size > MAX_ATTEMPTS_KEPT) attempts.delete(attempts.keys().next().value as string);
    const controller = new AbortController();
    const lost = (): void => controller.abort(lease.signal.reason);
    lease.signal.addEventListener('abort', lost, { once: true });
    const timer = clock.setTimeout(
      () => controller.abort(new Error(`reconcile did not answer within ${reconcileTimeoutMs} ms`)),
      reconcileTimeoutMs,
    );
    try {
      const answer = await answerOf(hook, { id, scope, key, attempt, signal: controller.signal }, controller.signal);
      if (answer.state === 'not_done') {
        attempts.delete(about);
        return { kind: 'lease', lease };
      }
      const outcome = answer.state === 'succeeded' ? 'succeeded' : 'failed-final';
      // A response no record can hold rejects here (CONFIG_INVALID) and writes nothing: a failed hook.
      const settled = await lease.complete({ response: answer.response, outcome, resultId: answer.resultId ?? null });
      attempts.delete(about);
      if (!settled.ok) return { kind: 'refused', error: settled.error };
      return { kind: 'replay', response: answer.response, record: settled.record as IdempotencyRecord };
    } catch (error) {
      // The work must not run and nothing is known: the lease lapses again, and the next takeover asks again.
      await lease.abandon();
      return {
        kind: 'refused',
        error: new IdempotencyError(
          'RECONCILE_FAILED',
          'The outcome of an earlier attempt with this Idempotency-Key could not be reconciled; nothing was run. Retry later with the same key.',
          // Its lease, abandoned, lapses within leaseMs: a retry sooner meets it (409 in use).
          { cause: error, retryAfterMs: leaseMs },
        ),
      };
    } finally {
      clock.clearTimeout(timer);
      lease.signal.removeEventListener('abort', lost);
    }
  };
}

/**
 * The hook's answer, checked, or a rejection when it throws, answers nonsense (a `succeeded` status outside 200–399,
 * a `failed` one outside 400–599), or `signal` aborts first.
 */
function answerOf(hook: ReconcileHook, context: ReconcileContext, signal: AbortSignal): Promise<ReconcileAnswer> {
  return new Promise<ReconcileAnswer>((resolve, reject) => {
    const aborted = (): void => reject(signal.reason as Error);
    if (signal.aborted) return aborted();
    signal.addEventListener('abort', aborted, { once: true });
    new Promise<ReconcileAnswer>((answer) => answer(hook(context))).then((answer) => {
      signal.removeEventListener('abort', aborted);
      const state = (answer as { state?: unknown } | null)?.state;
      if (state !== 'succeeded' && state !== 'failed' && state !== 'not_done')
        return reject(new TypeError(`reconcile answered ${JSON.stringify(state)}, not succeeded, failed or not_done`));
      // As `idem records resolve`: a record whose state and replayed status disagree would mislead every retry.
      const status = (answer as { response?: { status?: unknown } }).response?.status;
      const [low, high] = state === 'succeeded' ? [200, 399] : [400, 599];
      if (state !== 'not_done' && !(typeof status === 'number' && status >= low && status <= high))
        return reject(new TypeError(`reconcile answered ${state} with status ${String(status)}, not ${low}–${high}`));
      resolve(answer);
    }, reject);
  });
}
