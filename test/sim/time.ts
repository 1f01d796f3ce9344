/**
 * @module The invariants about time (docs/DESIGN.md: Lease, the timing rule), checked as work starts, as renewals
 * leave, and before every event:
 *
 * - `lease-not-renewed`: a lease its holder still keeps (the work or its answer still running, not settled, not
 *   lost) on a live process that is not frozen gets a renewal sent every `renewEveryMs`, whether or not the last
 *   one answered;
 * - `concurrent-work`: two handlers of one key never run at once while both their signals are live — the holder
 *   must have aborted its work (its own clock) before the store lets another attempt take the key over. Excused:
 *   a holder whose process froze while it ran (a zombie: fencing's case, not the clock's), and a taker whose clock
 *   runs `leaseMarginMs` or more ahead of the holder's (beyond the margin the rule does not promise anything);
 * - `key-held-forever`: no renewal leaves its holder later than `maxHoldMs` after the work began, plus one lease
 *   (and any time its process spent frozen);
 * - `request-hung`: the engine's own part of a request (everything but the handler and the answer's stream) ends
 *   within `waitForOutcomeMs` plus ten store timeouts: a store call that never answers is given up.
 */
import type { Checker } from './checker.js';
import { T0, type Scenario } from './scenario.js';
import type { Incarnation } from './world.js';

/** A lease granted to an attempt, from the start of its work. */
interface Held {
  readonly inc: Incarnation;
  readonly label: string;
  readonly pk: string;
  /** When the work began (simulated true time). */
  readonly start: number;
  /** The order in which the store granted its claim, among every claim of the run. */
  readonly grant: number;
  /** The work's start, or the last renewal its holder sent. */
  lastSent: number;
  /** Its holder keeps it: not settled, not lost, its process alive. */
  renewing: boolean;
  /** The handler runs with a live signal. */
  running: boolean;
  /** The handler runs. */
  handling: boolean;
  /** Its process froze while the handler ran. */
  frozen: boolean;
  /** How long its process was frozen since the work began. */
  pausedMs: number;
}

/** A request a live process accepted and has not answered. */
interface Request {
  readonly inc: Incarnation;
  /** Since when the engine has been working on it (undefined while the handler or the answer's stream runs). */
  busySince: number | undefined;
  busyMs: number;
  pausedMs: number;
}

/**
 * What the checker needs to know of leases, handlers and requests, and the invariants it states about time.
 *
 * @example
 * const time = new TimeChecker(checker, scenario, (path) => coverage.count(path))
 * time.workStarted(incarnation, 'a3', pk, lease.signal, now)
 */
export class TimeChecker {
  readonly #checker: Checker;
  readonly #s: Scenario;
  readonly #count: (path: string) => void;
  readonly #held = new Map<string, Held>();
  readonly #requests = new Map<string, Request>();
  readonly #grants = new Map<string, number>();
  /** Attempts whose lease was settled before their work began (abandoned by the binding). */
  readonly #settledFirst = new Set<string>();
  #grantCount = 0;

  readonly #offset: (proc: number) => number;

  /** `offset`: a process's clock offset now (a clock step moves it); default the scenario's skew. */
  constructor(
    checker: Checker,
    scenario: Scenario,
    count: (path: string) => void,
    offset: (proc: number) => number = (proc) => (scenario.processes[proc] as Scenario['processes'][number]).skewMs,
  ) {
    this.#checker = checker;
    this.#s = scenario;
    this.#count = count;
    this.#offset = offset;
  }

  /** The store granted this attempt's claim (the latest grant counts). */
  claimGranted(label: string): void {
    this.#grants.set(label, ++this.#grantCount);
  }

