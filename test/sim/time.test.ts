/**
 * The invariants about time (test/sim/time.ts), each broken on purpose with a hand-made history, and the
 * histories the timing rule allows left alone.
 */
import { describe, expect, it } from 'vitest';
import { Checker } from './checker.js';
import { makeScenario, T0, type Scenario } from './scenario.js';
import { TimeChecker } from './time.js';
import type { Incarnation } from './world.js';

const PK = 'IDEMPOTENCY#acct_a#k';
/** Lease 2 s, renewals every 600 ms, margin 200 ms; p1's clock on time, p2's 150 ms ahead, p3's 300 ms ahead. */
const scenario: Scenario = {
  ...makeScenario(1),
  leaseMs: 2_000,
  renewEveryMs: 600,
  leaseMarginMs: 200,
  storeTimeoutMs: 1_000,
  maxHoldMs: 6_000,
  waitForOutcomeMs: 0,
  processes: [
    { name: 'p1', skewMs: 0 },
    { name: 'p2', skewMs: 150 },
    { name: 'p3', skewMs: 300 },
  ],
};

function process(proc: number): Incarnation {
  return {
    proc,
    label: `p${proc + 1}#0`,
    alive: true,
    pausedUntil: 0,
    partitionedUntil: 0,
    engine: undefined as never,
    clock: undefined as never,
    inflight: new Map(),
  };
}

function setup() {
  const checker = new Checker(() => {});
  const counted: string[] = [];
  const time = new TimeChecker(checker, scenario, (path) => counted.push(path));
  return { checker, time, counted };
}

/** A claim granted, and the work begun under it, at `at` ms. */
function begin(time: TimeChecker, inc: Incarnation, label: string, at: number, signal = new AbortController().signal) {
  time.claimGranted(label);
  time.workStarted(inc, label, PK, signal, T0 + at);
}

describe('the invariants about time', () => {
  it('a second handler of one key while the first runs with a live signal breaks "concurrent-work"', () => {
    const { checker, time } = setup();
    begin(time, process(0), 'a0', 0);
    begin(time, process(0), 'a1', 2_500);
    expect(checker.violation?.invariant).toBe('concurrent-work');
    expect(checker.violation?.message).toBe(
      `a1 on p1#0 starts the work of ${PK} while a0 on p1#0 still runs it with a live signal ` +
        "(since 0 ms; a0's claim was granted first; a1's clock 0 ms ahead, margin 200 ms)",
    );
  });

  it('once the first handler’s signal aborted, or it ended, a takeover is fine', () => {
    const { checker, time, counted } = setup();
    const first = new AbortController();
    begin(time, process(0), 'a0', 0, first.signal);
    first.abort();
    begin(time, process(1), 'a1', 2_500);
    time.workEnded('a1', T0 + 2_600, true);
    begin(time, process(2), 'a2', 5_000);
    expect(checker.violation).toBe(undefined);
    // a0 ignores its aborted signal and runs on beside a1 and a2: fencing's case, counted, not a violation.
    expect(counted).toEqual([
      'work begun beside a running one (its signal aborted)',
      'work begun beside a running one (its signal aborted)',
    ]);
  });

  it('excused: a holder that froze while it ran, and a taker whose clock runs a margin or more ahead', () => {
    const { checker, time, counted } = setup();
    const p1 = process(0);
    begin(time, p1, 'a0', 0);
    time.paused(p1, 3_000);
    begin(time, process(1), 'a1', 2_500);
    expect(checker.violation).toBe(undefined);
    const other = setup();
    begin(other.time, process(0), 'b0', 0);
    begin(other.time, process(2), 'b1', 2_500); // p3 runs 300 ms ahead of p1: beyond the 200 ms margin
    expect(other.checker.violation).toBe(undefined);
    begin(other.time, process(1), 'b2', 2_600); // p2 is 150 ms ahead of p1: within it
    expect(other.checker.violation?.invariant).toBe('concurrent-work');
    expect([...counted, ...other.counted]).toEqual([
      'work begun beside a running one (its holder froze)',
      'work begun beside a running one (a clock ahead)',
    ]);
  });

  it('the holder is the earlier grant: a late claim answer whose work starts after the takeover breaks it too', () => {
    const { checker, time } = setup();
    time.claimGranted('a0'); // granted first, its answer slow to come back
    begin(time, process(2), 'a1', 2_100); // p3 (300 ms ahead) took over: excused against a0 …
    time.workStarted(process(0), 'a0', PK, new AbortController().signal, T0 + 2_200);
    expect(checker.violation).toBe(undefined); // … whichever of the two starts first
    const other = setup();
    other.time.claimGranted('b0');
    begin(other.time, process(1), 'b1', 2_100);
    other.time.workStarted(process(0), 'b0', PK, new AbortController().signal, T0 + 2_200);
    expect(other.checker.violation?.message).toMatch(/^b0 on p1#0 starts the work .* while b1 on p2#0 still runs it/);
  });

  it('a kept lease with no renewal sent for renewEveryMs breaks "lease-not-renewed"; a settled one does not', () => {
    const { checker, time } = setup();
    const p1 = process(0);
    begin(time, p1, 'a0', 0);
    time.renewalSent('a0', T0 + 600);
    time.renewalSent('a0', T0 + 1_200); // never answered: the next one is due 600 ms later all the same
    time.beforeEvent(T0 + 1_800);
    expect(checker.violation).toBe(undefined);
    time.beforeEvent(T0 + 1_801);
    expect(checker.violation?.message).toBe(
      'a0 on p1#0: no renewal sent between 1200 ms and 1801 ms (renew every 600 ms)',
    );
    const other = setup();
    begin(other.time, p1, 'b0', 0);
    other.time.settled('b0');
    other.time.beforeEvent(T0 + 5_000);
    expect(other.checker.violation).toBe(undefined);
  });

  it('a renewal sent past maxHoldMs plus one lease breaks "key-held-forever"', () => {
    const { checker, time } = setup();
    begin(time, process(0), 'a0', 0);
    time.renewalSent('a0', T0 + 8_000);
    expect(checker.violation).toBe(undefined);
    time.renewalSent('a0', T0 + 8_001);
    expect(checker.violation?.message).toBe(
      `a0 on p1#0 renews ${PK} at 8001 ms, its work begun at 0 ms (maxHoldMs 6000, lease 2000)`,
    );
  });

  it('the engine working on a request past ten store timeouts breaks "request-hung"; the handler’s time is not its', () => {
    const { checker, time } = setup();
    const p1 = process(0);
    time.requestAccepted(p1, 'a0', T0);
    begin(time, p1, 'a0', 4_000); // the handler runs 20 s: not the engine's time
    time.workEnded('a0', T0 + 24_000, true);
    time.beforeEvent(T0 + 30_000);
    expect(checker.violation).toBe(undefined);
    time.beforeEvent(T0 + 30_001);
    expect(checker.violation?.message).toBe(
      'a0 on p1#0: the engine has worked on it for 10001 ms (bound 10000 ms: wait-for-outcome 0 + 10 × storeTimeoutMs 1000)',
    );
  });
});
