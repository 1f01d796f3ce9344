/**
 * @module The state machine (docs/DESIGN.md: State machine): claim before the work, replay, refuse, fence every later write.
 */
import { systemClock, type Clock } from './clock.js';
import { configError, IdempotencyError } from './errors.js';
import { fingerprintsEqual } from './fingerprint.js';
import { recordPk } from './key.js';
import type { IdempotencyRecord, IdempotencyStore, Outcome, StoredResponse } from './record.js';

const HOUR = 3_600_000;
/** The production range recommended for `ttlMs` (docs/DESIGN.md: Expiry). Shorter is allowed, with a warning. */
export const RECOMMENDED_TTL_MS = { min: 24 * HOUR, max: 28 * 24 * HOUR } as const;

/**
 * What every event about one key carries: its scope and key, the record's id where one exists, and the route
 * (the request path, when the HTTP layer or the caller gave one).
 */
export interface KeyEventFields {
  readonly scope: string;
  readonly key: string;
  readonly id?: string;
  readonly route?: string;
}

/**
 * Something the engine or the HTTP layer did, for metrics, logs and traces. Never carries bodies or credentials;
 * sinks that export it should hash `key` (the demo's logs and `idem/otel` do).
 */
export type IdempotencyEvent =
  | (KeyEventFields & {
      readonly type: 'executed';
      readonly outcome: OutcomeKind;
      /** The status the work answered (null when it threw). */
      readonly status: number | null;
      /** From the claim to the recorded outcome, in ms. */
      readonly ms: number;
    })
  | (KeyEventFields & { readonly type: 'takeover' })
  | (KeyEventFields & { readonly type: 'replayed'; readonly status: number })
  | (KeyEventFields & { readonly type: 'in_flight' })
  | (KeyEventFields & { readonly type: 'mismatch' })
  | (KeyEventFields & { readonly type: 'lease_lost' })
  | (KeyEventFields & { readonly type: 'stale_write_refused'; readonly op: StoreOp })
  | {
      /** A request refused before any claim: no key where one is required, an invalid key, a body over the limit, a store down. */
      readonly type: 'refused';
      readonly reason: 'KEY_MISSING' | 'KEY_INVALID' | 'BODY_TOO_LARGE' | 'STORE_UNAVAILABLE';
      readonly scope?: string;
      readonly route?: string;
    }
  | {
      readonly type: 'store_op';
      readonly op: StoreOp;
      readonly ms: number;
      readonly ok: boolean;
      readonly error?: unknown;
    };

export type StoreOp = 'claim' | 'complete' | 'renew' | 'release' | 'get';

/**
 * How the attempt ended. `failed-final` is replayed to every retry; `failed-retryable` lets the next attempt
 * run the work again; `release` deletes the record (the work declined to start, so nothing is remembered).
 */
export type OutcomeKind = 'succeeded' | 'failed-final' | 'failed-retryable' | 'release';

export interface EngineOptions<Tx = never> {
  readonly store: IdempotencyStore<Tx>;
  /** How long a record lives. Default 24 h. */
  readonly ttlMs?: number;
  /** How long a claim holds the key before another attempt may take it over. Default 10 s; renewed while the work runs. */
  readonly leaseMs?: number;
  /** How often the lease is renewed while the work runs. Default `leaseMs / 3`. */
  readonly renewEveryMs?: number;
  /** Instead of answering 409 at once, wait up to this long for the in-flight attempt's outcome. Default 0. */
  readonly waitForOutcomeMs?: number;
  /**
   * Keep up to this many terminal records (succeeded, or failed and final) in this process, so a hot replay or
   * mismatch costs no store round trip (docs/DESIGN.md: Round-trip budget). Safe because a terminal record cannot change before it
   * expires; `in_progress` and retryable failures are never kept. A record deleted behind the store's back is
   * still replayed here until its `expiresAt`. Default 0 (off).
   */
  readonly cacheSize?: number;
  readonly clock?: Clock;
  /** Makes fencing tokens and record ids. Default `crypto.randomUUID`; inject a seeded one to replay a simulation. */
  readonly generateId?: () => string;
  readonly onEvent?: (event: IdempotencyEvent) => void;
}

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

/** What the work sees. Pass `id` downstream as its own idempotency key: it survives takeovers. */
export interface WorkContext {
  readonly scope: string;
  readonly key: string;
  /** The record's stable id. A takeover after a crash runs with the same id, so the work can find what the dead attempt did. */
  readonly id: string;
  /** True when this attempt took over a dead lease or reclaimed a retryable failure. */
  readonly reclaimed: boolean;
  /** Aborted when the lease is lost: another attempt owns the key now, and this one's writes will be refused. */
  readonly signal: AbortSignal;
}

