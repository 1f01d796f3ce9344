/**
 * @module A claimed key held on the holder's own clock (docs/DESIGN.md: Lease): renewed on a timer, lost when the
 * holder's local deadline passes without a confirmed renewal, given up after `maxHoldMs`, settled exactly once.
 */
import type { Clock } from './clock.js';
import { IdempotencyError } from './errors.js';
import type { IdempotencyEvent, KeyEventFields, OutcomeKind, StoreOp } from './events.js';
import type { IdempotencyRecord, IdempotencyStore, Outcome, StoredResponse } from './record.js';

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

/** How a lease was settled: the record written, or why it could not be (`LEASE_LOST`, `STORE_UNAVAILABLE`). */
export type Settlement =
  | { readonly ok: true; readonly record: IdempotencyRecord | null }
  | { readonly ok: false; readonly error: IdempotencyError };

/**
 * A claimed key: the right to run the work once. It is renewed in the background until it is settled, and it is
 * settled exactly once — by `complete`, `fail`, `release` or `abandon`; any later call returns the first
 * settlement. Settling stops the renewals before the write, so no path leaves a lease renewing.
 */
export interface Lease<Tx = never> extends WorkContext {
  /**
   * Records the work's outcome (classified by status unless `result.outcome` says otherwise). `effects` commit
   * with the record only when the outcome is final (succeeded, or failed for good): a retryable outcome lets the
   * next attempt run the work again, so its writes must not have happened. Never rejects for the store's sake;
   * a `result` without a valid `response` (and not `outcome: 'release'`) rejects with `CONFIG_INVALID` at the
   * call, writes nothing and leaves the lease unsettled. Once the lease was aborted under `'reconcile'` or
   * `'quarantine'`, a retryable outcome or a release writes nothing and answers `LEASE_LOST`, as `fail` does.
   */
  complete(result: WorkResult<Tx>): Promise<Settlement>;
  /**
   * The work failed before it produced an answer (it threw): the key ends `failed`, retryable. Once the lease was
   * aborted (lost, or its local deadline passed) under `'reconcile'` or `'quarantine'`, the outcome is unknown: it
   * writes nothing (as `abandon`) and answers `LEASE_LOST`, so the next claim is a takeover. So does
   * `fail({ answered: true })` under those policies: the work answered, but its answer could not be read or
   * recorded (a body stream that failed), so it may have had its effect. Never rejects.
   */
  fail(how?: { readonly answered?: boolean }): Promise<Settlement>;
  /** The work declined to start: the record is deleted, so nothing is remembered. Never rejects. */
  release(): Promise<Settlement>;
  /**
   * Stops renewing and writes nothing: the record stays `in_progress` until its lease lapses (retries get 409
   * meanwhile), then the next attempt takes over with the same `id`. For an answer sent while the work may still
   * be running (a timeout middleware, a client gone mid-stream): no retry starts the work beside it. Never rejects.
   */
  abandon(): Promise<Settlement>;
  /** True once one of the four was called (or `maxHoldMs` settled it). */
  readonly settled: boolean;
  /**
   * Calls `listener` (a function, or an object's `handleEvent`) with the lease's error if the engine gives the key
   * up past `maxHoldMs`: in that turn, once `signal` is aborted and the lease settled, so an adapter can answer its
   * waiting client at once. Not for a lease lost or past its local deadline (the work may still answer); not once
   * the work's own abort listener settled it. One listener: a later call replaces it. Cheaper per request than an
   * `'abort'` listener on `signal` (an EventTarget's: 146k instructions a request in the Express bench).
   */
  onGivenUp(listener: GivenUpListener): void;
}

/** What {@link Lease.onGivenUp} calls: a function, or an object's `handleEvent` (no closure per request). */
export type GivenUpListener =
  ((error: IdempotencyError) => void) | { handleEvent(this: unknown, error: IdempotencyError): void };

