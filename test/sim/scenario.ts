/**
 * @module What one seed simulates: the processes, the keys and their payloads, every client attempt and when it
 * arrives, the engine's settings, and how hard each kind of fault hits. All drawn from the seed.
 */
import { fingerprint, RECOMMENDED_TTL_MS } from 'idem';
import { Rng } from './prng.js';

/** Simulated time starts here; traces show milliseconds since. */
export const T0 = Date.parse('2026-01-01T00:00:00Z');

export type BackendName = 'memory' | 'sqlite';
/** `own`: the ledger is a separate database keyed by the record id (unique). `shared`: it commits with the completion. */
export type LedgerMode = 'own' | 'shared';
/** Planted defects (./defects.ts): where each lives decides the backend it runs on. */
export const SQL_DEFECTS = [
  'read-then-write-claim',
  'unfenced-complete',
  'unfenced-renew',
  'fingerprint-blind-takeover',
] as const;
export const MEMORY_DEFECTS = ['memory-yielding-claim', 'claim-ignores-expiry', 'renew-ignores-expiry'] as const;
export const ENGINE_DEFECTS = [
  'retryable-503-as-final',
  'renewal-never-started',
  'effects-with-retryable',
  'success-without-record',
] as const;
/** Defects in how the engine or its binding keeps time: each found by the time faults below. */
export const TIME_DEFECTS = [
  'renewals-chained-without-timeout',
  'no-local-deadline',
  'early-answer-records-retryable',
  'abandoned-stream-held-forever',
  'store-call-without-timeout',
] as const;
export type DefectName =
  | (typeof SQL_DEFECTS)[number]
  | (typeof MEMORY_DEFECTS)[number]
  | (typeof ENGINE_DEFECTS)[number]
  | (typeof TIME_DEFECTS)[number];
export const DEFECTS: readonly DefectName[] = [...SQL_DEFECTS, ...MEMORY_DEFECTS, ...ENGINE_DEFECTS, ...TIME_DEFECTS];
/** The backend a planted defect is written for, if any. */
export function defectBackend(defect: DefectName | undefined): BackendName | undefined {
  if ((SQL_DEFECTS as readonly string[]).includes(defect as string)) return 'sqlite';
  if ((MEMORY_DEFECTS as readonly string[]).includes(defect as string)) return 'memory';
  return undefined;
}

/**
 * The statuses the simulated processor's failures are answered with, so a campaign meets every retryable class
 * (docs/DESIGN.md: Failure policy): 5xx, and the 4xx that mean "try again" (408, 425, 429).
 */
export const RETRYABLE_STATUSES = [503, 500, 502, 504, 408, 425, 429] as const;

export type FaultKind =
  | 'crash'
  | 'pause'
  | 'store-delay'
  | 'store-down'
  | 'store-reply-lost'
  | 'response-lost'
  | 'processor-down'
  | 'processor-reply-lost'
  | 'slow-step'
  | 'store-hang'
  | 'renew-stall'
  | 'early-answer'
  | 'client-gone'
  | 'partition';
/** The faults of the first simulator, drawn from the scenario's stream in this order. */
const FIRST_FAULT_KINDS: readonly FaultKind[] = [
  'crash',
  'pause',
  'store-delay',
  'store-down',
  'store-reply-lost',
  'response-lost',
  'processor-down',
  'processor-reply-lost',
  'slow-step',
];
/**
 * Faults in time, drawn from their own stream (so the first ones' draws stay as they were): a store call that
 * never answers; a renewal that never answers while other calls do; an answer sent (a timeout middleware's 503)
 * while the handler still runs, stalled; a client that leaves while the answer streams to it; and, scheduled
 * like crashes, a process whose store calls all go unanswered for a while (a partition, a black-holed pool).
 */
export const TIME_FAULT_KINDS: readonly FaultKind[] = [
  'store-hang',
  'renew-stall',
  'early-answer',
  'client-gone',
  'partition',
];
/** Faults at a fixed time in the seed's schedule (their rate is how many), not drawn at each decision point. */
export const SCHEDULED_FAULT_KINDS: readonly FaultKind[] = ['crash', 'pause', 'partition'];
export const FAULT_KINDS: readonly FaultKind[] = [...FIRST_FAULT_KINDS, ...TIME_FAULT_KINDS];

