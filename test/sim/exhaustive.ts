/**
 * @module The exhaustive mode's small scenarios (explored by ./explore.ts): two engine instances, two or three
 * requests at fixed times, no latency on the wire (the driver orders what happens at one instant), a processor
 * call of a fixed length (long enough for two renewals), and a budget of faults the driver may inject anywhere:
 * a crash, a lease lapse (a process cut off from the store and the network for a lease), a stalled store call
 * (one that never answers), a clock step, and for some a processor outage or a binding's mishap.
 */
import { RECOMMENDED_TTL_MS } from 'idem';
import type { Counterexample, Exploration } from './explore.js';
import {
  defectBackend,
  FAULT_KINDS,
  payloadFingerprint,
  type BackendName,
  type BudgetKind,
  type DefectName,
  type FaultKind,
  type Payload,
  type Scenario,
} from './scenario.js';

const LEASE_MS = 3_000;
const PAYLOAD: Payload = { amount: 1_000, currency: 'usd', source: 'tok_visa' };
const TAMPERED: Payload = { ...PAYLOAD, amount: 1_001 };

interface Plan {
  readonly name: string;
  readonly what: string;
  /** Requests: when (ms), to which process (0 or 1), tampered or not. */
  readonly requests: ReadonlyArray<readonly [at: number, process: 0 | 1, tampered?: boolean]>;
  readonly budget: Readonly<Partial<Record<BudgetKind, number>>>;
  readonly ttlMs?: number;
  /** Minutes, not seconds: explored only when named (`--exhaustive every-fault`), not by `all` or `npm test`. */
  readonly long?: boolean;
}

/** After the first request's lease, if its holder stopped renewing it. */
const AFTER_LEASE = LEASE_MS + 1;

export const PLANS: readonly Plan[] = [
  {
    name: 'double-submit',
    what: 'two requests for one key at the same instant, one to each process; one crash',
    requests: [
      [0, 0],
      [0, 1],
    ],
    budget: { crash: 1 },
  },
  {
    name: 'takeover',
    what:
      'a request, and its retry to the other process once a lease has passed; one lease lapse, one store call ' +
      'delayed past a lease',
    requests: [
      [0, 0],
      [AFTER_LEASE, 1],
    ],
    budget: { lapse: 1, delay: 1 },
  },
  {
    name: 'stalled-call',
    what: 'as takeover; one store call that never answers',
    requests: [
      [0, 0],
      [AFTER_LEASE, 1],
    ],
    budget: { stall: 1 },
  },
  {
    name: 'tampered-takeover',
    what: 'as takeover, the retry with another amount; one lease lapse',
    requests: [
      [0, 0],
      [AFTER_LEASE, 1, true],
    ],
    budget: { lapse: 1 },
  },
  {
    name: 'expiry',
    what: 'records kept 1.5 leases; a retry after that; one clock step of 1 s',
    requests: [
      [0, 0],
      [4_501, 1],
    ],
    budget: { 'clock-step': 1 },
    ttlMs: 4_500,
  },
  {
    name: 'outage',
    what: 'a request and a retry after a lease; one processor outage (503)',
    requests: [
      [0, 0],
      [AFTER_LEASE, 1],
    ],
    budget: { 'processor-down': 1 },
  },
  {
    name: 'early-answer',
    what: 'a request, a retry 2 s later; a timeout middleware answers 503 at 1.5 s, or the client leaves mid-stream',
    requests: [
      [0, 0],
      [2_000, 1],
    ],
    budget: { 'early-answer': 1, 'client-gone': 1 },
  },
  {
    name: 'every-fault',
    what: 'as takeover; one crash, one lease lapse, one store call that never answers, one clock step',
    requests: [
      [0, 0],
      [AFTER_LEASE, 1],
    ],
    budget: { crash: 1, lapse: 1, stall: 1, 'clock-step': 1 },
    long: true,
  },
  {
    name: 'three',
    what: 'two requests at the same instant and a third after a lease; one crash',
    requests: [
      [0, 0],
      [0, 1],
      [AFTER_LEASE, 1],
    ],
    budget: { crash: 1 },
  },
];

/** The scenario each planted defect is explored in (the one where it shows soonest). */
export const DEFECT_SCENARIO: Readonly<Record<DefectName, string>> = {
  'read-then-write-claim': 'double-submit',
  'unfenced-complete': 'takeover',
  'unfenced-renew': 'takeover',
  'fingerprint-blind-takeover': 'tampered-takeover',
  'memory-yielding-claim': 'double-submit',
  'claim-ignores-expiry': 'expiry',
  'renew-ignores-expiry': 'expiry',
  'retryable-503-as-final': 'outage',
  'renewal-never-started': 'takeover',
  'effects-with-retryable': 'outage',
  'success-without-record': 'takeover',
  'renewals-chained-without-timeout': 'stalled-call',
  'no-local-deadline': 'takeover',
  'early-answer-records-retryable': 'early-answer',
  'abandoned-stream-held-forever': 'early-answer',
  'store-call-without-timeout': 'stalled-call',
};