/** What a lease needs from its engine. */
export interface LeaseContext<Tx> {
  readonly store: IdempotencyStore<Tx>;
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly renewEveryMs: number;
  readonly leaseMarginMs: number;
  readonly storeTimeoutMs: number;
  readonly maxHoldMs: number;
  /**
   * Under `takeover: 'reconcile'` or `'quarantine'`: a lease given up with its work's outcome unknown (`maxHoldMs`,
   * lost, or work that threw once its signal was aborted) writes nothing and lapses, so the next claim is a takeover.
   */
  readonly unknownLapses: boolean;
  /** A store call, timed out after `timeoutMs`; a failure or a timeout rejects with `STORE_UNAVAILABLE`. */
  readonly call: <T>(op: StoreOp, fn: () => Promise<T>, timeoutMs?: number) => Promise<T>;
  readonly emit: (event: IdempotencyEvent) => void;
  readonly classify: (status: number) => Exclude<OutcomeKind, 'release'>;
  /** Keeps a final record in the engine's cache. */
  readonly remember: (record: IdempotencyRecord) => void;
  /** Called once, when the lease's settlement is written (or refused). */
  readonly ended: () => void;
}

/**
 * Holds a claimed record. One timer, set for the earliest of three moments:
 *
 * - the next renewal (`renewEveryMs` after the last one was sent). A renewal that does not answer within
 *   `renewEveryMs` (or the time the lease has left, if less) is abandoned and the next one is sent, so one
 *   renewal stuck on a dead pooled connection cannot stop the others; stores never let a late one shorten the lease;
 * - the **local deadline**: the `now` of the last confirmed write (the claim, then each renewal that answered ok)
 *   plus `leaseMs − leaseMarginMs`. The store lets another attempt take over at `now + leaseMs` by that write's
 *   clock; the holder gives up `leaseMarginMs` earlier on its own clock, whatever the store answers or does not
 *   (docs/DESIGN.md: Lease, the timing rule). It aborts the work's signal with `LEASE_LOST`; renewals go on until
 *   one is refused, and a late completion is still fenced by the token;
 * - `maxHoldMs` after the claim: work that never settles (a handler that never answers) is aborted and the key
 *   settled `failed`, retryable, so a retry can run it; the lease's own late completion is then refused. Under
 *   `'reconcile'` and `'quarantine'` (`unknownLapses`) nothing is written: the lease lapses into a takeover.
 */