export interface SimConfig {
  /** Default: drawn from the seed (the backend a planted defect is written for, when it is written for one). */
  readonly backend?: BackendName | undefined;
  /** Default: drawn from the seed. */
  readonly ledger?: LedgerMode | undefined;
  /** A planted defect, to prove the simulator finds it. Default none: the real stores, unchanged. */
  readonly defect?: DefectName | undefined;
  /** The largest offset of a process's clock from true time, either way. Default 1000 ms. */
  readonly maxSkewMs?: number;
  /** Let a fifth of the seeds keep records for only a few leases. Default true. */
  readonly shortTtl?: boolean;
}

/** A charge request's body. `tok_chargeDeclined` is refused (402); `tok_invalid` is refused before the work starts. */
export interface Payload {
  readonly amount: number;
  readonly currency: string;
  readonly source: 'tok_visa' | 'tok_chargeDeclined' | 'tok_invalid';
}

export interface KeyPlan {
  readonly index: number;
  readonly scope: string;
  readonly key: string;
  readonly payload: Payload;
  readonly fingerprint: string;
  /** How many times its client retries on its own (after a timeout, a lost answer, a 409, a 503…). */
  readonly retries: number;
  /** How long its client waits for an answer before it gives up on that attempt and retries. */
  readonly timeoutMs: number;
}

export interface AttemptPlan {
  readonly index: number;
  readonly keyIndex: number;
  /** Milliseconds after the simulation starts. */
  readonly at: number;
  readonly process: number;
  /** Same key, different payload (so a different fingerprint). */
  readonly tampered: boolean;
  readonly payload: Payload;
  readonly fingerprint: string;
}

/**
 * A process-level fault at a fixed time: a crash (then a restart `ms` later), a freeze lasting `ms`, or a
 * partition: for `ms`, every store call the process sends goes unanswered, for ever.
 */
export interface ScheduledFault {
  /** `c0`, `c1`… for crashes, `p0`… for pauses, `n0`… for partitions: how a shrunk run names the ones it leaves out. */
  readonly id: string;
  readonly kind: 'crash' | 'pause' | 'partition';
  readonly at: number;
  readonly process: number;
  readonly ms: number;
}

/** Faults an exhaustive schedule may contain, each at most its budget's count of times. */
export type BudgetKind =
  'crash' | 'lapse' | 'stall' | 'delay' | 'clock-step' | 'processor-down' | 'early-answer' | 'client-gone';

/** A fixed scenario of the exhaustive mode (test/sim/explore.ts): no latency, fixed durations, faults as choices. */
export interface ExhaustiveSettings {
  /** How long the handler's processor call takes; every other handler step and every wire leg takes 0 ms. */
  readonly workMs: number;
  readonly budget: Readonly<Partial<Record<BudgetKind, number>>>;
  /** How far a clock step moves a process's clock (forward). */
  readonly clockStepMs: number;
  /** The status a processor outage answers. */
  readonly downStatus: number;
}

export interface Scenario {
  readonly seed: number;
  /** Set for a scenario of the exhaustive mode: a driver takes every choice (see ExhaustiveSettings). */
  readonly exhaustive?: ExhaustiveSettings;
  readonly backend: BackendName;
  readonly ledger: LedgerMode;
  readonly defect: DefectName | undefined;
  readonly maxSkewMs: number;
  readonly leaseMs: number;
  readonly renewEveryMs: number;
  /** How much earlier than the store the holder gives its lease up (the engine's default for these settings). */
  readonly leaseMarginMs: number;
  /** Longest a store call may take before the engine gives it up: drawn, or the default 5 s. */
  readonly storeTimeoutMs: number;
  /** Longest a lease is held, settled or not: a few leases, so work that never ends is given up within a run. */
  readonly maxHoldMs: number;
  readonly ttlMs: number;
  readonly waitForOutcomeMs: number;
  /** Does the handler check `signal.aborted` before its ledger write? Some do, some do not. */
  readonly honoursAbort: boolean;
  /**
   * Shared ledger: does the handler hand its ledger write (a "failed attempt" row) to `effects` with a retryable
   * answer too? The engine must drop effects unless the outcome is final (see simulator.ts for when this is on).
   */
  readonly effectsOnFailure: boolean;
  /**
   * Store calls that reach the store within this many ms of each other run in one turn of the event loop, so
   * a store whose method yields (an `await`) between its read and its write interleaves with the others, as
   * concurrent requests in one server process do. 0: only calls arriving at the same millisecond.
   */
  readonly batchWindowMs: number;
  readonly processes: ReadonlyArray<{ readonly name: string; readonly skewMs: number }>;
  readonly keys: readonly KeyPlan[];
  readonly attempts: readonly AttemptPlan[];
  /** Per decision point, the probability of each fault (0 when the seed leaves that kind out). */
  readonly faults: Readonly<Record<FaultKind, number>>;
  /** Crashes and pauses, aimed at the processes the planned attempts go to, while they are busy. */
  readonly schedule: readonly ScheduledFault[];
}

