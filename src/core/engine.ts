/**
 * @module The state machine of DESIGN.md §2: claim before the work, replay, refuse, fence every later write.
 */
import { randomUUID } from 'node:crypto';
import { systemClock, type Clock } from './clock.js';
import { configError, IdempotencyError } from './errors.js';
import { fingerprintsEqual } from './fingerprint.js';
import { recordPk } from './key.js';
import type { IdempotencyRecord, IdempotencyStore, Outcome, StoredResponse } from './record.js';

const HOUR = 3_600_000;
/** The production range recommended for `ttlMs` (DESIGN.md §5). Shorter is allowed, with a warning. */
export const RECOMMENDED_TTL_MS = { min: 24 * HOUR, max: 28 * 24 * HOUR } as const;

/** Something the engine did, for metrics, logs and traces. Never carries bodies or credentials. */
export type IdempotencyEvent =
  | { readonly type: 'executed'; readonly scope: string; readonly key: string; readonly outcome: OutcomeKind }
  | { readonly type: 'takeover'; readonly scope: string; readonly key: string }
  | { readonly type: 'replayed'; readonly scope: string; readonly key: string }
  | { readonly type: 'in_flight'; readonly scope: string; readonly key: string }
  | { readonly type: 'mismatch'; readonly scope: string; readonly key: string }
  | { readonly type: 'lease_lost'; readonly scope: string; readonly key: string }
  | { readonly type: 'stale_write_refused'; readonly scope: string; readonly key: string; readonly op: StoreOp }
  | { readonly type: 'store_op'; readonly op: StoreOp; readonly ms: number; readonly ok: boolean; readonly error?: unknown };

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
   * mismatch costs no store round trip (DESIGN.md §6). Safe because a terminal record cannot change before it
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
 * DESIGN.md §2 step 4: 2xx → succeeded; a deterministic refusal (4xx but 408/409/425/429) → failed, final;
 * anything else (5xx, 408, 409, 425, 429) → failed, retryable.
 *
 * @example
 * classifyStatus(402) // → 'failed-final'
 */
export function classifyStatus(status: number): Exclude<OutcomeKind, 'release'> {
  if (status >= 200 && status < 300) return 'succeeded';
  if (status >= 400 && status < 500 && ![408, 409, 425, 429].includes(status)) return 'failed-final';
  return 'failed-retryable';
}

export interface Engine<Tx = never> {
  /** Runs `work` at most once per (scope, key) while the record lives; replays or refuses otherwise. */
  run(request: RunRequest, work: (context: WorkContext) => Promise<WorkResult<Tx>>): Promise<RunResult>;
  readonly store: IdempotencyStore<Tx>;
  readonly clock: Clock;
  readonly ttlMs: number;
  readonly leaseMs: number;
}

/**
 * Creates the engine. Options are validated here, with errors that name the option.
 *
 * @example
 * const engine = createEngine({ store: memoryStore(), leaseMs: 10_000 })
 * const { response, replayed } = await engine.run({ scope, key, fingerprint }, async ({ id }) => {
 *   const charge = await chargeCard({ idempotencyKey: id })
 *   return { response: jsonResponse(201, charge), resultId: charge.id }
 * })
 */
