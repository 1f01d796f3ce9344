/**
 * @module What the parts of the simulator share: the simulated process, the event, the client's attempt, and the
 * context (`Sim`) through which the store's wire, the handler and the clients reach the one simulated world.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { recordPk, type Clock, type Engine, type IdempotencyRecord, type RunResult } from 'idem';
import type { Backend } from './backend.js';
import type { Checker, Violation } from './checker.js';
import { Rng } from './prng.js';
import { SCHEDULED_FAULT_KINDS, type FaultKind, type Payload, type Scenario } from './scenario.js';
import type { TimeChecker } from './time.js';

export interface Incarnation {
  readonly proc: number;
  readonly label: string;
  alive: boolean;
  /** Frozen (a GC pause, a VM migration) until then: it runs nothing, and its timers fire late. */
  pausedUntil: number;
  /** Cut off from the store until then: every store call it sends meanwhile goes unanswered. */
  partitionedUntil: number;
  engine: Engine<unknown>;
  readonly clock: Clock;
  readonly inflight: Map<string, Attempt>;
}

/** What an event does when it fires. */
export type Fire = () => Promise<void> | void;

export interface Event {
  readonly seq: number;
  at: number;
  /** Dropped when this incarnation crashes. Undefined for clients, restarts, and requests on the wire. */
  readonly owner: Incarnation | undefined;
  readonly fire: () => Promise<void> | void;
  /**
   * A store call reaching the store: its synchronous part (the backend call is invoked here, and runs up to its
   * first `await`), returning the rest. Calls arriving within the seed's batch window start in one turn, so a
   * store that yields inside a call interleaves with the others.
   */
  readonly arrive?: () => () => Promise<Landed | undefined>;
  /** What the event is, for an exhaustive schedule's steps and its state hash (`reply claim`, `timer 1000 ms`). */
  readonly what?: string | undefined;
  /** The request it is for (the current one when it was set), if any. */
  readonly by?: string | undefined;
}

/** What a store call saw once the call returned: for the check of writes that landed after a yield. */
export interface Landed {
  readonly pk: string;
  /** The record right after the call's synchronous part (undefined for a `get`, which writes nothing). */
  readonly after: IdempotencyRecord | null | undefined;
}

/** One client request: what it sends, and its own stream of draws. */
export interface Attempt {
  readonly label: string;
  readonly keyIndex: number;
  readonly process: number;
  readonly payload: Payload;
  readonly fingerprint: string;
  readonly tampered: boolean;
  /** A settling retry: no faults, no client timeout, no further retries. */
  readonly settle?: boolean;
  readonly rng: Rng;
  readonly ids: Rng;
  faults: number;
  /** The handler's next step lasts until then at least: it is stuck on a slow call (what a timeout middleware is for). */
  stallUntil?: number | undefined;
  /** The effects the handler last returned (for the planted `effects-with-retryable`). */
  effects?: ((tx: unknown) => unknown) | undefined;
}

/**
 * A client attempt with its own streams of draws, named after its label.
 *
 * @example
 * const retry = makeAttempt(seed, 'a3.r', { ...attempt, process: 2 })
 */
export function makeAttempt(seed: number, label: string, from: Omit<Attempt, 'label' | 'rng' | 'ids' | 'faults'>) {
  return { ...from, label, rng: new Rng(seed, `request ${label}`), ids: new Rng(seed, `ids ${label}`), faults: 0 };
}

/** What a client saw of one attempt. */
export type Seen =
  | { kind: 'answer'; result: RunResult }
  | { kind: 'error'; code: string; retryAfterMs: number | undefined }
  /** A middleware answered (a retryable status) while the handler ran. */
  | { kind: 'early'; status: number }
  | { kind: 'nothing' };

/** The request on whose behalf the engine is running right now. */
export const current = new AsyncLocalStorage<Attempt>();

/** The one simulated world, as its parts see it. */
export interface Sim {
  readonly scenario: Scenario;
  readonly backend: Backend;
  readonly checker: Checker;
  readonly time: TimeChecker;
  /** Simulated true time (every process's clock is this plus its skew). */
  readonly now: number;
  at(at: number, owner: Incarnation | undefined, fire: Fire, arrive?: Event['arrive'], what?: string): Event;
  cancel(event: Event | undefined): void;
  /** Does the request at hand (default: the current one) suffer a fault of this kind now? Its id, or undefined. */
  fault(kind: FaultKind, attempt?: Attempt): string | undefined;
  log(line: () => string): void;
  count(path: string): void;
}

/** The world as an exhaustive driver sees it at a choice: what it hashes, and what it may strike. */
export interface DriverView {
  readonly scenario: Scenario;
  readonly backend: Backend;
  readonly now: number;
  readonly incarnations: readonly Incarnation[];
  readonly pending: readonly Event[];
  /** The trace so far (the exhaustive mode always traces). */
  readonly lines: readonly string[];
  /** The settling retries run: no more faults. */
  readonly settling: boolean;
  offset(proc: number): number;
}