/**
 * Hex fingerprint of `POST /v1/charges` with this JSON body, as the HTTP layer computes it.
 *
 * @example
 * payloadFingerprint({ amount: 500, currency: 'usd', source: 'tok_visa' })
 */
export function payloadFingerprint(payload: Payload): string {
  const body = new TextEncoder().encode(JSON.stringify(payload));
  return fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body });
}

/**
 * Fault intensities: each kind is switched on for about half the seeds ("swarm testing"), at a drawn rate —
 * per decision point for most kinds; for crashes and pauses, the number of them in the seed's fault schedule.
 */
const FAULT_RATES: Readonly<Record<FaultKind, readonly [number, number]>> = {
  crash: [1, 3],
  pause: [1, 3],
  'store-delay': [0.01, 0.12],
  'store-down': [0.01, 0.1],
  'store-reply-lost': [0.01, 0.1],
  'response-lost': [0.05, 0.4],
  'processor-down': [0.05, 0.35],
  'processor-reply-lost': [0.03, 0.2],
  'slow-step': [0.05, 0.35],
  'store-hang': [0.01, 0.06],
  'renew-stall': [0.05, 0.3],
  'early-answer': [0.05, 0.3],
  'client-gone': [0.05, 0.3],
  partition: [1, 2],
};

/**
 * Draws the scenario of one seed.
 *
 * @example
 * const scenario = makeScenario(7, { backend: 'sqlite' })
 */
