/**
 * The exhaustive mode in `npm test`: every schedule of each small scenario (test/sim/exhaustive.ts) on the real
 * engine, with the exact number of schedules and states (the exploration is deterministic), no invariant broken
 * and no bound hit; and every planted defect found in its scenario, with the length of its shortest
 * counterexample. docs/SIMULATION.md lists the same figures (`npm run sim -- --exhaustive all`).
 */
import { describe, expect, it } from 'vitest';
import { DEFECT_SCENARIO, exhaustiveScenario, formatCounterexample, formatExploration } from './exhaustive.js';
import { explore, replaySchedule } from './explore.js';
import { DEFECTS, type BackendName, type DefectName } from './scenario.js';

/** [schedules, states] of each scenario on the real engine; the same on both stores. */
const COUNTS: Record<string, readonly [schedules: number, states: number]> = {
  'double-submit': [243, 999],
  takeover: [1325, 5388],
  'stalled-call': [9, 84],
  'tampered-takeover': [105, 530],
  expiry: [31, 146],
  outage: [2, 33],
  'early-answer': [72, 250],
  three: [276, 1023],
};

/** Each planted defect: the invariant its shortest counterexample breaks, and that schedule's length (steps). */
const SHORTEST: Record<DefectName, readonly [invariant: string, length: number]> = {
  'read-then-write-claim': ['concurrent-work', 8],
  'unfenced-complete': ['stale-write', 14],
  'unfenced-renew': ['stale-write', 18],
  'fingerprint-blind-takeover': ['claim-decision', 13],
  'memory-yielding-claim': ['concurrent-work', 5],
  'claim-ignores-expiry': ['claim-decision', 16],
  'renew-ignores-expiry': ['ttl-takeover', 6],
  'retryable-503-as-final': ['outcome-class', 12],
  'renewal-never-started': ['lease-not-renewed', 4],
  'effects-with-retryable': ['effects-on-retryable', 12],
  'success-without-record': ['answer-without-record', 15],
  'renewals-chained-without-timeout': ['lease-not-renewed', 7],
  'no-local-deadline': ['concurrent-work', 11],
  'early-answer-records-retryable': ['concurrent-work', 13],
  'abandoned-stream-held-forever': ['key-held-forever', 46],
  'store-call-without-timeout': ['request-hung', 14],
};

const REAL: Array<[string, BackendName]> = [
  ...Object.keys(COUNTS).map((name): [string, BackendName] => [name, 'memory']),
  // The scenarios of the SQL defects on the real SQLite store: a counterexample there is the defect's doing.
  ['double-submit', 'sqlite'],
  ['takeover', 'sqlite'],
  ['tampered-takeover', 'sqlite'],
];

describe('exhaustive exploration of the real engine', () => {
  it.each(REAL)(
    '%s on the %s store: every schedule explored, every invariant holds',
    async (name, backend) => {
      const result = await explore(exhaustiveScenario(name, undefined, backend));
      console.log(formatExploration(`${name} (${backend})`, undefined, result));
      expect(result.completed).toBe(true);
      expect(result.bounded).toBe(0);
      expect(result.violations).toBe(0);
      expect([result.schedules, result.states]).toEqual(COUNTS[name]);
      expect(result.complete + result.pruned).toBe(result.schedules);
    },
    120_000,
  );
});

describe('exhaustive exploration finds every planted defect', () => {
  it.each(DEFECTS)(
    '%s: found, with its shortest counterexample',
    async (defect) => {
      const name = DEFECT_SCENARIO[defect];
      const scenario = exhaustiveScenario(name, defect);
      const result = await explore(scenario);
      expect(result.completed).toBe(true);
      const shortest = result.shortest;
      expect(shortest, `${defect} not found in ${name}`).toBeDefined();
      if (!shortest) return;
      expect([shortest.invariant, shortest.length]).toEqual(SHORTEST[defect]);
      // The counterexample replays: the same invariant breaks after the same steps, each printed.
      const replay = await replaySchedule(scenario, shortest.path);
      expect(replay.violation).toEqual({ invariant: shortest.invariant, message: shortest.message });
      expect(replay.length).toBe(shortest.length);
      const trace = replay.trace;
      expect(trace.filter((line) => / step \d+: /.test(line)).length).toBeGreaterThan(0);
      expect(trace.at(-1)).toContain(`INVARIANT BROKEN "${shortest.invariant}"`);
      console.log([formatExploration(name, defect, result), ...formatCounterexample(shortest, trace)].join('\n'));
    },
    120_000,
  );
});

describe('the pruning loses nothing', () => {
  /** [scenario, defect, schedules in the whole tree, the shortest counterexample's length or none]. */
  const WHOLE: Array<[string, DefectName | undefined, number, number | undefined]> = [
    ['early-answer', undefined, 147, undefined],
    ['tampered-takeover', undefined, 250, undefined],
    ['tampered-takeover', 'fingerprint-blind-takeover', 70, 13],
    ['double-submit', 'memory-yielding-claim', 410, 5],
  ];
  it.each(WHOLE)(
    '%s (%s): the whole tree of schedules, unpruned, finds what the pruned search finds',
    async (name, defect, schedules, length) => {
      const scenario = exhaustiveScenario(name, defect);
      const whole = await explore(scenario, { hashing: false });
      const pruned = await explore(scenario);
      expect([whole.schedules, whole.pruned, whole.completed]).toEqual([schedules, 0, true]);
      expect(pruned.schedules).toBeLessThan(whole.schedules);
      expect(whole.shortest?.length).toBe(length);
      expect(pruned.shortest?.length).toBe(length);
      expect(whole.shortest?.invariant).toBe(pruned.shortest?.invariant);
    },
    120_000,
  );
});