  /** The handler starts under a lease: no other handler of the key may be running with a live signal. */
  workStarted(inc: Incarnation, label: string, pk: string, signal: AbortSignal, now: number): void {
    const held: Held = {
      inc,
      label,
      pk,
      start: now,
      grant: this.#grants.get(label) ?? ++this.#grantCount,
      lastSent: now,
      renewing: !signal.aborted && !this.#settledFirst.has(label),
      running: !signal.aborted,
      handling: true,
      frozen: false,
      pausedMs: 0,
    };
    signal.addEventListener('abort', () => {
      held.running = false;
      held.renewing = false;
    });
    this.#busy(label, false, now);
    for (const other of this.#held.values()) {
      if (other.pk !== pk || !other.inc.alive) continue;
      if (!other.running) {
        if (other.handling) this.#count('work begun beside a running one (its signal aborted)');
        continue;
      }
      const [holder, taker] = other.grant < held.grant ? [other, held] : [held, other];
      const ahead = this.#skew(taker) - this.#skew(holder);
      if (holder.frozen || ahead >= this.#s.leaseMarginMs) {
        this.#count(`work begun beside a running one (${holder.frozen ? 'its holder froze' : 'a clock ahead'})`);
        continue;
      }
      this.#checker.fail(
        'concurrent-work',
        `${label} on ${inc.label} starts the work of ${pk} while ${other.label} on ${other.inc.label} still runs it ` +
          `with a live signal (since ${other.start - T0} ms; ${holder.label}'s claim was granted first; ` +
          `${taker.label}'s clock ${ahead} ms ahead, margin ${this.#s.leaseMarginMs} ms)`,
      );
      return;
    }
    this.#held.set(label, held);
  }

  /** The handler returned or threw. Its lease stays kept until `settled` unless `settles` (the engine settles at once). */
  workEnded(label: string, now: number, settles: boolean): void {
    const held = this.#held.get(label);
    if (held) {
      held.running = false;
      held.handling = false;
      if (settles) held.renewing = false;
    }
    this.#busy(label, true, now);
  }

  /** The lease was settled (completed, failed, released or abandoned): its holder stops renewing it. */
  settled(label: string): void {
    const held = this.#held.get(label);
    if (held) held.renewing = false;
    else this.#settledFirst.add(label);
  }

  /** A renewal left its holder: past `maxHoldMs` (plus one lease) after the work began, the key is held for ever. */
  renewalSent(label: string, now: number): void {
    const held = this.#held.get(label);
    if (!held) return;
    held.lastSent = now;
    const s = this.#s;
    if (now > held.start + s.maxHoldMs + s.leaseMs + held.pausedMs) {
      this.#checker.fail(
        'key-held-forever',
        `${held.label} on ${held.inc.label} renews ${held.pk} at ${now - T0} ms, its work begun at ${held.start - T0} ms (maxHoldMs ${s.maxHoldMs}, lease ${s.leaseMs})`,
      );
    }
  }

  /** A renewal's reply reached its live process: `ok` false if the store refused it (the lease is gone). */
  renewalAnswered(label: string, ok: boolean | undefined): void {
    const held = this.#held.get(label);
    if (held && ok === false) held.renewing = false;
  }

  requestAccepted(inc: Incarnation, label: string, now: number): void {
    this.#requests.set(label, { inc, busySince: now, busyMs: 0, pausedMs: 0 });
  }

  /** The engine works on the request again (`true`), or the handler or the answer's stream runs (`false`). */
  #busy(label: string, busy: boolean, now: number): void {
    const request = this.#requests.get(label);
    if (!request || busy === (request.busySince !== undefined)) return;
    if (busy) request.busySince = now;
    else {
      request.busyMs += now - (request.busySince as number);
      request.busySince = undefined;
    }
  }

  /** The answer's body streams to the client: the binding waits for it, not the engine. */
  streaming(label: string, now: number): void {
    this.#busy(label, false, now);
  }

  /** The request was answered, refused, or its client is gone. */
  requestDone(label: string): void {
    this.#requests.delete(label);
  }

  /** A process crashed: its leases, handlers and requests are gone with it. */
  crashed(inc: Incarnation): void {
    for (const held of this.#held.values()) {
      if (held.inc !== inc) continue;
      held.running = false;
      held.handling = false;
      held.renewing = false;
    }
    for (const [label, request] of this.#requests) if (request.inc === inc) this.#requests.delete(label);
  }

  /** A process froze for `ms`: its timers fire late, and its handlers wake up as zombies. */
  paused(inc: Incarnation, ms: number): void {
    for (const held of this.#held.values()) {
      if (held.inc !== inc) continue;
      if (held.running) held.frozen = true;
      held.pausedMs += ms;
    }
    for (const request of this.#requests.values()) if (request.inc === inc) request.pausedMs += ms;
  }

  /** Checked before each event, so the event that ends the work cannot hide what should have happened before it. */
  beforeEvent(now: number): void {
    const s = this.#s;
    for (const held of this.#held.values()) {
      if (!held.renewing || !held.inc.alive || held.inc.pausedUntil >= now) continue;
      const base = Math.max(held.lastSent, held.inc.pausedUntil);
      if (now > base + s.renewEveryMs) {
        return this.#checker.fail(
          'lease-not-renewed',
          `${held.label} on ${held.inc.label}: no renewal sent between ${base - T0} ms and ${now - T0} ms (renew every ${s.renewEveryMs} ms)`,
        );
      }
    }
    const bound = s.waitForOutcomeMs + 10 * s.storeTimeoutMs;
    for (const [label, request] of this.#requests) {
      if (!request.inc.alive || request.busySince === undefined) continue;
      const busy = request.busyMs + now - request.busySince - request.pausedMs;
      if (busy > bound) {
        return this.#checker.fail(
          'request-hung',
          `${label} on ${request.inc.label}: the engine has worked on it for ${busy} ms (bound ${bound} ms: wait-for-outcome ${s.waitForOutcomeMs} + 10 × storeTimeoutMs ${s.storeTimeoutMs})`,
        );
      }
    }
  }

  #skew(held: Held): number {
    return this.#offset(held.inc.proc);
  }
}
