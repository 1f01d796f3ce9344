/**
 * @module Campaigns over many seeds, shrinking a failure to its shortest trace, and the report a failure prints.
 */
import type { InvariantName } from './checker.js';
import { FAULT_KINDS, type DefectName, type FaultKind, type SimConfig } from './scenario.js';
import { simulate, type SimResult } from './simulator.js';

export interface Shrunk {
  readonly result: SimResult;
  readonly disabledFaults: readonly string[];
  readonly droppedAttempts: readonly number[];
  readonly droppedRetries: readonly string[];
}

export interface Failure {
  readonly seed: number;
  readonly config: SimConfig;
  /** The failing run as drawn from the seed, with its trace. */
  readonly full: SimResult;
  readonly shrunk: Shrunk;
}

/**
 * Re-runs a failing seed with faults left out, planned attempts dropped and clients' retries dropped — first
 * all of a kind at once, then one at a time — keeping each removal after which the same invariant still breaks
 * within no more events; a few passes, until nothing more can go. Each request draws from its own stream, so a
 * removal leaves the rest of the run as it was. Every re-run is deterministic: the result is the same every
 * time, and `replayCommand` reproduces it.
 *
 * @example
 * const { result } = await shrink(seed, config, failing)
 */
export async function shrink(seed: number, config: SimConfig, failing: SimResult): Promise<Shrunk> {
  const invariant = failing.violation?.invariant;
  if (!invariant) throw new Error(`seed ${seed} did not fail: nothing to shrink`);
  const faults = new Set<string>();
  const attempts = new Set<number>();
  const retries = new Set<string>();
  let best = failing;
  const run = (trace = false) =>
    simulate(seed, config, { disabledFaults: faults, droppedAttempts: attempts, droppedRetries: retries, trace });
  /** Removes `items` from the run if it still fails the same way, in no more events. */
  const without = async <T>(set: Set<T>, items: readonly T[]): Promise<boolean> => {
    const fresh = items.filter((item) => !set.has(item));
    if (fresh.length === 0) return false;
    for (const item of fresh) set.add(item);
    const result = await run();
    if (result.violation?.invariant === invariant && result.steps <= best.steps) {
      best = result;
      return true;
    }
    for (const item of fresh) set.delete(item);
    return false;
  };
  const faultIds = () => best.faults.map((f) => f.id);
  await without(faults, faultIds());
  await without(retries, best.retries);
  for (let pass = 0; pass < 4; pass++) {
    let changed = false;
    for (const id of faultIds()) if (await without(faults, [id])) changed = true;
    for (const label of [...best.retries].reverse()) if (await without(retries, [label])) changed = true;
    for (const index of best.attempts) if (await without(attempts, [index])) changed = true;
    if (!changed) break;
  }
  return {
    result: await run(true),
    disabledFaults: [...faults].sort(),
    droppedAttempts: [...attempts].sort((a, b) => a - b),
    droppedRetries: [...retries].sort(),
  };
}

/**
 * The command that replays a run exactly.
 *
 * @example
 * replayCommand(1234, { defect: 'unfenced-renew' }) // 'npm run sim -- --seed 1234 --defect unfenced-renew'
 */
export function replayCommand(
  seed: number,
  config: SimConfig,
  shrunk?: Pick<Shrunk, 'disabledFaults' | 'droppedAttempts' | 'droppedRetries'>,
): string {
  const args = [`--seed ${seed}`];
  if (config.backend) args.push(`--backend ${config.backend}`);
  if (config.ledger) args.push(`--ledger ${config.ledger}`);
  if (config.defect) args.push(`--defect ${config.defect}`);
  if (config.maxSkewMs !== undefined) args.push(`--skew ${config.maxSkewMs}`);
  if (shrunk?.disabledFaults.length) args.push(`--disable-faults ${shrunk.disabledFaults.join(',')}`);
  if (shrunk?.droppedAttempts.length) args.push(`--drop-attempts ${shrunk.droppedAttempts.join(',')}`);
  if (shrunk?.droppedRetries.length) args.push(`--drop-retries ${shrunk.droppedRetries.join(',')}`);
  return `npm run sim -- ${args.join(' ')}`;
}

/**
 * Runs the failing seed again with its trace, and shrinks it.
 *
 * @example
 * const failure = await investigate(1234, {})
 * console.log(formatFailure(failure))
 */
export async function investigate(seed: number, config: SimConfig): Promise<Failure> {
  const full = await simulate(seed, config, { trace: true });
  if (!full.violation) throw new Error(`seed ${seed} passes when re-run: the simulation is not deterministic`);
  return { seed, config, full, shrunk: await shrink(seed, config, full) };
}

/**
 * What a failure prints: the seed, the broken invariant, how to replay it, and the shortest trace.
 *
 * @example
 * console.log(formatFailure(await investigate(seed, config)))
 */
