/** @module The state machine (docs/DESIGN.md: State machine): claim before the work, replay, refuse, fence later writes. */
import { systemClock, type Clock } from './clock.js';
import { configError, IdempotencyError } from './errors.js';
import { engineSettings, type EngineOptions, type EngineSettings } from './engine-options.js';
import { fingerprintsEqual } from './fingerprint.js';
import { recordPk } from './key.js';
import type { IdempotencyEvent, KeyEventFields, OutcomeKind, StoreOp } from './events.js';
import {
  holdLease,
  type Lease,
  type LeaseContext,
  type Settlement,
  type WorkContext,
  type WorkResult,
} from './lease.js';
import type { ClaimResult, IdempotencyRecord, IdempotencyStore, StoredResponse } from './record.js';
import { unwindClaim } from './unwind.js';

export type { Lease, Settlement, WorkContext, WorkResult } from './lease.js';
export type { IdempotencyEvent, KeyEventFields, OutcomeKind, StoreOp } from './events.js';
export { RECOMMENDED_TTL_MS, type EngineOptions } from './engine-options.js';

/** Identifies one logical operation. */
export interface RunRequest {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  /** This request's record lifetime, more than `leaseMs`. Default the engine's `ttlMs`. */
  readonly ttlMs?: number;
  /** Where the request went (e.g. the path), for events only. */
  readonly route?: string;
}

export interface RunResult {
  /** True when the response is a stored one: the work did not run for this request. */
  readonly replayed: boolean;
  readonly response: StoredResponse;
  readonly record: IdempotencyRecord | null;
}

/**
 * What {@link Engine.begin} decided: answer with the stored response, refuse (mismatch, in flight, store down),
 * or run the work under a {@link Lease}. Never a thrown error: every path is a value the caller must handle.
 */
export type Decision<Tx = never> =
  | { readonly kind: 'replay'; readonly response: StoredResponse; readonly record: IdempotencyRecord }
  | { readonly kind: 'refused'; readonly error: IdempotencyError }
  | { readonly kind: 'lease'; readonly lease: Lease<Tx> };

/** A decision that runs nothing: the stored response, or a refusal. */
export type Answer = Exclude<Decision, { readonly kind: 'lease' }>;

/** What an {@link Answer} means to `run` and `runLocal`: the replay's result, or the refusal thrown. */
export function answered(answer: Answer): RunResult {
  if (answer.kind === 'refused') throw answer.error;
  return { replayed: true, response: answer.response, record: answer.record };
}

/** What `runLocal` (core/local.ts) shares with `begin`: the checks before a claim, the answers, events and ids. */
export interface EnginePhases {
  readonly clock: Clock;
  readonly ttlMs: number;
  readonly generateId: () => string;
  readonly emit: (event: IdempotencyEvent) => void;
  precheck(request: RunRequest, pk: string, ttlMs: number): Answer | undefined;
  /** What a record that refused the claim answers: a mismatch, a replay, or in flight. */
  answer(existing: IdempotencyRecord, request: RunRequest): Answer;
  unavailable(request: RunRequest, error: IdempotencyError): Answer & { readonly kind: 'refused' };
  remember(record: IdempotencyRecord): void;
}

const phasesOf = new WeakMap<object, EnginePhases>();

/** The phases of an engine made by {@link createEngine}; undefined for any other object. Not public. */
export function enginePhases(engine: object): EnginePhases | undefined {
  return phasesOf.get(engine);
}

/**
 * Status-code classification: 2xx and 3xx → succeeded (a redirect is an answer: `303 See Other` after a POST
 * points at what was created); a deterministic refusal (4xx but 408/409/425/429) → failed, final; anything else
 * (1xx, 5xx, 408, 409, 425, 429) → failed, retryable.
 *
 * @example
 * classifyStatus(402) // → 'failed-final'
 * classifyStatus(303) // → 'succeeded'
 */
export function classifyStatus(status: number): Exclude<OutcomeKind, 'release'> {
  if (status >= 200 && status < 400) return 'succeeded';
  if (status >= 400 && status < 500 && ![408, 409, 425, 429].includes(status)) return 'failed-final';
  return 'failed-retryable';
}

export interface Engine<Tx = never> {
  /**
   * The first phase: claims the key, or answers from the record in the way. The caller runs the work while it
   * holds the returned lease and settles it when the work ends.
   */
  begin(request: RunRequest): Promise<Decision<Tx>>;
  /** `begin`, the work, and the settlement in one call: runs `work` at most once per (scope, key) while the record lives. */
  run(request: RunRequest, work: (context: WorkContext) => Promise<WorkResult<Tx>>): Promise<RunResult>;
  readonly store: IdempotencyStore<Tx>;
  readonly leaseMs: number;
  /** Leases begun and not yet settled in this process (0 when nothing runs: no lease is left renewing). */
  readonly activeLeases: number;
}