/** A step an exhaustive driver takes: pending events (one, or store calls started in one turn), or a fault. */
export type Choice =
  | { readonly kind: 'events'; readonly events: readonly Event[]; readonly label: string }
  | { readonly kind: 'fault'; readonly fault: DriverFault; readonly process: number; readonly label: string }
  /** Stop the run here: its state was explored already (or the bound is reached). */
  | { readonly kind: 'stop' };
/** The faults a driver injects between events: a crash, a lease lapse (a partition of a lease), a clock step. */
export type DriverFault = 'crash' | 'lapse' | 'clock-step';

/**
 * Takes the scheduler's every nondeterministic choice instead of the seed (test/sim/explore.ts): which pending
 * event runs next among those due at the earliest time, whether a fault strikes between events, and whether a
 * fault fires at a decision point (`Sim.fault`).
 */
export interface Driver {
  choose(candidates: readonly Event[], world: DriverView): Promise<Choice>;
  fault(kind: FaultKind, attempt: Attempt): boolean;
}

export interface RunOptions {
  /**
   * Faults to leave out: a scheduled one by its id (`c0`, `p1`), or one drawn by a request by `<request>#<n>`
   * (its n-th fault, e.g. `a3#0`). How a failure is shrunk.
   */
  readonly disabledFaults?: ReadonlySet<string>;
  /** Planned client attempts (by index) to leave out. */
  readonly droppedAttempts?: ReadonlySet<number>;
  /** Clients' own retries to leave out, by label (`a3.r` is a3's retry, `a3.r.r` the retry of that). */
  readonly droppedRetries?: ReadonlySet<string>;
  /** Record a human-readable trace. Off in campaigns (a failing seed is re-run with it on). */
  readonly trace?: boolean;
  /** Events before the run is declared stuck. Default 20,000. */
  readonly maxSteps?: number;
  /** Run this fixed scenario instead of the seed's (the exhaustive mode's small scenarios). */
  readonly scenario?: Scenario;
  /** Take every scheduling and fault choice from this driver instead of the seed (test/sim/explore.ts). */
  readonly driver?: Driver;
}

export interface AppliedFault {
  readonly id: string;
  readonly kind: FaultKind;
}

export interface SimResult {
  readonly seed: number;
  readonly scenario: Scenario;
  readonly violation: Violation | undefined;
  readonly trace: readonly string[];
  /** Faults that happened (not left out), in order. */
  readonly faults: readonly AppliedFault[];
  /** Planned attempts that were not dropped. */
  readonly attempts: readonly number[];
  /** Clients' own retries that were sent. */
  readonly retries: readonly string[];
  /** Client requests that reached a live process (the settling retries included). */
  readonly requests: number;
  readonly steps: number;
  /** How often each path was taken: engine events (`executed`, `takeover`, `replayed`, …) and record lives. */
  readonly coverage: Readonly<Record<string, number>>;
}

/** The trace's header lines: the settings, the processes and their clocks, the keys, the fault rates. */
export function header(s: Scenario): string[] {
  const rates = Object.entries(s.faults).filter(([k, p]) => p > 0 && !SCHEDULED_FAULT_KINDS.includes(k as FaultKind));
  return [
    `seed ${s.seed}: ${s.backend} store, ${s.ledger} ledger${s.defect ? `, PLANTED DEFECT ${s.defect}` : ''}; ` +
      `lease ${s.leaseMs} ms, renew every ${s.renewEveryMs} ms, wait-for-outcome ${s.waitForOutcomeMs} ms, ` +
      `handler ${s.honoursAbort ? 'honours' : 'ignores'} abort`,
    `processes: ${s.processes.map((p) => `${p.name} (clock ${p.skewMs >= 0 ? '+' : ''}${p.skewMs} ms)`).join(', ')}`,
    `keys: ${s.keys.map((k) => `${recordPk(k.scope, k.key)} ${JSON.stringify(k.payload)}`).join('; ')}`,
    `fault rates: ${rates.map(([k, p]) => `${k} ${p.toFixed(3)}`).join(', ') || 'none'}`,
  ];
}

// Short-TTL seeds create engines with ttlMs under the production minimum, which warns once per engine. The
// simulator creates thousands; the warning says nothing here.
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = (warning: string | Error, ...rest: unknown[]) => {
  const options = rest[0];
  if (typeof options === 'object' && options !== null && (options as { code?: unknown }).code === 'IDEM_SHORT_TTL')
    return;
  Reflect.apply(emitWarning, process, [warning, ...rest]);
};