export function holdLease<Tx>(
  engine: LeaseContext<Tx>,
  record: IdempotencyRecord,
  claimedAt: number,
  reclaimed: boolean,
  about: KeyEventFields,
): Lease<Tx> {
  const { store, clock, leaseMs, renewEveryMs, leaseMarginMs, call, emit } = engine;
  const { pk, token, scope, key } = record;
  const holdUntil = claimedAt + engine.maxHoldMs;
  // Made when the work first reads `signal` (or when the lease is lost): most work never reads it, and an
  // AbortController is among the costliest objects a lease would make.
  let controller: AbortController | undefined;
  let timer: unknown;
  let expiresAt = record.expiresAt;
  let deadline = claimedAt + leaseMs - leaseMarginMs;
  let nextRenewalAt = claimedAt + renewEveryMs;
  let aborted = false;
  let taken = false;
  let settlement: Promise<Settlement> | undefined;
  let givenUp: GivenUpListener | undefined;
  const held: Held<Tx> = { engine, record, claimedAt, about };

  const abort = (message: string): IdempotencyError => {
    const error = new IdempotencyError('LEASE_LOST', message, { retryAfterMs: 0 });
    if (aborted) return error;
    aborted = true;
    emit({ type: 'lease_lost', ...about });
    (controller ??= new AbortController()).abort(error);
    return error;
  };

  const renew = (now: number): void => {
    expiresAt = Math.max(expiresAt, now + leaseMs);
    const left = deadline > now ? deadline - now : renewEveryMs;
    const timeoutMs = Math.max(1, Math.min(engine.storeTimeoutMs, renewEveryMs, left));
    call('renew', () => store.renew({ pk, token, now, leaseMs, expiresAt }), timeoutMs).then(
      (renewed) => {
        if (settlement || taken) return;
        if (renewed.ok) deadline = Math.max(deadline, now + leaseMs - leaseMarginMs);
        else {
          // Someone else holds the token now: nothing more to renew (maxHoldMs still ends a lease never settled).
          taken = true;
          abort('Another attempt took over this key.');
        }
      },
      // Unreachable or too slow: the next tick sends another renewal; the deadline stands until one is confirmed.
      () => undefined,
    );
  };

  const tick = (): void => {
    if (settlement) return;
    const now = clock.now();
    if (now >= holdUntil) {
      const error = abort(`The work held this key longer than maxHoldMs (${engine.maxHoldMs} ms).`);
      if (settlement) return; // the work's abort listener settled it: not given up
      void settle(() => heldTooLong(held, expiresAt, lapses(held, aborted), error));
      tell(givenUp, error);
      return;
    }
    // Past the local deadline the work is told to stop; renewals go on (conditional on the token, they keep a
    // retry out for as long as the store still says we hold the key, in case the work ignores its signal).
    if (now >= deadline) abort('The lease ran out on this holder’s clock before a renewal was confirmed.');
    // abort() ran the work's listeners; one may have settled the lease: a renewal now would extend what it gave up.
    if (settlement) return;
    if (now >= nextRenewalAt && !taken) {
      nextRenewalAt = now + renewEveryMs;
      renew(now);
    }
    schedule(now);
  };
  const schedule = (now: number): void => {
    const next = Math.min(taken ? holdUntil : nextRenewalAt, aborted ? holdUntil : deadline, holdUntil);
    timer = clock.setTimeout(tick, Math.max(1, next - now));
  };
  // From the time the claim's answer came back, not when it was sent: a slow answer has used up part of the lease.
  schedule(clock.now());

  /** One promise per settlement: the write, its failure as a value, and the count of active leases. */
  const settle = (write: () => Promise<Settlement>): Promise<Settlement> => {
    if (settlement) return settlement;
    clock.clearTimeout(timer);
    settlement = write()
      .catch((error: unknown): Settlement => ({ ok: false, error: error as IdempotencyError }))
      .finally(engine.ended);
    return settlement;
  };

  return new HeldLease<Tx>(scope, key, record.id, reclaimed, {
    signal: () => (controller ??= new AbortController()).signal,
    settled: () => settlement !== undefined,
    onGivenUp: (listener) => void (givenUp = listener),
    complete: (result) => {
      const misused = misuseOf(result);
      if (misused) return misused;
      const declared = result.outcome;
      if (declared === 'release')
        return settle(() => (lapses(held, aborted) ? unknown() : release(held, result.response?.status ?? null)));
      const kind = declared ?? engine.classify(result.response.status);
      // An answer that lets the work run again (retryable, or released), given once the lease was aborted: as `fail`.
      return settle(() =>
        kind === 'failed-retryable' && lapses(held, aborted) ? unknown() : complete(held, expiresAt, result, kind),
      );
    },
    fail: (how) => settle(() => fail(held, expiresAt, lapses(held, aborted), how?.answered === true)),
    release: () => settle(() => release(held)),
    abandon: () => {
      if (settlement) return settlement;
      const abandoned = settle(async () => ({ ok: true, record: null }));
      // The work may still run (that is why it was abandoned): it is told to stop by the holder's own deadline,
      // before the record lapses and a retry can take the key over.
      if (!aborted) {
        const left = Math.max(1, deadline - clock.now());
        timer = clock.setTimeout(() => abort('This attempt was abandoned and its lease ran out.'), left);
      }
      return abandoned;
    },
  });
}