/** What the work returns. `outcome` overrides the classification by status code. */
export interface WorkResult<Tx = never> {
  readonly response: StoredResponse;
  readonly outcome?: OutcomeKind;
  readonly resultId?: string | null;
  /** Writes to commit in the same transaction as the record's completion (stores that share a database). */
  readonly effects?: (tx: Tx) => unknown;
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

/** How a lease was settled: the record written, or why it could not be (`LEASE_LOST`, `STORE_UNAVAILABLE`). */
export type Settlement =
  | { readonly ok: true; readonly record: IdempotencyRecord | null }
  | { readonly ok: false; readonly error: IdempotencyError };

/**
 * A claimed key: the right to run the work once. It is renewed in the background until it is settled, and it is
 * settled exactly once — by `complete`, `fail` or `release`; any later call returns the first settlement.
 * Settling stops the renewals before the write, so no path leaves a lease renewing.
 */
export interface Lease<Tx = never> extends WorkContext {
  /**
   * Records the work's outcome (classified by status unless `result.outcome` says otherwise). `effects` commit
   * with the record only when the outcome is final (succeeded, or failed for good): a retryable outcome lets the
   * next attempt run the work again, so its writes must not have happened. Never rejects.
   */
  complete(result: WorkResult<Tx>): Promise<Settlement>;
  /** The work failed before it produced an answer (it threw): the key ends `failed`, retryable. Never rejects. */
  fail(): Promise<Settlement>;
  /** The work declined to start: the record is deleted, so nothing is remembered. Never rejects. */
  release(): Promise<Settlement>;
  /** True once one of the three was called. */
  readonly settled: boolean;
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
  readonly clock: Clock;
  readonly ttlMs: number;
  readonly leaseMs: number;
  /** Leases begun and not yet settled in this process (0 when nothing runs: no lease is left renewing). */
  readonly activeLeases: number;
}

/**
 * Creates the engine. Options are validated here, with errors that name the option.
 *
 * @example
 * const engine = createEngine({ store: memoryStore(), leaseMs: 10_000 })
 * const decision = await engine.begin({ scope, key, fingerprint })
 * if (decision.kind === 'lease') {
 *   const charge = await chargeCard({ idempotencyKey: decision.lease.id })
 *   await decision.lease.complete({ response: jsonResponse(201, charge), resultId: charge.id })
 * }
 */
export function createEngine<Tx = never>({
  store,
  ttlMs = 24 * HOUR,
  leaseMs = 10_000,
  renewEveryMs = Math.max(1, Math.floor(leaseMs / 3)),
  waitForOutcomeMs = 0,
  cacheSize = 0,
  clock = systemClock,
  generateId = () => crypto.randomUUID(),
  onEvent,
}: EngineOptions<Tx>): Engine<Tx> {
  if (typeof store?.claim !== 'function') throw configError('store', 'an IdempotencyStore');
  positive('ttlMs', ttlMs);
  positive('leaseMs', leaseMs);
  positive('renewEveryMs', renewEveryMs);
  if (renewEveryMs >= leaseMs) throw configError('renewEveryMs', `less than leaseMs (${leaseMs})`, renewEveryMs);
  if (ttlMs <= leaseMs) throw configError('ttlMs', `greater than leaseMs (${leaseMs})`, ttlMs);
  if (!Number.isSafeInteger(cacheSize) || cacheSize < 0)
    throw configError('cacheSize', 'a non-negative integer', cacheSize);
  if (typeof generateId !== 'function') throw configError('generateId', 'a function () => string', generateId);
  if (!Number.isFinite(waitForOutcomeMs) || waitForOutcomeMs < 0) {
    throw configError('waitForOutcomeMs', 'a non-negative number', waitForOutcomeMs);
  }
  if (ttlMs < RECOMMENDED_TTL_MS.min) {
    warn(`Idem: ttlMs ${ttlMs} is under the 24 h production minimum; fine for tests and the lab.`, 'IDEM_SHORT_TTL');
  }

  if (onEvent !== undefined && typeof onEvent !== 'function')
    throw configError('onEvent', 'a function (event) => void', onEvent);
  const emit = (event: IdempotencyEvent): void => {
    if (!onEvent) return;
    try {
      onEvent(event);
    } catch {
      // A metrics hook must never change what happens to a payment.
    }
  };

  /** Every store call goes through here: timed (when someone listens), and a backend failure becomes STORE_UNAVAILABLE. */
  async function call<T>(op: StoreOp, fn: () => Promise<T>): Promise<T> {
    const started = onEvent ? performance.now() : 0;
    try {
      const value = await fn();
      if (onEvent) emit({ type: 'store_op', op, ms: performance.now() - started, ok: true });
      return value;
    } catch (error) {
      if (onEvent) emit({ type: 'store_op', op, ms: performance.now() - started, ok: false, error });
      throw new IdempotencyError('STORE_UNAVAILABLE', `The idempotency store failed during ${op}.`, { cause: error });
    }
  }

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

  let activeLeases = 0;

  /** The answer an existing record gives this request: a mismatch, a replay, or undefined (the key is busy or free). */
  function answerFrom(existing: IdempotencyRecord, request: RunRequest): Decision<Tx> | undefined {
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

  async function begin(request: RunRequest): Promise<Decision<Tx>> {
    const { scope, key, fingerprint } = request;
    const pk = recordPk(scope, key);
    const hit = cacheSize > 0 ? recall(pk) : undefined;
    if (hit) return answerFrom(hit, request) as Decision<Tx>;
    // A lone surrogate has no UTF-8 form: stores that encode text would turn two such keys into one record.
    if (!wellFormed(scope) || !wellFormed(key)) {
      return refused(
        new IdempotencyError(
          'KEY_INVALID',
          'The key and the scope must be well-formed Unicode text (no lone surrogates).',
        ),
      );
    }
    const recordTtl = request.ttlMs ?? ttlMs;
    if (!Number.isFinite(recordTtl) || recordTtl <= leaseMs) {
      return refused(configError('ttlMs', `a number of ms greater than leaseMs (${leaseMs})`, recordTtl));
    }
    const waitUntil = clock.now() + waitForOutcomeMs;
    try {
      for (;;) {
        const token = generateId();
        const freshId = generateId();
        const claim = await call('claim', () =>
          store.claim({ pk, scope, key, fingerprint, token, id: freshId, now: clock.now(), leaseMs, ttlMs: recordTtl }),
        );
        if (claim.kind === 'claimed') {
          const reclaimed = claim.record.id !== freshId;
          if (reclaimed) emit({ type: 'takeover', ...subject(request, claim.record.id) });
          return { kind: 'lease', lease: hold(claim.record, reclaimed, request.route) };
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
        // than send the client away from a key nobody holds.
        if (existing === null || existing.status !== 'in_progress' || existing.leaseExpiresAt <= clock.now()) continue;
        emit({ type: 'in_flight', ...subject(request, existing.id) });
        return refused(
          new IdempotencyError('IN_FLIGHT', 'A request with this Idempotency-Key is still being processed.', {
            retryAfterMs: existing.leaseExpiresAt - clock.now(),
          }),
        );
      }
    } catch (error) {
      emit({
        type: 'refused',
        reason: 'STORE_UNAVAILABLE',
        scope,
        ...(request.route === undefined ? {} : { route: request.route }),
      });
      return refused(error as IdempotencyError);
    }
  }

  async function run(request: RunRequest, work: (context: WorkContext) => Promise<WorkResult<Tx>>): Promise<RunResult> {
    const decision = await begin(request);
    if (decision.kind === 'refused') throw decision.error;
    if (decision.kind === 'replay') return { replayed: true, response: decision.response, record: decision.record };
    const { lease } = decision;
    let result: WorkResult<Tx>;
    try {
      result = await work(lease);
    } catch (error) {
      await lease.fail();
      throw error;
    }
    const settled = await lease.complete(result);
    if (!settled.ok) throw settled.error;
    return { replayed: false, response: result.response, record: settled.record };
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

  /**
   * Holds a claimed record: renews it every `renewEveryMs` (pushing `expiresAt` along, so a live lease never
   * expires by TTL) and aborts the work's signal if the lease is lost. Settling stops the renewals first; a
   * renewal already in flight is conditional on `in_progress` and changes nothing after the completion.
   */
  function hold(record: IdempotencyRecord, reclaimed: boolean, route: string | undefined): Lease<Tx> {
    const { pk, token, scope, key } = record;
    const about: KeyEventFields = { scope, key, id: record.id, ...(route === undefined ? {} : { route }) };
    const startedAt = clock.now();
    // Made when the work first reads `signal` (or when the lease is lost): most work never reads it, and an
    // AbortController is among the costliest objects a lease would make.
    let controller: AbortController | undefined;
    let timer: unknown;
    let expiresAt = record.expiresAt;
    let settlement: Promise<Settlement> | undefined;
    activeLeases++;

    const renew = async (): Promise<void> => {
      if (settlement) return;
      try {
        const now = clock.now();
        expiresAt = Math.max(expiresAt, now + leaseMs);
        const renewed = await call('renew', () => store.renew({ pk, token, now, leaseMs, expiresAt }));
        if (!renewed.ok && !settlement) {
          emit({ type: 'lease_lost', ...about });
          (controller ??= new AbortController()).abort(
            new IdempotencyError('LEASE_LOST', 'Another attempt took over this key.'),
          );
          return;
        }
      } catch {
        // The store is unreachable: try again next tick. If the lease lapses meanwhile, completion is fenced.
      }
      if (!settlement) timer = clock.setTimeout(() => void renew(), renewEveryMs);
    };
    timer = clock.setTimeout(() => void renew(), renewEveryMs);

    /** One promise per settlement: the write, its failure as a value, and the count of active leases. */
    const written = async (write: Promise<Settlement>): Promise<Settlement> => {
      try {
        return await write;
      } catch (error) {
        return { ok: false, error: error as IdempotencyError };
      } finally {
        activeLeases--;
      }
    };
    const settle = (write: () => Promise<Settlement>): Promise<Settlement> => {
      if (settlement) return settlement;
      clock.clearTimeout(timer);
      settlement = written(write());
      return settlement;
    };
    const refusedWrite = (op: StoreOp): Settlement => {
      emit({ type: 'stale_write_refused', ...about, op });
      return {
        ok: false,
        error: new IdempotencyError(
          'LEASE_LOST',
          'This attempt lost its lease to another; its outcome was not recorded.',
          {
            retryAfterMs: 0,
          },
        ),
      };
    };

    const release = async (status: number | null = null): Promise<Settlement> => {
      const released = await call('release', () => store.release({ pk, token }));
      if (!released.ok) return refusedWrite('release');
      emit({ type: 'executed', ...about, outcome: 'release', status, ms: clock.now() - startedAt });
      return { ok: true, record: null };
    };

    const complete = async ({
      response,
      outcome: declared,
      resultId,
      effects,
    }: WorkResult<Tx>): Promise<Settlement> => {
      const kind = declared ?? classifyStatus(response.status);
      if (kind === 'release') return release(response.status);
      const outcome: Outcome = {
        status: kind === 'succeeded' ? 'succeeded' : 'failed',
        retryable: kind === 'failed-retryable',
        resultId: resultId ?? null,
        response,
      };
      // Effects only with a final outcome: a retryable one means the next attempt runs the work (and its writes) again.
      const final = kind !== 'failed-retryable' ? effects : undefined;
      const written = await call('complete', async () => {
        try {
          return await store.complete({ pk, token, now: clock.now(), outcome, effects: final });
        } catch (error) {
          // Failing effects can be the late writer's symptom: a store that runs them before its fenced update
          // (PostgreSQL) meets the new owner's committed writes — keyed on the same record id — and a unique
          // constraint fails first. If the key is no longer ours, that is a refused late write, not a store failure.
          if (final === undefined) throw error;
          const current = await store.get(pk).catch(() => undefined);
          if (current === null || (current && (current.token !== token || current.status !== 'in_progress')))
            return { ok: false };
          throw error;
        }
      });
      if (!written.ok) return refusedWrite('complete');
      emit({ type: 'executed', ...about, outcome: kind, status: response.status, ms: clock.now() - startedAt });
      const completed: IdempotencyRecord = { ...record, ...outcome, expiresAt };
      remember(completed);
      return { ok: true, record: completed };
    };

    const fail = async (): Promise<Settlement> => {
      // Nothing was promised to the client, so the next attempt may run the work again.
      const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
      const written = await call('complete', () => store.complete({ pk, token, now: clock.now(), outcome: failed }));
      if (!written.ok) return refusedWrite('complete');
      emit({ type: 'executed', ...about, outcome: 'failed-retryable', status: null, ms: clock.now() - startedAt });
      return { ok: true, record: { ...record, ...failed, expiresAt } };
    };

    return {
      scope,
      key,
      id: record.id,
      reclaimed,
      get signal() {
        return (controller ??= new AbortController()).signal;
      },
      get settled() {
        return settlement !== undefined;
      },
      complete: (result) => settle(() => complete(result)),
      fail: () => settle(fail),
      release: () => settle(() => release()),
    };
  }

  return {
    begin,
    run,
    store,
    clock,
    ttlMs,
    leaseMs,
    get activeLeases() {
      return activeLeases;
    },
  };
}

function subject({ scope, key, route }: RunRequest, id: string): KeyEventFields {
  return route === undefined ? { scope, key, id } : { scope, key, id, route };
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

/** A warning through Node's `process.emitWarning` where there is one (so `--no-warnings` silences it), else the console. */
function warn(message: string, code: string): void {
  const emit = (globalThis as { process?: { emitWarning?: (m: string, o: { type: string; code: string }) => void } })
    .process?.emitWarning;
  if (typeof emit === 'function') emit(message, { type: 'IdemWarning', code });
  else console.warn(`${code}: ${message}`);
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

function positive(name: string, value: number): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
    throw configError(name, 'a positive number', value);
}