/**
 * Creates the engine. Options are validated first (core/engine-options.ts), with errors that name the option.
 *
 * @example
 * const engine = createEngine({ store: memoryStore(), leaseMs: 10_000 })
 * const decision = await engine.begin({ scope, key, fingerprint })
 * if (decision.kind === 'lease') {
 *   const charge = await chargeCard({ idempotencyKey: decision.lease.id })
 *   await decision.lease.complete({ response: jsonResponse(201, charge), resultId: charge.id })
 * }
 */
export function createEngine<Tx = never>(options: EngineOptions<Tx>): Engine<Tx> {
  const settings = engineSettings(options);
  const { store, ttlMs, leaseMs, storeTimeoutMs, clock, generateId, onEvent } = settings;
  const emit = (event: IdempotencyEvent): void => {
    if (!onEvent) return;
    try {
      onEvent(event);
    } catch {
      // A metrics hook must never change what happens to a payment.
    }
  };

  /**
   * Every store call goes through here: timed (when someone listens), given up after `timeoutMs` (a call on a
   * black-holed connection never answers), and a backend failure becomes STORE_UNAVAILABLE.
   */
  async function call<T>(op: StoreOp, fn: () => Promise<T>, timeoutMs = storeTimeoutMs): Promise<T> {
    const started = onEvent ? performance.now() : 0;
    try {
      const value = await within(clock, fn(), timeoutMs, op);
      if (onEvent) emit({ type: 'store_op', op, ms: performance.now() - started, ok: true });
      return value;
    } catch (error) {
      if (onEvent) emit({ type: 'store_op', op, ms: performance.now() - started, ok: false, error });
      throw new IdempotencyError('STORE_UNAVAILABLE', `The idempotency store failed during ${op}.`, { cause: error });
    }
  }

  const answers = answersOf(settings, emit);
  const { answerFrom, busy, unavailable, precheck, remember } = answers;
  const { begin, active } = claimsOf(settings, call, emit, answers);

  async function run(request: RunRequest, work: (context: WorkContext) => Promise<WorkResult<Tx>>): Promise<RunResult> {
    const decision = await begin(request);
    if (decision.kind !== 'lease') return answered(decision);
    const { lease } = decision;
    let result: WorkResult<Tx>;
    try {
      result = await work(lease);
    } catch (error) {
      await lease.fail();
      throw error;
    }
    let settled: Settlement;
    try {
      settled = await lease.complete(result);
    } catch (error) {
      // The work returned something no record can hold: nothing was written, so the key is left retryable.
      await lease.fail();
      throw error;
    }
    if (!settled.ok) throw settled.error;
    return { replayed: false, response: result.response, record: settled.record };
  }

  const engine = {
    begin,
    run,
    store,
    leaseMs,
    get activeLeases() {
      return active();
    },
  };
  const answer = (existing: IdempotencyRecord, request: RunRequest): Answer =>
    answerFrom(existing, request) ?? busy(existing, request);
  phasesOf.set(engine, { clock, ttlMs, generateId, emit, precheck, answer, unavailable, remember });
  return engine;
}

/**
 * What a record in the way answers a request, made once per engine: the checks before a claim (with the cache of
 * final records), then a replay, a mismatch, in flight, or the store down.
 */
