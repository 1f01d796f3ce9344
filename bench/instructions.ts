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
 * difference is what Idem adds to an Express request. `express-ioredis` is Idem on Redis through ioredis (the HTTP
 * benchmark's client), `express-redis` through node-redis 6, `express-ni` @node-idempotency on its own adapter
 * (node-redis 4), `express-floor` a new key's two raw commands through ioredis; the Express rows are also counted
 * late (`@1000-2000`, see LATE) and past the warm-up (`@11000-12000`, see STEADY). `fastify-*`, `hono-*` and
 * `web-*` are the same charge on Fastify, Hono on node:http and idem/http on node:http (`plain`: no Idem; `null`,
 * `ioredis`: Idem on those stores), past the warm-up only. `BENCH_INSTR_ONLY=new/express-null,…`
 * counts only those; runs go two at a time (`BENCH_INSTR_PARALLEL`).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BASELINE = join(ROOT, 'docs', 'bench', 'instructions.json');
const N1 = Number(process.env.BENCH_INSTR_N1 ?? 100);
const N2 = Number(process.env.BENCH_INSTR_N2 ?? 400);
/**
 * The Express + Redis comparison is also counted from request 1,000 to 2,000 (`@1000-2000`), closer to a server
 * that has run for a while. V8's optimizing compiler stays a large share of every Express count even there
 * (callgrind, Idem on ioredis: 1.05 M of 2.63 M per new key at 100..400, 1.11 M of 2.20 M at 1,000..2,000; Express
 * alone: 0.77 M of 1.69 M at 1,000..2,000): `--single-threaded` compiles on the main thread, where it is counted.
 */
const LATE = [1_000, 2_000] as const;
/**
 * And from request 11,000 to 12,000 (`@11000-12000`), past the warm-up: V8 has stopped compiling by then
 * (`--trace-opt` on the Express + Redis routes: about 100 optimizations in requests 1,000 to 2,000, none to 4 in any
 * thousand after 5,000). callgrind's instrumentation stays off until request STEADY_FROM (`--instr-atstart=no`,
 * switched on by `callgrind_control`), so the first 10,000 run at valgrind's uninstrumented speed; the two runs
 * both switch on there, and their difference is the window.
 */
const STEADY_WINDOW = (process.env.BENCH_INSTR_STEADY ?? '11000,12000,10000').split(',').map(Number);
const STEADY = [STEADY_WINDOW[0] ?? 11_000, STEADY_WINDOW[1] ?? 12_000] as const;
/** `BENCH_INSTR_STEADY=n1,n2,from` counts a shorter window past a shorter warm-up, for a quick before and after. */
const STEADY_FROM = STEADY_WINDOW[2] ?? 10_000;
/** What is counted: each request kind through the Web layer on each store, then Express over node:http. */
const CASES: ReadonlyArray<{ kind: string; store: string; window?: readonly [number, number]; from?: number }> = [
  ...['null', 'memory'].flatMap((store) => ['new', 'replay', 'mismatch', 'conflict'].map((kind) => ({ kind, store }))),
  { kind: 'new', store: 'express-plain' },
  { kind: 'new', store: 'express-null' },
  { kind: 'replay', store: 'express-null' },
  ...['express-redis', 'express-ni'].flatMap((store) => ['new', 'replay'].map((kind) => ({ kind, store }))),
  { kind: 'new', store: 'express-ioredis' },
  ...['express-plain', 'express-null', 'express-floor', 'express-ioredis', 'express-ni'].flatMap((store) => [
    { kind: 'new', store, window: LATE },
    { kind: 'new', store, window: STEADY, from: STEADY_FROM },
  ]),
  // The other frameworks, past the warm-up only: the route alone, Idem on a store that keeps nothing, Idem on Redis.
  ...['fastify', 'hono', 'web'].flatMap((framework) => [
    ...['plain', 'null', 'ioredis'].map((store) => ({
      kind: 'new',
      store: `${framework}-${store}`,
      window: STEADY,
      from: STEADY_FROM,
    })),
    { kind: 'replay', store: `${framework}-ioredis`, window: STEADY, from: STEADY_FROM },
  ]),
];
/** A case's name in the table and the baseline: `kind/store`, with `@n1-n2` when its window is not N1..N2. */
const nameOf = ({ kind, store, window }: (typeof CASES)[number]) =>
  `${kind}/${store}${window ? `@${window[0]}-${window[1]}` : ''}`;
/** The Redis the `express-redis`, `-ioredis` and `-ni` runs use; their keys are deleted at the end. */
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PREFIX = `instr:${process.pid}:`;
/** valgrind runs at once: counts do not depend on it (each run is one single-threaded process). */
const PARALLEL = Math.max(1, Number(process.env.BENCH_INSTR_PARALLEL ?? 2));
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
 * build counted 2,672,308 and 2,873,605 instructions per new key, a mark-compact inside the window or not). At 256
 * MB one fell near request 11,500 of the Express runs (`--trace-gc`, `BENCH_INSTR_TRACE=1`): inside the 12,000-run
 * and not the 11,000 one, it read as +21 % on `new/express-null@11000-12000` for a commit that changed nothing
 * there. A forced `gc()` before the window is no cure: it flushes compiled code, and the window then counts V8
 * compiling it again (+40 %). Scavenges, the GC that per-request garbage costs, still count.
 */
const NODE_FLAGS = ['--single-threaded', '--predictable', '--no-warnings', '--initial-old-space-size=2048'];