export function createEngine<Tx = never>({
  store,
  ttlMs = 24 * HOUR,
  leaseMs = 10_000,
  renewEveryMs = Math.max(1, Math.floor(leaseMs / 3)),
  waitForOutcomeMs = 0,
  cacheSize = 0,
  clock = systemClock,
  generateId = randomUUID,
  onEvent,
}: EngineOptions<Tx>): Engine<Tx> {
  if (typeof store?.claim !== 'function') throw configError('store', 'an IdempotencyStore');
  positive('ttlMs', ttlMs);
  positive('leaseMs', leaseMs);
  positive('renewEveryMs', renewEveryMs);
  if (renewEveryMs >= leaseMs) throw configError('renewEveryMs', `less than leaseMs (${leaseMs})`, renewEveryMs);
  if (ttlMs <= leaseMs) throw configError('ttlMs', `greater than leaseMs (${leaseMs})`, ttlMs);
  if (!Number.isSafeInteger(cacheSize) || cacheSize < 0) throw configError('cacheSize', 'a non-negative integer', cacheSize);
  if (typeof generateId !== 'function') throw configError('generateId', 'a function () => string', generateId);
  if (!Number.isFinite(waitForOutcomeMs) || waitForOutcomeMs < 0) {
    throw configError('waitForOutcomeMs', 'a non-negative number', waitForOutcomeMs);
  }
  if (ttlMs < RECOMMENDED_TTL_MS.min) {
    process.emitWarning(`Idem: ttlMs ${ttlMs} is under the 24 h production minimum; fine for tests and the lab.`, {
      type: 'IdemWarning',
      code: 'IDEM_SHORT_TTL',
    });
  }

  if (onEvent !== undefined && typeof onEvent !== 'function') throw configError('onEvent', 'a function (event) => void', onEvent);
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
    if (cacheSize === 0 || !replayOf(record)) return;
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

  /** The answer an existing record gives this request: a mismatch (thrown), a replay, or undefined (in flight). */
  function answerFrom(existing: IdempotencyRecord, { scope, key, fingerprint }: RunRequest): RunResult | undefined {
    if (!fingerprintsEqual(existing.fingerprint, fingerprint)) {
      emit({ type: 'mismatch', scope, key });
      throw new IdempotencyError(
        'FINGERPRINT_MISMATCH',
        'This Idempotency-Key was already used with a different request (method, path, query or body).',
      );
    }
    const replay = replayOf(existing);
    if (replay) {
      emit({ type: 'replayed', scope, key });
      remember(existing);
    }
    return replay;
  }

  async function run(request: RunRequest, work: (context: WorkContext) => Promise<WorkResult<Tx>>): Promise<RunResult> {
    const { scope, key, fingerprint } = request;
    const pk = recordPk(scope, key);
    const hit = cacheSize > 0 ? recall(pk) : undefined;
    if (hit) return answerFrom(hit, request) as RunResult;
    const waitUntil = clock.now() + waitForOutcomeMs;
    for (;;) {
      const token = generateId();
      const freshId = generateId();
      const claim = await call('claim', () =>
        store.claim({ pk, scope, key, fingerprint, token, id: freshId, now: clock.now(), leaseMs, ttlMs }),
      );
      if (claim.kind === 'claimed') {
        const reclaimed = claim.record.id !== freshId;
        if (reclaimed) emit({ type: 'takeover', scope, key });
        return execute(claim.record, reclaimed, work);
      }
      const existing = claim.record;
      const replay = answerFrom(existing, request);
      if (replay) return replay;
      // In flight (or, rarely, a record the claim saw as live that has since become claimable): wait or refuse.
      const now = clock.now();
      const leaseLeft = Math.max(0, existing.leaseExpiresAt - now);
      if (now < waitUntil) {
        const outcome = await waitForOutcome(pk, Math.min(waitUntil, existing.leaseExpiresAt));
        const settled = outcome && answerFrom(outcome, request);
        if (settled) return settled;
        if (clock.now() < waitUntil) continue;
      }
      emit({ type: 'in_flight', scope, key });
      throw new IdempotencyError('IN_FLIGHT', 'A request with this Idempotency-Key is still being processed.', {
        retryAfterMs: leaseLeft,
      });
    }
  }

  function replayOf(record: IdempotencyRecord): RunResult | undefined {
    const final = record.status === 'succeeded' || (record.status === 'failed' && !record.retryable);
    return final && record.response ? { replayed: true, response: record.response, record } : undefined;
  }

  /** Polls until the record is terminal or `until` passes. Costs round trips; only used when opted in. */
  async function waitForOutcome(pk: string, until: number): Promise<IdempotencyRecord | null> {
    let delay = 25;
    for (;;) {
      await sleep(clock, Math.min(delay, Math.max(1, until - clock.now())));
      const record = await call('get', () => store.get(pk));
      if (!record || record.status !== 'in_progress' || clock.now() >= until) return record;
      delay = Math.min(delay * 2, 500);
    }
  }

  async function execute(
    record: IdempotencyRecord,
    reclaimed: boolean,
    work: (context: WorkContext) => Promise<WorkResult<Tx>>,
  ): Promise<RunResult> {
    const { pk, token, scope, key } = record;
    const lease = holdLease(record);
    let result: WorkResult<Tx>;
    try {
      result = await work({ scope, key, id: record.id, reclaimed, signal: lease.signal });
    } catch (error) {
      lease.stop();
      // The work threw: nothing was promised to the client, so the next attempt may run it again.
      const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
      const written = await call('complete', () => store.complete({ pk, token, now: clock.now(), outcome: failed })).catch(
        () => undefined, // The lease will lapse; the original error is what the caller needs to see.
      );
      if (written && !written.ok) emit({ type: 'stale_write_refused', scope, key, op: 'complete' });
      throw error;
    }
    lease.stop();

    const kind = result.outcome ?? classifyStatus(result.response.status);
    if (kind === 'release') {
      const released = await call('release', () => store.release({ pk, token }));
      if (!released.ok) emit({ type: 'stale_write_refused', scope, key, op: 'release' });
      return { replayed: false, response: result.response, record: null };
    }
    const outcome: Outcome = {
      status: kind === 'succeeded' ? 'succeeded' : 'failed',
      retryable: kind === 'failed-retryable',
      resultId: result.resultId ?? null,
      response: result.response,
    };
    const written = await call('complete', async () => {
      try {
        return await store.complete({ pk, token, now: clock.now(), outcome, effects: result.effects });
      } catch (error) {
        // Failing effects can be the late writer's symptom: a store that runs them before its fenced update
        // (PostgreSQL) meets the new owner's committed writes — keyed on the same record id — and a unique
        // constraint fails first. If the key is no longer ours, that is a refused late write, not a store failure.
        if (result.effects === undefined) throw error;
        const current = await store.get(pk).catch(() => undefined);
        if (current === null || (current && (current.token !== token || current.status !== 'in_progress'))) return { ok: false };
        throw error;
      }
    });
    if (!written.ok) {
      // Our lease was taken over while the work ran. The late writer loses and changes nothing.
      emit({ type: 'stale_write_refused', scope, key, op: 'complete' });
      throw new IdempotencyError('LEASE_LOST', 'This attempt lost its lease to another; its outcome was not recorded.', {
        retryAfterMs: 0,
      });
    }
    emit({ type: 'executed', scope, key, outcome: kind });
    const completed = { ...record, ...outcome };
    remember(completed);
    return { replayed: false, response: result.response, record: completed };
  }

  /**
   * Renews the lease every `renewEveryMs` while the work runs; aborts the work's signal if the lease is lost.
   * `stop()` does not wait for a renewal already in flight: renewals are conditional on `in_progress`, so one
   * that lands after the completion changes nothing, and a stalled store must not delay the answer twice.
   */
  function holdLease(record: IdempotencyRecord): { signal: AbortSignal; stop: () => void } {
    const controller = new AbortController();
    let stopped = false;
    let timer: unknown;
    let expiresAt = record.expiresAt;
    const schedule = (): void => {
      timer = clock.setTimeout(() => void renew(), renewEveryMs);
    };
    const renew = async (): Promise<void> => {
      if (stopped) return;
      try {
        const now = clock.now();
        expiresAt = Math.max(expiresAt, now + leaseMs);
        const renewed = await call('renew', () =>
          store.renew({ pk: record.pk, token: record.token, now, leaseMs, expiresAt }),
        );
        if (!renewed.ok && !stopped) {
          emit({ type: 'lease_lost', scope: record.scope, key: record.key });
          controller.abort(new IdempotencyError('LEASE_LOST', 'Another attempt took over this key.'));
          return;
        }
      } catch {
        // The store is unreachable: try again next tick. If the lease lapses meanwhile, completion is fenced.
      }
      if (!stopped) schedule();
    };
    schedule();
    return {
      signal: controller.signal,
      stop: () => {
        stopped = true;
        clock.clearTimeout(timer);
      },
    };
  }

  return { run, store, clock, ttlMs, leaseMs };
}

function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms));
}

function positive(name: string, value: number): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw configError(name, 'a positive number', value);
}