function answersOf(
  { clock, cacheSize, leaseMs, inUse }: Pick<EngineSettings<unknown>, 'clock' | 'cacheSize' | 'leaseMs' | 'inUse'>,
  emit: (event: IdempotencyEvent) => void,
) {
  /** Terminal records by pk, least recently used first. */
  const cache = new Map<string, IdempotencyRecord>();
  const remember = (record: IdempotencyRecord): void => {
    if (cacheSize === 0 || !isFinal(record)) return;
    cache.delete(record.pk);
    cache.set(record.pk, record);
    if (cache.size > cacheSize) cache.delete(cache.keys().next().value as string);
  };
  const recall = (pk: string): IdempotencyRecord | undefined => {
    const record = cache.get(pk);
    if (!record) return undefined;
    cache.delete(pk);
    if (record.expiresAt <= clock.now()) return undefined;
    cache.set(pk, record);
    return record;
  };

  /** The answer an existing record gives this request: a mismatch, a replay, or undefined (the key is busy or free). */
  function answerFrom(existing: IdempotencyRecord, request: RunRequest): Answer | undefined {
    const about = subject(request, existing.id);
    if (!fingerprintsEqual(existing.fingerprint, request.fingerprint)) {
      emit({ type: 'mismatch', ...about });
      return refused(
        new IdempotencyError(
          'FINGERPRINT_MISMATCH',
          'This Idempotency-Key was already used with a different request (method, path, query or body).',
        ),
      );
    }
    if (!isFinal(existing)) return undefined;
    emit({ type: 'replayed', ...about, status: (existing.response as StoredResponse).status });
    remember(existing);
    return { kind: 'replay', response: existing.response as StoredResponse, record: existing };
  }

  /** A record neither final nor free: in flight (refused with when to retry), or final with nothing to replay. */
  function busy(existing: IdempotencyRecord, request: RunRequest): Answer {
    if (existing.status !== 'in_progress') {
      const error = new IdempotencyError(
        'STORE_UNAVAILABLE',
        'The record for this key is final but holds no response.',
      );
      return unavailable(request, error);
    }
    emit({ type: 'in_flight', ...subject(request, existing.id) });
    return refused(
      new IdempotencyError('IN_FLIGHT', inUse, {
        retryAfterMs: Math.max(0, existing.leaseExpiresAt - clock.now()),
      }),
    );
  }

  /** The store failed: reported, and refused. */
  function unavailable(request: RunRequest, error: IdempotencyError): ReturnType<typeof refused> {
    const { scope, route } = request;
    emit({ type: 'refused', reason: 'STORE_UNAVAILABLE', scope, ...(route === undefined ? {} : { route }) });
    return refused(error);
  }

  /** Before any claim: a cached final record answers; a key with a lone surrogate or a bad `ttlMs` is refused. */
  function precheck(request: RunRequest, pk: string, recordTtl: number): Answer | undefined {
    const hit = cacheSize > 0 ? recall(pk) : undefined;
    if (hit) return answerFrom(hit, request);
    // A lone surrogate has no UTF-8 form: stores that encode text would turn two such keys into one record.
    if (!wellFormed(request.scope) || !wellFormed(request.key)) {
      return refused(
        new IdempotencyError(
          'KEY_INVALID',
          'The key and the scope must be well-formed Unicode text (no lone surrogates).',
        ),
      );
    }
    if (!Number.isFinite(recordTtl) || recordTtl <= leaseMs) {
      return refused(configError('ttlMs', `a number of ms greater than leaseMs (${leaseMs})`, recordTtl));
    }
    return undefined;
  }

  return { answerFrom, busy, unavailable, precheck, remember };
}

/** What {@link answersOf} makes. */
type Answers = ReturnType<typeof answersOf>;

/**
 * `begin`, made once per engine: the claim loop, the wait for an in-flight outcome (`waitForOutcomeMs`), and the
 * leases it hands out, with the count of those not yet settled (`activeLeases`).
 */
