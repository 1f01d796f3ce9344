/**
 * @module The simulator's command line (`npm run sim -- …`).
 *
 *   npm run sim -- --seed 1234            replay one seed exactly, print its trace (and, if it fails, the shortest one)
 *   npm run sim -- --seeds 100000         a campaign over seeds 1…100000; prints simulated requests per wall second
 *   npm run sim -- --detect 1000          every planted defect (or --defect NAME) against seeds 1…1000: seeds to detection
 *   npm run sim -- --exhaustive NAME|all  every schedule of a small scenario (test/sim/exhaustive.ts), or of all
 *                                         of them and every planted defect: counts, shortest counterexamples
 *   options: --from N  --backend memory|sqlite  --ledger own|shared  --defect NAME  --skew MS
 *            --disable-faults c0,a3#1  --drop-attempts 2,5  --drop-retries a3.r  (replay a shrunk run)
 *            --keep-going  (campaign: run every seed and list the failures)
 */
import { parseArgs } from 'node:util';
import {
  campaign,
  detection,
  formatFailure,
  investigate,
  replayCommand,
  shrink,
  type CampaignStats,
} from './campaign.js';
import { defectBackend, DEFECTS, type DefectName, type SimConfig } from './scenario.js';
import { simulate } from './simulator.js';

const { values } = parseArgs({
  options: {
    seed: { type: 'string' },
    seeds: { type: 'string' },
    detect: { type: 'string' },
    exhaustive: { type: 'string' },
    from: { type: 'string', default: '1' },
    backend: { type: 'string' },
    ledger: { type: 'string' },
    defect: { type: 'string' },
    skew: { type: 'string' },
    'disable-faults': { type: 'string' },
    'drop-attempts': { type: 'string' },
    'drop-retries': { type: 'string' },
    'keep-going': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

function usage(message?: string): never {
  if (message) console.error(message);
  console.error(
    'usage: npm run sim -- --seed N | --seeds COUNT | --detect COUNT | --exhaustive NAME|all [--from N] [--backend memory|sqlite] [--ledger own|shared]\n' +
      `       [--defect ${DEFECTS.join('|')}] [--skew MS] [--disable-faults c0,a3#1] [--drop-attempts 2,5] [--drop-retries a3.r] [--keep-going]`,
  );
  process.exit(message ? 2 : 0);
}

const integer = (name: string, text: string | undefined): number | undefined => {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) usage(`--${name} expects a non-negative integer, got ${text}`);
  return n;
};
const words = (text: string | undefined): Set<string> => new Set((text ?? '').split(',').filter(Boolean));
const numbers = (name: string, text: string | undefined): Set<number> =>
  new Set([...words(text)].map((part) => integer(name, part) as number));

if (values.help) usage();
if (values.backend !== undefined && values.backend !== 'memory' && values.backend !== 'sqlite')
  usage(`unknown --backend ${values.backend}`);
if (values.ledger !== undefined && values.ledger !== 'own' && values.ledger !== 'shared')
  usage(`unknown --ledger ${values.ledger}`);
if (values.defect !== undefined && !DEFECTS.includes(values.defect as DefectName))
  usage(`unknown --defect ${values.defect}`);
const written = defectBackend(values.defect as DefectName | undefined);
if (written !== undefined && values.backend !== undefined && values.backend !== written)
  usage(`planted defect ${values.defect} is written for --backend ${written}`);
const skew = integer('skew', values.skew);
const config: SimConfig = {
  ...(values.backend === undefined ? {} : { backend: values.backend }),
  ...(values.ledger === undefined ? {} : { ledger: values.ledger }),
  ...(values.defect === undefined ? {} : { defect: values.defect as DefectName }),
  ...(skew === undefined ? {} : { maxSkewMs: skew }),
};

if (values.exhaustive !== undefined) {
  const { exhaustiveCli } = await import('./exhaustive.js');
  process.exit(await exhaustiveCli(values.exhaustive, config.defect, config.backend, (line) => console.log(line)));
}

const detect = integer('detect', values.detect);
if (detect !== undefined) {
  const from = integer('from', values.from) ?? 1;
  const defects = config.defect ? [config.defect] : DEFECTS;
  console.log(`planted defects against seeds ${from}…${from + detect - 1}:`);
  let missed = 0;
  const detections = await detection(defects, from, detect);
  const excluded = detections[0]?.excluded ?? 0;
  if (excluded > 0) console.log(`  (${excluded} seeds left out: the real code breaks an invariant on them too)`);
  for (const d of detections) {
    if (d.firstSeed === undefined) missed++;
    console.log(
      `  ${d.defect.padEnd(28)} first at seed ${String(d.firstSeed ?? 'never').padEnd(6)} ` +
        `${String(d.failing).padStart(5)}/${d.seeds} seeds fail; worst seeds to detection from any start ${d.worstSeedsToDetection}; ` +
        Object.entries(d.byInvariant)
          .map(([k, n]) => `${k} ${n}`)
          .join(', '),
    );
  }
  process.exit(missed > 0 ? 1 : 0);
}

const seed = integer('seed', values.seed);
const seeds = integer('seeds', values.seeds);
if ((seed === undefined) === (seeds === undefined))
  usage('give exactly one of --seed N, --seeds COUNT or --detect COUNT');

if (seed !== undefined) {
  const disabledFaults = words(values['disable-faults']);
  const droppedAttempts = numbers('drop-attempts', values['drop-attempts']);
  const droppedRetries = words(values['drop-retries']);
  const result = await simulate(seed, config, { trace: true, disabledFaults, droppedAttempts, droppedRetries });
  for (const line of result.trace) console.log(line);
  console.log(
    `\nseed ${seed}: ${result.requests} requests, ${result.steps} steps, ${result.faults.length} faults ` +
      `(${result.faults.map((f) => `${f.id} ${f.kind}`).join(', ') || 'none'})`,
  );
  if (!result.violation) {
    console.log('✓ every invariant held');
    process.exit(0);
  }
  console.log(`✗ "${result.violation.invariant}": ${result.violation.message}\n`);
  if (disabledFaults.size + droppedAttempts.size + droppedRetries.size > 0) process.exit(1); // Already a shrunk run.
  const shrunk = await shrink(seed, config, result);
  console.log(formatFailure({ seed, config, full: result, shrunk }));
  process.exit(1);
}

const report = (stats: CampaignStats, final: boolean): string => {
  const seconds = stats.wallMs / 1000;
  const cpuSeconds = stats.cpuMs / 1000;
  const faults = Object.entries(stats.faults)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  return [
    `${final ? 'campaign' : 'progress'}: ${stats.seeds} seeds, ${stats.requests} simulated requests, ${stats.steps} steps ` +
      `in ${seconds.toFixed(1)} s wall → ${Math.round(stats.requests / seconds)} simulated requests/s ` +
      `(${Math.round(stats.seeds / seconds)} seeds/s); ${cpuSeconds.toFixed(1)} s CPU → ` +
      `${Math.round(stats.requests / cpuSeconds)} simulated requests per CPU second`,
    ...(final
      ? [
          `  stores/ledgers: ${Object.entries(stats.byBackend)
            .map(([k, n]) => `${k} ${n}`)
            .join(', ')}`,
          `  faults injected: ${faults || 'none'}`,
          `  paths taken: ${Object.entries(stats.coverage)
            .sort(([a], [b]) => a.localeCompare(b))
            .map(([k, n]) => `${k} ${n}`)
            .join(', ')}`,
          `  failures: ${stats.failures.length}${stats.failures.length ? ` (seeds ${stats.failures.map((f) => f.seed).join(', ')})` : ''}`,
        ]
      : []),
  ].join('\n');
};

const from = integer('from', values.from) ?? 1;
console.log(
  `simulating seeds ${from}…${from + (seeds as number) - 1}${config.defect ? ` with planted defect ${config.defect}` : ''}`,
);
const stats = await campaign({
  from,
  seeds: seeds as number,
  config,
  keepGoing: values['keep-going'],
  onProgress: (progress) => console.error(report(progress, false)),
});
console.log(report(stats, true));
const first = stats.failures[0];
if (!first) process.exit(0);
console.log(
  `\nfirst failure at seed ${first.seed} (seeds to detection: ${first.seed - from + 1}); replay: ${replayCommand(first.seed, config)}\n`,
);
console.log(formatFailure(await investigate(first.seed, config)));
process.exit(1);
