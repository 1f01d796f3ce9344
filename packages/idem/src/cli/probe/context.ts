/**
 * @module What every check is given: the settings it reads, the first answer it compares against, and the means
 * to send, count and report.
 */
import type { Requester } from './http.js';
import type { Answer, Check, CheckId } from './model.js';

/** What `fn` returned, and the side effects it caused (the count URL's growth), or null when not counted. */
export interface Measured<T> {
  readonly value: T;
  readonly delta: number | null;
}

export interface CheckContext {
  readonly body: string;
  readonly tamperedBody: string;
  readonly concurrency: number;
  readonly delayHeader: readonly [string, string] | undefined;
  readonly keyHeader: string;
  readonly replayHeader: string;
  /** The first request's key and its answer: the baseline every other check compares against. */
  readonly key: string;
  readonly first: Answer;
  /** False for a check skipped with `--skip`: a function that runs two checks adds only the wanted ones. */
  wants(id: CheckId): boolean;
  add(check: Check): void;
  send: Requester['send'];
  /** Runs `fn` between two counts. */
  measured<T>(fn: () => Promise<T>): Promise<Measured<T>>;
  /** The answer carries the replay marker (`Idempotent-Replayed: true`). */
  isReplay(answer: Answer): boolean;
}

/** One entry of the probe's table of checks: the ids it reports, and the function that runs them. */
export interface CheckSpec {
  readonly ids: readonly CheckId[];
  readonly run: (context: CheckContext) => Promise<void>;
}

/** `; 2 side effects`, or nothing when not counted. */
export function effects(delta: number | null): string {
  return delta === null ? '' : `; ${delta} side effect${delta === 1 ? '' : 's'}`;
}