function claimsOf<Tx>(
  settings: EngineSettings<Tx>,
  call: LeaseContext<Tx>['call'],
  emit: LeaseContext<Tx>['emit'],
  { answerFrom, busy, unavailable, precheck, remember }: Answers,
): { readonly begin: (request: RunRequest) => Promise<Decision<Tx>>; readonly active: () => number } {
  const { store, ttlMs, leaseMs, renewEveryMs, leaseMarginMs, storeTimeoutMs, maxHoldMs } = settings;
  const { waitForOutcomeMs, clock, generateId, onTakeover } = settings;
  let activeLeases = 0;

  async function begin(request: RunRequest): Promise<Decision<Tx>> {
    const { scope, key, fingerprint } = request;
    const pk = recordPk(scope, key);
    const recordTtl = request.ttlMs ?? ttlMs;
    const early = precheck(request, pk, recordTtl);
    if (early) return early;
    const waitUntil = clock.now() + waitForOutcomeMs;
    try {
      for (let round = 1; ; round++) {
        const token = generateId();
        const freshId = generateId();
        const now = clock.now();
        let claim: ClaimResult;
        try {
          claim = await call('claim', () =>
            store.claim({ pk, scope, key, fingerprint, token, id: freshId, now, leaseMs, ttlMs: recordTtl }),
          );
        } catch (error) {
          if (onTakeover) await unwindClaim({ store, call, pk, token, freshId, now }); // unanswered, maybe applied
          throw error;
        }
        if (claim.kind === 'claimed') {
          // An answer that came back past the holder's deadline: the work may not start. Under 'reconcile' and
          // 'quarantine' the claim is undone (under 'rerun' a lapsed one is simply claimed again).
          if (clock.now() >= now + leaseMs - leaseMarginMs) {
            if (onTakeover) await unwindClaim({ store, call, pk, token, freshId, now }, claim);
            throw new IdempotencyError('STORE_UNAVAILABLE', 'The claim was answered too late to run the work safely.');
          }
          const reclaimed = claim.record.id !== freshId;
          if (reclaimed) emit({ type: 'takeover', ...subject(request, claim.record.id) });
          activeLeases++;
          const lease = holdLease(leaseContext, claim.record, now, reclaimed, subject(request, claim.record.id));
          return onTakeover && (claim.takeover ?? reclaimed) ? await onTakeover(lease) : { kind: 'lease', lease };
        }
        let existing: IdempotencyRecord | null = claim.record;
        const answer = answerFrom(existing, request);
        if (answer) return answer;
        if (existing.status === 'in_progress' && clock.now() < waitUntil) {
          existing = await waitForOutcome(pk, waitUntil);
          if (existing) {
            const settled = answerFrom(existing, request);
            if (settled) return settled;
          }
        }
        // Free again (released, failed and retryable, or its lease lapsed while we looked): claim it now rather
        // than send the client away from a key nobody holds. A store that keeps answering "free" but never lets
        // the claim through, or a final record with no response to replay, is refused: begin() never spins.
        if (existing === null || isRetryable(existing) || existing.leaseExpiresAt <= clock.now()) {
          if (round < MAX_CLAIM_ROUNDS) continue;
          throw new IdempotencyError('STORE_UNAVAILABLE', `The key stayed free but unclaimable for ${round} claims.`);
        }
        return busy(existing, request);
      }
    } catch (error) {
      return unavailable(request, error as IdempotencyError);
    }
  }

  /**
   * Polls until the record is no longer in progress, its lease has lapsed (a dead holder: the caller takes over),
   * or `until` passes. A holder that keeps renewing is waited for. Costs round trips; only used when opted in.
   */
  async function waitForOutcome(pk: string, until: number): Promise<IdempotencyRecord | null> {
    let delay = 25;
    for (;;) {
      await sleep(clock, Math.min(delay, Math.max(1, until - clock.now())));
      const record = await call('get', () => store.get(pk));
      const now = clock.now();
      if (!record || record.status !== 'in_progress' || record.leaseExpiresAt <= now || now >= until) return record;
      delay = Math.min(delay * 2, 500);
    }
  }

  const leaseContext = {
    store,
    clock,
    leaseMs,
    renewEveryMs,
    leaseMarginMs,
    storeTimeoutMs,
    maxHoldMs,
    unknownLapses: onTakeover !== undefined,
    call,
    emit,
    classify: classifyStatus,
    remember,
    ended: () => void activeLeases--,
  };

  return { begin, active: () => activeLeases };
}

/** The key fields every event about one record carries. */
export function subject({ scope, key, route }: RunRequest, id: string): KeyEventFields {
  return route === undefined ? { scope, key, id } : { scope, key, id, route };
}

/** How many times `begin` claims a key that keeps coming back free before it gives up. */
const MAX_CLAIM_ROUNDS = 8;

/** A failed record the next attempt may run again. */
function isRetryable(record: IdempotencyRecord): boolean {
  return record.status === 'failed' && record.retryable;
}

/**
 * `promise`, or a rejection once `ms` pass on `clock` without an answer. The call itself cannot be cancelled: a
 * late answer is dropped, and a store's writes are conditional, so a late one changes nothing it should not.
 */
function within<T>(clock: Clock, promise: Promise<T>, ms: number, op: StoreOp): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = clock.setTimeout(() => reject(new Error(`The store did not answer ${op} within ${ms} ms.`)), ms);
    // One reaction each way, not `then().finally()`: that chain costs two more promises per store call.
    const done = (): void => clock.clearTimeout(timer);
    promise.then(
      (value) => (done(), resolve(value)),
      (error: Error) => (done(), reject(error)),
    );
  });
}

/** A record every later request with the same fingerprint gets back: succeeded, or failed for good, with a response. */
function isFinal(record: IdempotencyRecord): boolean {
  return (
    (record.status === 'succeeded' || (record.status === 'failed' && !record.retryable)) && record.response !== null
  );
}

function refused(error: IdempotencyError): { readonly kind: 'refused'; readonly error: IdempotencyError } {
  return { kind: 'refused', error };
}

/**
 * A wait a caller is blocked on (`waitForOutcomeMs`). On the system clock it keeps the process alive, unlike the
 * lease's renewal timers: a consumer script waiting for an outcome must not exit with nothing said.
 */
function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => (clock === systemClock ? setTimeout(resolve, ms) : clock.setTimeout(resolve, ms)));
}

/** True when `text` has no lone surrogate (what `String.prototype.isWellFormed` tells, on every runtime). */
function wellFormed(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0xd800 || code > 0xdfff) continue;
    if (code > 0xdbff) return false;
    const next = text.charCodeAt(i + 1);
    if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
    i++;
  }
  return true;
}
