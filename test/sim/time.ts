/**
 * @module The invariants about time: a running handler's lease is renewed.
 */
import type { Checker } from './checker.js';
import { T0, type Scenario } from './scenario.js';
import type { Incarnation } from './world.js';

/** A handler running on behalf of an attempt. */
interface Work {
  readonly inc: Incarnation;
  readonly label: string;
  /** Its start, or its last renewal's reply (the engine schedules the next renewal from there). */
  base: number;
  lastRenewSent: number | undefined;
  /** The handler returned or threw, its process died, or a renewal was refused (the lease is gone). */
  ended: boolean;
}

/**
 * What the checker needs to know of running work, and the invariants it states about time.
 *
 * @example
 * const time = new TimeChecker(checker, scenario)
 * time.workStarted(incarnation, 'a3', now)
 */
export class TimeChecker {
  readonly #checker: Checker;
  readonly #s: Scenario;
  readonly #works = new Map<string, Work>();

  constructor(checker: Checker, scenario: Scenario) {
    this.#checker = checker;
    this.#s = scenario;
  }

  workStarted(inc: Incarnation, label: string, now: number): void {
    this.#works.set(label, { inc, label, base: now, lastRenewSent: undefined, ended: false });
  }

  workEnded(label: string): void {
    const work = this.#works.get(label);
    if (work) work.ended = true;
  }

  /** A process crashed: its work is gone with it. */
  crashed(inc: Incarnation): void {
    for (const work of this.#works.values()) if (work.inc === inc) work.ended = true;
  }

  renewalSent(label: string, now: number): void {
    const work = this.#works.get(label);
    if (work) work.lastRenewSent = now;
  }

  /** A renewal's reply reached its live process: `ok` false if the store refused it (the lease is gone). */
  renewalAnswered(label: string, now: number, ok: boolean | undefined): void {
    const work = this.#works.get(label);
    if (!work) return;
    work.base = now;
    if (ok === false) work.ended = true;
  }

  /**
   * Before each event. The lease is kept by renewal (docs/DESIGN.md: Lease): a handler running on a live process
   * that has not been frozen meanwhile must have had a renewal sent within `renewEveryMs` of its start or of its
   * last renewal's reply. Checked before each event, so the event that ends the work cannot hide a renewal that
   * never came.
   */
  beforeEvent(now: number): void {
    const every = this.#s.renewEveryMs;
    for (const work of this.#works.values()) {
      if (work.ended || !work.inc.alive || work.inc.pausedUntil >= now) continue;
      const base = Math.max(work.base, work.inc.pausedUntil);
      if (now <= base + every) continue;
      if (work.lastRenewSent !== undefined && work.lastRenewSent >= base) continue;
      this.#checker.fail(
        'lease-not-renewed',
        `${work.label} on ${work.inc.label}: no renewal sent between ${base - T0} ms and ${now - T0} ms (renew every ${every} ms)`,
      );
      return;
    }
  }
}
