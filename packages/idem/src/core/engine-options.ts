/** @module The engine's options: their defaults, and the checks that refuse a bad one by name before anything runs. */
import { isClock, systemClock, type Clock } from './clock.js';
import { configError } from './errors.js';
import type { IdempotencyEvent } from './events.js';
import type { IdempotencyStore } from './record.js';
import { heldKeyDetail, takeoverPolicy, type TakeoverOptions } from './takeover.js';

/** The production range recommended for `ttlMs` (docs/DESIGN.md: Expiry). Shorter is allowed, with a warning. */
export const RECOMMENDED_TTL_MS = { min: 86_400_000, max: 28 * 86_400_000 } as const;

export interface EngineOptions<Tx = never> extends TakeoverOptions {
  readonly store: IdempotencyStore<Tx>;
  /** How long a record lives. Default 24 h. */
  readonly ttlMs?: number;
  /** How long a claim holds the key before another attempt may take it over. Default 10 s; renewed while the work runs. */
  readonly leaseMs?: number;
  /** How often the lease is renewed while the work runs. Default `leaseMs / 3`. */
  readonly renewEveryMs?: number;
  /**
   * How much earlier than the store the holder gives its lease up, on its own clock: room for clock drift between
   * servers (docs/DESIGN.md: Lease). Default `leaseMs / 10`, at most half of `leaseMs − renewEveryMs`.
   */
  readonly leaseMarginMs?: number;
  /** Longest any store call may take before it counts as failed (`STORE_UNAVAILABLE`). Default 5 s. */
  readonly storeTimeoutMs?: number;
  /**
   * Longest a lease is held, settled or not. Then the work's signal aborts (`LEASE_LOST`) and the key is settled
   * `failed`, retryable, so work that never ends cannot hold its key forever. Default 5 minutes.
   */
  readonly maxHoldMs?: number;
  /** Instead of answering 409 at once, wait up to this long for the in-flight attempt's outcome. Default 0. */
  readonly waitForOutcomeMs?: number;
  /**
   * Keep up to this many terminal records (succeeded, or failed and final) in this process, so a hot replay or
   * mismatch costs no store round trip (docs/DESIGN.md: Round-trip budget). Safe because a terminal record cannot
   * change before it expires; `in_progress` and retryable failures are never kept. A record deleted behind the
   * store's back is still replayed here until its `expiresAt`. Default 0 (off).
   */
  readonly cacheSize?: number;
  readonly clock?: Clock;
  /** Makes fencing tokens and record ids. Default `crypto.randomUUID`; inject a seeded one to replay a simulation. */
  readonly generateId?: () => string;
  readonly onEvent?: (event: IdempotencyEvent) => void;
}

/** {@link EngineOptions} with every default filled in and checked, and what the takeover options make. */
export interface EngineSettings<Tx> {
  readonly store: IdempotencyStore<Tx>;
  readonly ttlMs: number;
  readonly leaseMs: number;
  readonly renewEveryMs: number;
  readonly leaseMarginMs: number;
  readonly storeTimeoutMs: number;
  readonly maxHoldMs: number;
  readonly waitForOutcomeMs: number;
  readonly cacheSize: number;
  readonly clock: Clock;
  readonly generateId: () => string;
  readonly onEvent: ((event: IdempotencyEvent) => void) | undefined;
  /** What to do with a lease that took over a lapsed one; undefined under `'rerun'` (core/takeover.ts). */
  readonly onTakeover: ReturnType<typeof takeoverPolicy>;
  /** What an `IN_FLIGHT` refusal says about the key held. */
  readonly inUse: string;
}

/** Fills in the defaults and checks every option, with errors that name the option (`createEngine` calls it first). */
export function engineSettings<Tx>({
  store,
  ttlMs = RECOMMENDED_TTL_MS.min,
  leaseMs = 10_000,
  renewEveryMs = Math.max(1, Math.floor(leaseMs / 3)),
  leaseMarginMs = Math.floor(Math.min(leaseMs / 10, (leaseMs - renewEveryMs) / 2)),
  storeTimeoutMs = 5_000,
  maxHoldMs = 300_000,
  waitForOutcomeMs = 0,
  cacheSize = 0,
  clock = systemClock,
  generateId = () => crypto.randomUUID(),
  onEvent,
  ...policy
}: EngineOptions<Tx>): EngineSettings<Tx> {
  if (typeof store?.claim !== 'function') throw configError('store', 'an IdempotencyStore');
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) throw configError('ttlMs', 'a positive whole number of ms', ttlMs);
  for (const [name, value] of [
    ['leaseMs', leaseMs],
    ['renewEveryMs', renewEveryMs],
    ['storeTimeoutMs', storeTimeoutMs],
    ['maxHoldMs', maxHoldMs],
  ] as const) {
    // Each is a timer's delay: past 2^31 − 1 ms a timer fires at once.
    if (!Number.isInteger(value) || value <= 0 || value > MAX_TIMER_MS)
      throw configError(name, `a whole number of ms from 1 to ${MAX_TIMER_MS}`, value);
  }
  if (leaseMs < 3) throw configError('leaseMs', 'at least 3 ms (renewals come every leaseMs / 3)', leaseMs);
  if (!isClock(clock)) throw configError('clock', 'a Clock { now, setTimeout, clearTimeout }');
  if (renewEveryMs >= leaseMs) throw configError('renewEveryMs', `less than leaseMs (${leaseMs})`, renewEveryMs);
  if (!Number.isFinite(leaseMarginMs) || leaseMarginMs < 0 || leaseMarginMs >= leaseMs - renewEveryMs)
    throw configError(
      'leaseMarginMs',
      `at least 0 and less than leaseMs − renewEveryMs (${leaseMs - renewEveryMs})`,
      leaseMarginMs,
    );
  if (ttlMs <= leaseMs) throw configError('ttlMs', `greater than leaseMs (${leaseMs})`, ttlMs);
  if (!Number.isSafeInteger(cacheSize) || cacheSize < 0)
    throw configError('cacheSize', 'a non-negative integer', cacheSize);
  if (typeof generateId !== 'function') throw configError('generateId', 'a function () => string', generateId);
  if (!Number.isFinite(waitForOutcomeMs) || waitForOutcomeMs < 0)
    throw configError('waitForOutcomeMs', 'a non-negative number', waitForOutcomeMs);
  const onTakeover = takeoverPolicy(policy, clock, { maxHoldMs, leaseMs });
  const inUse = heldKeyDetail(policy.takeover);
  if (ttlMs < RECOMMENDED_TTL_MS.min)
    warn(`Idem: ttlMs ${ttlMs} is under the 24 h production minimum; fine for tests and the lab.`, 'IDEM_SHORT_TTL');
  if (onEvent !== undefined && typeof onEvent !== 'function')
    throw configError('onEvent', 'a function (event) => void', onEvent);
  return {
    store,
    ttlMs,
    leaseMs,
    renewEveryMs,
    leaseMarginMs,
    storeTimeoutMs,
    maxHoldMs,
    waitForOutcomeMs,
    cacheSize,
    clock,
    generateId,
    onEvent,
    onTakeover,
    inUse,
  };
}

/** The longest delay a timer takes (2^31 − 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2_147_483_647;

/** A warning through Node's `process.emitWarning` where there is one (so `--no-warnings` silences it), else the console. */
function warn(message: string, code: string): void {
  const emit = (globalThis as { process?: { emitWarning?: (m: string, o: { type: string; code: string }) => void } })
    .process?.emitWarning;
  if (typeof emit === 'function') emit(message, { type: 'IdemWarning', code });
  else console.warn(`${code}: ${message}`);
}
