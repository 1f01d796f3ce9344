/**
 * @module What the parts of the simulator share: the simulated process, the event, the client's attempt, and the
 * context (`Sim`) through which the store's wire, the handler and the clients reach the one simulated world.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Clock, Engine, IdempotencyRecord, RunResult } from 'idem';
import type { Backend } from './backend.js';
import type { Checker } from './checker.js';
import { Rng } from './prng.js';
import type { FaultKind, Payload, Scenario } from './scenario.js';
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
  at(at: number, owner: Incarnation | undefined, fire: () => Promise<void> | void, arrive?: Event['arrive']): Event;
  cancel(event: Event | undefined): void;
  /** Does the request at hand (default: the current one) suffer a fault of this kind now? Its id, or undefined. */
  fault(kind: FaultKind, attempt?: Attempt): string | undefined;
  log(line: () => string): void;
  count(path: string): void;
}
