/**
 * @module `npm run bench:instructions [-- --update]`: instructions per request kind (new key, replay, mismatch, 409),
 * counted by `valgrind --tool=callgrind` on an in-process run (bench/instructions-run.ts) with the memory store and
 * with a null store. Times on this shared machine move by tens of percent; these counts repeat within ~0.1 %, so a
 * regression of more than 5 % against docs/bench/instructions.json is printed as one. `--update` rewrites that file.
 *
 * Each figure is (count at N2 requests − count at N1 requests) / (N2 − N1): startup, module loading and the
 * set-up requests cancel out. V8 runs single-threaded and predictable, so the JIT does the same work each time.
 * The `express-*` rows are the HTTP benchmark's routes (bench/instructions-run.ts): Express's own cost with no key
 * (`express-plain`), and Idem's Express middleware on a store that keeps nothing (`express-null`); their
 * difference is what Idem adds to an Express request. `BENCH_INSTR_ONLY=new/express-null,…` counts only those.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BASELINE = join(ROOT, 'docs', 'bench', 'instructions.json');
/** What is counted: each request kind through the Web layer on each store, then Express over node:http. */
const CASES: ReadonlyArray<readonly [kind: string, store: string]> = [
  ...['null', 'memory'].flatMap((store) =>
    ['new', 'replay', 'mismatch', 'conflict'].map((kind) => [kind, store] as const),
  ),
  ['new', 'express-plain'],
  ['new', 'express-null'],
  ['replay', 'express-null'],
];
const N1 = Number(process.env.BENCH_INSTR_N1 ?? 100);
const N2 = Number(process.env.BENCH_INSTR_N2 ?? 400);
const TOLERANCE = 0.05;

type Counts = Record<string, number>;

function progress(message: string): void {
  process.stderr.write(`[instructions] ${message}\n`);
}

function fail(message: string): never {
  process.stderr.write(`bench:instructions: ${message}\n`);
  process.exit(2);
}

if (spawnSync('valgrind', ['--version']).status !== 0) fail('valgrind is not installed (apt-get install valgrind).');

const work = mkdtempSync(join(tmpdir(), 'idem-instr-'));
const bundle = join(work, 'run.mjs');
const esbuild = join(ROOT, 'node_modules', '.bin', 'esbuild');
// The banner gives the bundle a `require` for the CommonJS packages it holds (Express asks for Node's built-ins).
const banner =
  "--banner:js=import { createRequire as __idemRequire } from 'node:module'; const require = __idemRequire(import.meta.url);";
const built = spawnSync(esbuild, [
  join(ROOT, 'bench', 'instructions-run.ts'),
  '--bundle',
  '--platform=node',
  '--format=esm',
  `--outfile=${bundle}`,
  '--log-level=error',
  banner,
]);
if (built.status !== 0) fail(`could not bundle bench/instructions-run.ts: ${built.stderr.toString().trim()}`);

/**
 * V8 single-threaded and predictable; and an old generation large enough that no major GC starts during a run:
 * otherwise whether one falls between the N1th and the N2th request moves a figure by 5–8 % (measured: the same
 * build counted 2,672,308 and 2,873,605 instructions per new key, a mark-compact inside the window or not).
 * Scavenges, the GC that per-request garbage costs, still count.
 */
const NODE_FLAGS = ['--single-threaded', '--predictable', '--no-warnings', '--initial-old-space-size=256'];

/** Instructions for one run of `count` requests (the whole process). */
function count(kind: string, store: string, requests: number): number {
  const out = join(work, `cg.${kind}.${store}.${requests}.out`);
  const run = spawnSync(
    'valgrind',
    [
      '--tool=callgrind',
      `--callgrind-out-file=${out}`,
      process.execPath,
      ...NODE_FLAGS,
      bundle,
      kind,
      store,
      String(requests),
    ],
    { encoding: 'utf8' },
  );
  const match = /Collected : (\d+)/.exec(run.stderr);
  if (run.status !== 0 || !match)
    fail(
      `${kind}/${store} x${requests} failed: ${run.stderr
        .split('\n')
        .filter((l) => !l.startsWith('=='))
        .join(' ')
        .trim()}`,
    );
  rmSync(out, { force: true });
  return Number(match[1]);
}

const only = (process.env.BENCH_INSTR_ONLY ?? '').split(',').filter(Boolean);
const counts: Counts = {};
for (const [kind, store] of CASES) {
  if (only.length > 0 && !only.includes(`${kind}/${store}`)) continue;
  const started = Date.now();
  const perRequest = Math.round((count(kind, store, N2) - count(kind, store, N1)) / (N2 - N1));
  counts[`${kind}/${store}`] = perRequest;
  progress(
    `${kind.padEnd(8)} on ${store.padEnd(13)} ${perRequest.toLocaleString('en-US').padStart(12)} instructions/request (${((Date.now() - started) / 1000).toFixed(0)} s)`,
  );
}
rmSync(work, { recursive: true, force: true });

const baseline: { counts: Counts } | undefined = existsSync(BASELINE)
  ? (JSON.parse(readFileSync(BASELINE, 'utf8')) as { counts: Counts })
  : undefined;
console.log('\n| request | store | instructions / request | baseline | change |');
console.log('|---|---|---:|---:|---:|');
let regressions = 0;
for (const [name, value] of Object.entries(counts)) {
  const [kind, store] = name.split('/') as [string, string];
  const before = baseline?.counts[name];
  const change = before ? (value - before) / before : undefined;
  if (change !== undefined && change > TOLERANCE) regressions++;
  const mark =
    change === undefined
      ? ''
      : `${change >= 0 ? '+' : ''}${(change * 100).toFixed(1)} %${change > TOLERANCE ? ' REGRESSION' : ''}`;
  console.log(
    `| ${kind} | ${store} | ${value.toLocaleString('en-US')} | ${before?.toLocaleString('en-US') ?? '—'} | ${mark} |`,
  );
}
const idemOnExpress = (counts['new/express-null'] ?? NaN) - (counts['new/express-plain'] ?? NaN);
if (Number.isFinite(idemOnExpress))
  console.log(
    `\nIdem's Express middleware adds ${idemOnExpress.toLocaleString('en-US')} instructions to a new-key request.`,
  );
if (process.argv.includes('--update')) {
  writeFileSync(
    BASELINE,
    `${JSON.stringify({ node: process.version, n1: N1, n2: N2, counts: { ...baseline?.counts, ...counts } }, null, 2)}\n`,
  );
  progress(`baseline written to ${BASELINE}`);
}
if (regressions > 0) progress(`${regressions} figure(s) more than ${TOLERANCE * 100} % above the baseline`);
// For bench/run.ts, which puts the counts in docs/BENCHMARKS.md: one line it parses.
if (process.argv.includes('--json'))
  console.log(
    `JSON ${JSON.stringify({ n1: N1, n2: N2, tolerance: TOLERANCE, counts, baseline: baseline?.counts ?? {} })}`,
  );