/** What a lease's writes need, fixed when its key is claimed: its engine, its record, and what its events say. */
interface Held<Tx> {
  readonly engine: LeaseContext<Tx>;
  readonly record: IdempotencyRecord;
  readonly claimedAt: number;
  readonly about: KeyEventFields;
}

// The writes that settle a lease, each called through its `settle`. Settling stops the renewals before the write
// starts, so the `expiresAt` a write is given (the last renewal's) is the lease's own until the write is done.

/** A write the token fenced off: another attempt holds the key now. */
function refusedWrite<Tx>({ engine, about }: Held<Tx>, op: StoreOp): Settlement {
  engine.emit({ type: 'stale_write_refused', ...about, op });
  return {
    ok: false,
    error: new IdempotencyError('LEASE_LOST', 'This attempt lost its lease to another; its outcome was not recorded.', {
      retryAfterMs: 0,
    }),
  };
}

function executed<Tx>({ engine, about, claimedAt }: Held<Tx>, outcome: OutcomeKind, status: number | null): void {
  engine.emit({ type: 'executed', ...about, outcome, status, ms: engine.clock.now() - claimedAt });
}

async function release<Tx>(held: Held<Tx>, status: number | null = null): Promise<Settlement> {
  const { store, call } = held.engine;
  const { pk, token } = held.record;
  const released = await call('release', () => store.release({ pk, token }));
  if (!released.ok) return refusedWrite(held, 'release');
  executed(held, 'release', status);
  return { ok: true, record: null };
}

async function complete<Tx>(
  held: Held<Tx>,
  expiresAt: number,
  result: WorkResult<Tx>,
  kind: Exclude<OutcomeKind, 'release'>,
): Promise<Settlement> {
  const { engine, record } = held;
  const { store, clock, call } = engine;
  const { pk, token } = record;
  const { response, resultId, effects } = result;
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
  if (!written.ok) return refusedWrite(held, 'complete');
  executed(held, kind, response.status);
  const completed: IdempotencyRecord = { ...record, ...outcome, expiresAt };
  engine.remember(completed);
  return { ok: true, record: completed };
}

/**
 * Aborted, the work may have had its effect (the signal cancelled it midway, say): under 'reconcile' and
 * 'quarantine' an outcome that lets the next claim run the work unasked is not written, so the key lapses into
 * a takeover instead, where the policy decides.
 */
function lapses<Tx>({ engine }: Held<Tx>, aborted: boolean): boolean {
  return aborted && engine.unknownLapses;
}

/** `lapsing`: what {@link lapses} said when the lease was settled. */
async function fail<Tx>(held: Held<Tx>, expiresAt: number, lapsing: boolean, answered = false): Promise<Settlement> {
  const { engine, record } = held;
  const { store, clock, call } = engine;
  const { pk, token } = record;
  if (lapsing || (answered && engine.unknownLapses)) return unknown();
  // Nothing was promised to the client, so the next attempt may run the work again.
  const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
  const written = await call('complete', () => store.complete({ pk, token, now: clock.now(), outcome: failed }));
  if (!written.ok) return refusedWrite(held, 'complete');
  executed(held, 'failed-retryable', null);
  return { ok: true, record: { ...record, ...failed, expiresAt } };
}

/** `maxHoldMs` passed: the key is failed, retryable (or lapses), and the lease answers why it was given up. */
async function heldTooLong<Tx>(
  held: Held<Tx>,
  expiresAt: number,
  lapsing: boolean,
  error: IdempotencyError,
): Promise<Settlement> {
  await fail(held, expiresAt, lapsing);
  return { ok: false, error };
}

/** A lease given up with its outcome unknown (see {@link lapses}): nothing is written. */
async function unknown(): Promise<Settlement> {
  return { ok: false, error: unknownOutcome() };
}