export function makeScenario(seed: number, config: SimConfig = {}): Scenario {
  const rng = new Rng(seed, 'scenario');
  const { maxSkewMs = 1000 } = config;
  const defect = config.defect;
  const drawnBackend: BackendName = rng.chance(0.5) ? 'memory' : 'sqlite';
  const backend = config.backend ?? defectBackend(defect) ?? drawnBackend;
  const ledger = config.ledger ?? (rng.chance(0.5) ? 'own' : 'shared');
  const leaseMs = rng.pick([2_000, 5_000, 10_000]);
  const renewEveryMs = rng.chance(0.5)
    ? Math.floor(leaseMs / 3)
    : rng.int(Math.floor(leaseMs / 5), Math.floor(leaseMs / 2));
  const waitForOutcomeMs = rng.chance(0.7) ? 0 : rng.int(100, 2 * leaseMs);
  const honoursAbort = rng.chance(0.5);
  // A fifth of the seeds keep records for only 2–5 leases, so records expire while clients still retry, and slow
  // work outlives its record's first expiresAt (renewals must carry it forward: RenewRequest.expiresAt).
  const shortTtl = rng.chance(0.2) && (config.shortTtl ?? true);
  const ttlMs = shortTtl ? leaseMs * rng.int(2, 5) : RECOMMENDED_TTL_MS.min;
  const effectsOnFailure = rng.chance(0.5);
  const batchWindowMs = rng.chance(0.75) ? rng.int(1, 30) : 0;

  const processCount = rng.int(2, 4);
  const processes = Array.from({ length: processCount }, (_, i) => ({
    name: `p${i + 1}`,
    skewMs: maxSkewMs === 0 ? 0 : rng.int(-maxSkewMs, maxSkewMs),
  }));

  const keyCount = rng.int(1, 3);
  const keys: KeyPlan[] = [];
  for (let index = 0; index < keyCount; index++) {
    // The same key string under two scopes must stay two records.
    const scope = rng.chance(0.7) ? 'acct_a' : 'acct_b';
    const key = rng.chance(0.3) ? 'key-1' : `key-${index + 1}`;
    if (keys.some((k) => k.scope === scope && k.key === key)) continue;
    const payload: Payload = {
      amount: rng.int(1, 100) * 100,
      currency: 'usd',
      source: rng.chance(0.85) ? 'tok_visa' : rng.chance(0.6) ? 'tok_chargeDeclined' : 'tok_invalid',
    };
    keys.push({
      index: keys.length,
      scope,
      key,
      payload,
      fingerprint: payloadFingerprint(payload),
      retries: rng.int(0, 4),
      timeoutMs: rng.int(Math.floor(leaseMs / 2), 3 * leaseMs),
    });
  }

  const tamperRate = rng.chance(0.5) ? rng.next() * 0.4 : 0;
  const attempts: AttemptPlan[] = [];
  for (const plan of keys) {
    const count = rng.int(1, 6);
    let at = rng.int(0, 500);
    for (let i = 0; i < count; i++) {
      if (i > 0) {
        const shape = rng.next();
        if (shape < 0.1)
          at += 0; // a double submit: the same request twice at once (two connections, a retrying proxy)
        else if (shape < 0.3)
          at += rng.int(0, 5); // a burst: a double click
        else if (shape < 0.6)
          at += rng.int(0, Math.floor(leaseMs / 2)); // a quick retry while the first runs
        else if (shape < (shortTtl ? 0.85 : 0.97))
          at += rng.int(Math.floor(leaseMs / 2), 2 * leaseMs); // after a lease or two
        else at += ttlMs + rng.int(-2 * maxSkewMs, 2 * maxSkewMs); // a TTL later (a day, or a few leases): the record expires
      }
      const tampered = rng.chance(tamperRate);
      const payload: Payload = tampered
        ? rng.chance(0.7)
          ? { ...plan.payload, amount: plan.payload.amount + rng.int(1, 99) }
          : { ...plan.payload, source: plan.payload.source === 'tok_visa' ? 'tok_chargeDeclined' : 'tok_visa' }
        : plan.payload;
      attempts.push({
        index: attempts.length,
        keyIndex: plan.index,
        at,
        process: rng.int(0, processCount - 1),
        tampered,
        payload,
        fingerprint: tampered ? payloadFingerprint(payload) : plan.fingerprint,
      });
    }
  }
  attempts.sort((a, b) => a.at - b.at || a.index - b.index);

  const faults = {} as Record<FaultKind, number>;
  for (const kind of FIRST_FAULT_KINDS) {
    const [lo, hi] = FAULT_RATES[kind];
    faults[kind] = rng.chance(0.5) ? lo + rng.next() * (hi - lo) : 0;
  }
  const time = new Rng(seed, 'time');
  for (const kind of TIME_FAULT_KINDS) {
    const [lo, hi] = FAULT_RATES[kind];
    faults[kind] = time.chance(0.5) ? lo + time.next() * (hi - lo) : 0;
  }
  const storeTimeoutMs = time.chance(0.5) ? 5_000 : time.int(Math.floor(leaseMs / 4), 2 * leaseMs);
  const maxHoldMs = leaseMs * time.int(3, 10);
  const leaseMarginMs = Math.floor(Math.min(leaseMs / 10, (leaseMs - renewEveryMs) / 2));
  // A record kept a few leases is there to be outlived by slow work: always some, in those seeds.
  if (shortTtl && faults['slow-step'] === 0) faults['slow-step'] = 0.2;
  const schedule: ScheduledFault[] = [];
  for (const kind of ['crash', 'pause'] as const) {
    for (let i = 0; i < Math.round(faults[kind]); i++) {
      const target = rng.pick(attempts);
      schedule.push({
        id: `${kind[0]}${i}`,
        kind,
        at: target.at + rng.int(0, kind === 'crash' ? leaseMs : Math.floor(leaseMs / 2)),
        process: target.process,
        ms: kind === 'crash' ? rng.int(0, 2 * leaseMs) : leaseMs + rng.int(0, leaseMs),
      });
    }
  }
  for (let i = 0; i < Math.round(faults.partition); i++) {
    const target = time.pick(attempts);
    const at = target.at + time.int(0, Math.floor(leaseMs / 2));
    schedule.push({
      id: `n${i}`,
      kind: 'partition',
      at,
      process: target.process,
      ms: time.int(leaseMs / 2, 3 * leaseMs),
    });
  }

  return {
    seed,
    backend,
    ledger,
    defect,
    maxSkewMs,
    leaseMs,
    renewEveryMs,
    leaseMarginMs,
    storeTimeoutMs,
    maxHoldMs,
    ttlMs,
    waitForOutcomeMs,
    honoursAbort,
    effectsOnFailure,
    batchWindowMs,
    processes,
    keys,
    attempts,
    faults,
    schedule,
  };
}