export function formatFailure({ seed, config, full, shrunk }: Failure): string {
  const v = shrunk.result.violation ?? full.violation;
  return [
    `✗ seed ${seed} breaks "${v?.invariant}": ${v?.message}`,
    `  replay the seed:         ${replayCommand(seed, config)}`,
    `  replay the shortest run: ${replayCommand(seed, config, shrunk)}`,
    `  shrunk from ${full.faults.length} faults, ${full.attempts.length} planned attempts and ${full.retries.length} retries ` +
      `to ${shrunk.result.faults.length}, ${shrunk.result.attempts.length} and ${shrunk.result.retries.length} ` +
      `(${full.trace.length} → ${shrunk.result.trace.length} trace lines)`,
    '  shortest trace:',
    ...shrunk.result.trace.map((line) => `    ${line}`),
  ].join('\n');
}

export interface CampaignStats {
  readonly seeds: number;
  readonly requests: number;
  readonly steps: number;
  readonly wallMs: number;
  /** CPU time of this process (user + system): the machine may be shared, so wall time alone misleads. */
  readonly cpuMs: number;
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly byBackend: Readonly<Record<string, number>>;
  readonly coverage: Readonly<Record<string, number>>;
  readonly failures: ReadonlyArray<{
    readonly seed: number;
    readonly invariant: InvariantName;
    readonly message: string;
  }>;
}

export interface CampaignOptions {
  readonly from?: number;
  readonly seeds: number;
  readonly config?: SimConfig;
  /** Stop at the first failure (default) or run every seed and list the failures. */
  readonly keepGoing?: boolean;
  readonly onProgress?: (stats: CampaignStats) => void;
  readonly progressEveryMs?: number;
}

/**
 * Runs seeds `from` … `from + seeds - 1`, without traces.
 *
 * @example
 * const stats = await campaign({ seeds: 1000 })
 * console.log(stats.requests / (stats.wallMs / 1000), 'simulated requests per second')
 */
export async function campaign({
  from = 1,
  seeds,
  config = {},
  keepGoing = false,
  onProgress,
  progressEveryMs = 5_000,
}: CampaignOptions): Promise<CampaignStats> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  let lastProgress = started;
  let requests = 0;
  let steps = 0;
  let run = 0;
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  const byBackend: Record<string, number> = {};
  const coverage: Record<string, number> = {};
  const failures: Array<{ seed: number; invariant: InvariantName; message: string }> = [];
  const stats = (): CampaignStats => ({
    seeds: run,
    requests,
    steps,
    wallMs: performance.now() - started,
    cpuMs: ((usage) => (usage.user + usage.system) / 1000)(process.cpuUsage(cpu)),
    faults,
    coverage,
    byBackend,
    failures,
  });
  for (let seed = from; seed < from + seeds; seed++) {
    const result = await simulate(seed, config);
    run++;
    requests += result.requests;
    steps += result.steps;
    for (const fault of result.faults) faults[fault.kind]++;
    for (const [path, n] of Object.entries(result.coverage)) coverage[path] = (coverage[path] ?? 0) + n;
    const combo = `${result.scenario.backend}/${result.scenario.ledger}`;
    byBackend[combo] = (byBackend[combo] ?? 0) + 1;
    if (result.violation) {
      failures.push({ seed, ...result.violation });
      if (!keepGoing) break;
    }
    if (onProgress && performance.now() - lastProgress >= progressEveryMs) {
      lastProgress = performance.now();
      onProgress(stats());
    }
  }
  return stats();
}

export interface Detection {
  readonly defect: DefectName;
  /** The first failing seed, counting from `from` (undefined: none failed). */
  readonly firstSeed: number | undefined;
  readonly failing: number;
  readonly seeds: number;
  /** The most seeds a campaign starting anywhere in the range runs before its first failure (to the range's end). */
  readonly worstSeedsToDetection: number;
  readonly byInvariant: Readonly<Record<string, number>>;
  /** Seeds of the range on which the real code breaks an invariant too: not counted for the defect either way. */
  readonly excluded: number;
}

/**
 * How quickly each planted defect is found: every seed of the range is run against it. A seed on which the real
 * code breaks an invariant too is left out: what it shows is not the defect's doing.
 *
 * @example
 * for (const d of await detection(['unfenced-renew'], 1, 1000)) console.log(d.firstSeed, d.worstSeedsToDetection)
 */
export async function detection(defects: readonly DefectName[], from: number, seeds: number): Promise<Detection[]> {
  const out: Detection[] = [];
  const excluded = new Set<number>();
  for (let seed = from; seed < from + seeds; seed++) if ((await simulate(seed)).violation) excluded.add(seed);
  for (const defect of defects) {
    const byInvariant: Record<string, number> = {};
    let firstSeed: number | undefined;
    let last = from - 1;
    let worst = 0;
    let failing = 0;
    for (let seed = from; seed < from + seeds; seed++) {
      if (excluded.has(seed)) continue;
      const result = await simulate(seed, { defect });
      if (!result.violation) continue;
      failing++;
      byInvariant[result.violation.invariant] = (byInvariant[result.violation.invariant] ?? 0) + 1;
      firstSeed ??= seed;
      worst = Math.max(worst, seed - last);
      last = seed;
    }
    worst = Math.max(worst, from + seeds - last);
    out.push({ defect, firstSeed, failing, seeds, worstSeedsToDetection: worst, byInvariant, excluded: excluded.size });
  }
  return out;
}