/** What a {@link HeldLease} delegates to: the closures over one lease's state. */
interface LeaseOps<Tx> {
  signal(): AbortSignal;
  settled(): boolean;
  onGivenUp(listener: GivenUpListener): void;
  complete(result: WorkResult<Tx>): Promise<Settlement>;
  fail(how?: { readonly answered?: boolean }): Promise<Settlement>;
  release(): Promise<Settlement>;
  abandon(): Promise<Settlement>;
}

/**
 * The lease handed out: its key fields own, `signal` and `settled` getters on the prototype. An object literal
 * with getters is built by the runtime with a hidden class of its own every time (≈ 600 B more per lease,
 * bench/allocation.ts); a class shares one.
 */
class HeldLease<Tx> implements Lease<Tx> {
  readonly #ops: LeaseOps<Tx>;
  constructor(
    readonly scope: string,
    readonly key: string,
    readonly id: string,
    readonly reclaimed: boolean,
    ops: LeaseOps<Tx>,
  ) {
    this.#ops = ops;
  }
  get signal(): AbortSignal {
    return this.#ops.signal();
  }
  get settled(): boolean {
    return this.#ops.settled();
  }
  onGivenUp(listener: GivenUpListener): void {
    this.#ops.onGivenUp(listener);
  }
  complete(result: WorkResult<Tx>): Promise<Settlement> {
    return this.#ops.complete(result);
  }
  fail(how?: { readonly answered?: boolean }): Promise<Settlement> {
    return this.#ops.fail(how);
  }
  release(): Promise<Settlement> {
    return this.#ops.release();
  }
  abandon(): Promise<Settlement> {
    return this.#ops.abandon();
  }
}

const OUTCOMES: ReadonlySet<unknown> = new Set(['succeeded', 'failed-final', 'failed-retryable', 'release']);

/** A lease lost or given up under a policy that never reruns blindly: its record lapses `in_progress`. */
function unknownOutcome(): IdempotencyError {
  return new IdempotencyError(
    'LEASE_LOST',
    'This attempt stopped holding its key with the outcome unknown; nothing was recorded, and the next attempt takes it over.',
    { retryAfterMs: 0 },
  );
}

/** Calls a {@link GivenUpListener}, if there is one. */
function tell(listener: GivenUpListener | undefined, error: IdempotencyError): void {
  if (typeof listener === 'function') listener(error);
  else listener?.handleEvent(error);
}

/** What `complete(result)` rejects with when the engine cannot record `result` (see {@link misuse}); else undefined. */
function misuseOf<Tx>(result: WorkResult<Tx>): Promise<never> | undefined {
  const declared = result?.outcome;
  if (declared !== undefined && !OUTCOMES.has(declared)) return misuse(`outcome ${JSON.stringify(declared)}`);
  if (declared === 'release') return undefined;
  // A final outcome without a response would be a record no retry can replay: refuse it at the call.
  if (!isResponse(result?.response)) return misuse('a response { status, headers, body }');
  const { resultId } = result;
  if (resultId !== undefined && resultId !== null && typeof resultId !== 'string') return misuse('resultId');
  return undefined;
}

/** A `complete()` the engine cannot record: rejected at the call, with nothing written and the lease unsettled. */
function misuse(what: string): Promise<never> {
  return Promise.reject(
    new IdempotencyError(
      'CONFIG_INVALID',
      `complete() got an invalid ${what}: it takes { response: { status, headers, body: Uint8Array }, ` +
        `outcome?: 'succeeded' | 'failed-final' | 'failed-retryable' | 'release', resultId?: string }. Nothing was written.`,
    ),
  );
}

/** A response a record can hold: an integer status 100–599, header pairs, body bytes. */
function isResponse(response: StoredResponse | undefined | null): response is StoredResponse {
  return (
    typeof response === 'object' &&
    response !== null &&
    Number.isInteger(response.status) &&
    response.status >= 100 &&
    response.status <= 599 &&
    Array.isArray(response.headers) &&
    response.body instanceof Uint8Array
  );
}