let runs = 0;
/**
 * Instructions for one run of `count` requests (the whole process), under its own Redis key prefix. A run that
 * fails is run once more: on a loaded machine, valgrind's pace can let a kept-alive socket lapse (ECONNRESET).
 */
async function count(kind: string, store: string, requests: number, from = 0): Promise<number> {
  const first = await countOnce(kind, store, requests, from);
  if (typeof first === 'number') return first;
  progress(`${kind}/${store} x${requests} failed, once more: ${first.why}`);
  const second = await countOnce(kind, store, requests, from);
  if (typeof second === 'number') return second;
  fail(`${kind}/${store} x${requests} failed: ${second.why}`);
}

function countOnce(kind: string, store: string, requests: number, from: number): Promise<number | { why: string }> {
  const run = ++runs;
  const out = join(work, `cg.${run}.out`);
  const args = ['--tool=callgrind', `--callgrind-out-file=${out}`];
  if (from > 0) args.push('--instr-atstart=no');
  args.push(process.execPath, ...NODE_FLAGS, bundle);
  const child = spawn('valgrind', [...args, kind, store, String(requests)], {
    env: {
      ...process.env,
      BENCH_REDIS_URL: REDIS_URL,
      BENCH_INSTR_PREFIX: `${PREFIX}${run}:`,
      BENCH_INSTR_FROM: String(from),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) =>
    child.once('close', (status) => {
      const match = /Collected : (\d+)/.exec(stderr);
      const why = stderr
        .split('\n')
        .filter((l) => !l.startsWith('=='))
        .join(' ')
        .trim();
      rmSync(out, { force: true });
      resolve(status !== 0 || !match ? { why } : Number(match[1]));
    }),
  );
}

const only = (process.env.BENCH_INSTR_ONLY ?? '').split(',').filter(Boolean);
const counts: Counts = {};
const todo = CASES.filter((c) => only.length === 0 || only.includes(nameOf(c)));
/** Each case's two runs, PARALLEL runs at a time; the counts are reported in CASES order. */
const pending = todo.flatMap((c) => (c.window ?? [N1, N2]).map((n) => ({ c, n })));
const totals = new Map<string, number>();
async function worker(): Promise<void> {
  for (let job = pending.shift(); job; job = pending.shift()) {
    const { c, n } = job;
    const started = Date.now();
    const total = await count(c.kind, c.store, n, c.from);
    totals.set(`${nameOf(c)}#${n}`, total);
    progress(`${nameOf(c).padEnd(32)} x${n} counted: ${total} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  }
}
await Promise.all(Array.from({ length: PARALLEL }, worker));
for (const c of todo) {
  const [n1, n2] = c.window ?? [N1, N2];
  const perRequest = Math.round(
    ((totals.get(`${nameOf(c)}#${n2}`) as number) - (totals.get(`${nameOf(c)}#${n1}`) as number)) / (n2 - n1),
  );
  counts[nameOf(c)] = perRequest;
  progress(`${nameOf(c).padEnd(32)} ${perRequest.toLocaleString('en-US').padStart(12)} instructions/request`);
}
rmSync(work, { recursive: true, force: true });
if (Object.keys(counts).some((name) => /redis|-ni|-floor/.test(name))) {
  const { createClient } = await import('@redis/client');
  const redis = await createClient({ url: REDIS_URL }).connect();
  for await (const keys of redis.scanIterator({ MATCH: `${PREFIX}*`, COUNT: 1000 }))
    if (keys.length > 0) await redis.del(keys);
  await redis.quit();
}

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
// The Express + Redis comparison in each of its windows: what Idem and @node-idempotency add to Express alone.
for (const [from, to] of [LATE, STEADY]) {
  const at = (store: string) => counts[`new/${store}@${from}-${to}`] ?? NaN;
  const [idemAdds, niAdds] = [at('express-ioredis') - at('express-plain'), at('express-ni') - at('express-plain')];
  if (Number.isFinite(idemAdds) && Number.isFinite(niAdds))
    console.log(
      `On Express + Redis, requests ${from} to ${to}: Idem (ioredis) adds ${idemAdds.toLocaleString('en-US')} instructions to a new key, @node-idempotency (node-redis 4) ${niAdds.toLocaleString('en-US')} (${(idemAdds / niAdds).toFixed(2)}x).`,
    );
}
// Past the warm-up on the other frameworks: what Idem adds to each route, and the Web layer against Hono.
{
  const at = (name: string) => counts[`${name}@${STEADY[0]}-${STEADY[1]}`] ?? NaN;
  const n = (value: number) => value.toLocaleString('en-US');
  for (const framework of ['fastify', 'hono', 'web']) {
    const plain = at(`new/${framework}-plain`);
    const [onNull, onRedis] = [at(`new/${framework}-null`) - plain, at(`new/${framework}-ioredis`) - plain];
    if (Number.isFinite(onNull) && Number.isFinite(onRedis))
      console.log(
        `On ${framework}, requests ${STEADY[0]} to ${STEADY[1]}: the route alone ${n(plain)} instructions; Idem adds ${n(onNull)} on a store that keeps nothing, ${n(onRedis)} on Redis (ioredis).`,
      );
  }
  for (const kind of ['new', 'replay']) {
    const [web, hono] = [at(`${kind}/web-ioredis`), at(`${kind}/hono-ioredis`)];
    if (Number.isFinite(web) && Number.isFinite(hono))
      console.log(
        `idem/http vs Hono on node:http (Redis), ${kind}: ${n(web)} vs ${n(hono)} instructions (${((web / hono) * 100).toFixed(1)} %).`,
      );
  }
}
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