/**
 * The fixed scenario of a plan, on the memory store (or another, or the store a planted defect is written for).
 *
 * @example
 * const scenario = exhaustiveScenario('takeover', 'unfenced-complete')
 */
export function exhaustiveScenario(name: string, defect?: DefectName, backend?: BackendName): Scenario {
  const plan = PLANS.find((p) => p.name === name);
  if (!plan) throw new Error(`no exhaustive scenario ${name} (${PLANS.map((p) => p.name).join(', ')})`);
  const key = {
    index: 0,
    scope: 'acct_a',
    key: 'key-1',
    payload: PAYLOAD,
    fingerprint: payloadFingerprint(PAYLOAD),
    retries: 0,
    timeoutMs: 4 * LEASE_MS,
  };
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  return {
    seed: 1,
    backend: defectBackend(defect) ?? backend ?? 'memory',
    ledger: 'shared',
    defect,
    maxSkewMs: 0,
    leaseMs: LEASE_MS,
    renewEveryMs: 1_000,
    leaseMarginMs: 300,
    storeTimeoutMs: 1_000,
    maxHoldMs: 3 * LEASE_MS,
    ttlMs: plan.ttlMs ?? RECOMMENDED_TTL_MS.min,
    waitForOutcomeMs: 0,
    honoursAbort: false,
    effectsOnFailure: true,
    batchWindowMs: 0,
    processes: [
      { name: 'p1', skewMs: 0 },
      { name: 'p2', skewMs: 0 },
    ],
    keys: [key],
    attempts: plan.requests.map(([at, process, tampered = false], index) => ({
      index,
      keyIndex: 0,
      at,
      process,
      tampered,
      payload: tampered ? TAMPERED : PAYLOAD,
      fingerprint: payloadFingerprint(tampered ? TAMPERED : PAYLOAD),
    })),
    faults,
    schedule: [],
    exhaustive: { workMs: 2_500, budget: plan.budget, clockStepMs: 1_000, downStatus: 503 },
  };
}

/**
 * One scenario's figures, in one line.
 *
 * @example
 * console.log(formatExploration('takeover', undefined, result))
 */
export function formatExploration(name: string, defect: DefectName | undefined, e: Exploration): string {
  const found = Object.entries(e.byInvariant)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  return (
    `${name}${defect ? ` with ${defect}` : ''}: ${e.schedules} schedules (${e.complete} run to the end, ` +
    `${e.pruned} pruned at a state explored already${e.cut ? `, ${e.cut} cut at the counterexample's length` : ''}), ` +
    `${e.states} states; ${e.completed ? 'exploration complete' : `INCOMPLETE: ${e.bounded} schedules hit the depth bound`}; ` +
    `${e.violations} violations${found ? ` (${found})` : ''}; ${(e.wallMs / 1000).toFixed(1)} s`
  );
}

/**
 * The shortest counterexample, step by step.
 *
 * @example
 * console.log(formatCounterexample(shortest, trace).join('\n'))
 */
export function formatCounterexample(c: Counterexample, trace: readonly string[]): string[] {
  return [
    `  shortest counterexample: ${c.length} steps, breaks "${c.invariant}": ${c.message}`,
    `  choices: ${c.path.join(',')}`,
    ...trace.map((line) => `    ${line}`),
  ];
}

/**
 * `npm run sim -- --exhaustive NAME|all [--defect NAME]`: explores the scenario(s) on the real engine (or with
 * the planted defect), printing the figures and, for a broken invariant, the shortest counterexample. With
 * `all` and no defect, every scenario and then every planted defect in its scenario. Resolves to the number of
 * failed expectations: a violation on the real engine, a planted defect not found, or an incomplete exploration.
 *
 * @example
 * process.exit(await exhaustiveCli('all', undefined, console.log))
 */
export async function exhaustiveCli(
  target: string,
  defect: DefectName | undefined,
  backend: BackendName | undefined,
  print: (line: string) => void,
): Promise<number> {
  const { explore, replaySchedule } = await import('./explore.js');
  const { DEFECTS, SQL_DEFECTS } = await import('./scenario.js');
  const names = target === 'all' ? PLANS.filter((p) => !p.long).map((p) => p.name) : [target];
  const runs: Array<[string, DefectName | undefined, BackendName | undefined]> = names.map((n) => [n, defect, backend]);
  if (target === 'all' && !defect && !backend) {
    // The SQL defects' scenarios on the real SQLite store too: what the defect breaks, the real store keeps.
    for (const n of new Set(SQL_DEFECTS.map((d) => DEFECT_SCENARIO[d]))) runs.push([n, undefined, 'sqlite']);
    for (const d of DEFECTS) runs.push([DEFECT_SCENARIO[d], d, undefined]);
  }
  let failed = 0;
  for (const [name, planted, store] of runs) {
    const scenario = exhaustiveScenario(name, planted, store);
    const result = await explore(scenario);
    print(formatExploration(`${name} (${scenario.backend})`, planted, result));
    if (!result.completed || (planted === undefined) !== (result.shortest === undefined)) failed++;
    if (result.shortest) {
      const { trace } = await replaySchedule(scenario, result.shortest.path);
      print(formatCounterexample(result.shortest, trace).join('\n'));
    }
  }
  return failed;
}
