/**
 * @module `npm run bench [-- --quick] [-- --cpu-prof] [-- --report]`: Idem against no idempotency, against each store's raw floor,
 * and against the peers, on 127.0.0.1 with autocannon. Prints a table, writes docs/BENCHMARKS.md and docs/bench/*.svg
 * (a `--quick` run only prints; `--report` rewrites the docs from docs/bench/results.json and bench/notes.md).
 * Every server is its own process (bench/server.ts), so its `process.cpuUsage()` is its CPU per request.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import pg from 'pg';
import { section as storeWorkSection, type StoreWorkResult } from './store-report.js';
import { barChart } from './svg.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const QUICK = process.argv.includes('--quick');
const PROFILE = process.argv.includes('--cpu-prof');
const RUN = randomUUID().slice(0, 8);
const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

const SETTINGS = QUICK
  ? { rounds: 1, seconds: 0.75, warmup: 0.4, connections: 16, small: 10_000, large: 50_000, expired: 20_000 }
  : {
      rounds: Number(process.env.BENCH_ROUNDS ?? 4),
      seconds: Number(process.env.BENCH_SECONDS ?? 3),
      warmup: Number(process.env.BENCH_WARMUP ?? 3),
      connections: 16,
      small: 10_000,
      large: Number(process.env.BENCH_LARGE ?? 10_000_000),
      expired: Number(process.env.BENCH_EXPIRED ?? 1_000_000),
    };

const BODY = JSON.stringify({ amount: 500, currency: 'usd', source: 'tok_visa' });
type Kind = 'none' | 'new' | 'replay';

interface Load {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
  /** Server CPU (user + system) per request, µs. */
  cpuUs: number;
}

// ---- server processes ----------------------------------------------------------------------------------------------
interface Server {
  port: number;
  child: ChildProcess;
  url: string;
}

async function start(
  mode: string,
  store = 'memory',
  framework = 'express',
  root = ROOT,
  env: Record<string, string> = {},
): Promise<Server> {
  const args = ['--import', 'tsx'];
  if (PROFILE)
    args.push('--cpu-prof', `--cpu-prof-dir=${join(ROOT, 'bench', 'profiles', `${framework}-${mode}-${store}`)}`);
  args.push(join(root, 'bench', 'server.ts'));
  const child = spawn(process.execPath, args, {
    cwd: root,
    // bench/tsconfig.json has no source paths: `idem/*` resolves to the built dist, as in an application.
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: join(root, 'bench', 'tsconfig.json'),
      BENCH_MODE: mode,
      BENCH_STORE: store,
      BENCH_FRAMEWORK: framework,
      BENCH_RUN: RUN,
      BENCH_PG_URL: PG_URL,
      BENCH_REDIS_URL: REDIS_URL,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let errors = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    const text = chunk.toString();
    if (!text.includes('IDEM_SHORT_TTL') && !text.includes('--trace-warnings')) errors += text;
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${mode}/${store} did not start in 30 s: ${errors}`)), 30_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      const match = /READY (\d+)/.exec(chunk.toString());
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${mode}/${store} exited with ${code}: ${errors}`));
    });
  });
  return { port, child, url: `http://127.0.0.1:${port}` };
}

async function stop(server: Server): Promise<void> {
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  try {
    await fetch(`${server.url}/__close`, { method: 'POST', signal: AbortSignal.timeout(30_000) });
  } catch {
    server.child.kill();
  }
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
}

async function control<T = unknown>(server: Server, path: string, method = 'GET'): Promise<T> {
  const response = await fetch(`${server.url}${path}`, { method });
  return (await response.json()) as T;
}

// ---- load ----------------------------------------------------------------------------------------------------------
let keyCounter = 0;
const newKey = (): string => `bench:${RUN}:${++keyCounter}`;

function cannon(
  server: Server,
  path: string,
  kind: Kind,
  seconds: number,
  replayKey: string,
): Promise<autocannon.Result> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (kind === 'replay') headers['idempotency-key'] = replayKey;
  const request: autocannon.Request = { method: 'POST', path, headers, body: BODY };
  if (kind === 'new') {
    request.setupRequest = (req: autocannon.Request) => ({
      ...req,
      headers: { ...headers, 'idempotency-key': newKey() },
    });
  }
  return autocannon({ url: server.url, connections: SETTINGS.connections, duration: seconds, requests: [request] });
}

async function load(server: Server, path: string, kind: Kind, seconds = SETTINGS.seconds): Promise<Load> {
  const replayKey = newKey();
  if (kind === 'replay') {
    await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': replayKey },
      body: BODY,
    });
  }
  await cannon(server, path, kind, SETTINGS.warmup, replayKey);
  await control(server, '/__reset', 'POST');
  const result = await cannon(server, path, kind, seconds, replayKey);
  const cpu = await control<{ userUs: number; systemUs: number; requests: number }>(server, '/__cpu');
  if (result.non2xx + result.errors + result.timeouts > 0) {
    progress(
      `WARNING ${path} (${kind}): ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    cpuUs: cpu.requests > 0 ? (cpu.userUs + cpu.systemUs) / cpu.requests : NaN,
  };
}

/** One measurement taken in slices: the same route and key kind on the same server, across rounds. */
interface Slot {
  server: Server;
  path: string;
  kind: Kind;
  replayKey: string;
  slices: Load[];
}

async function prepare(server: Server, path: string, kind: Kind): Promise<Slot> {
  const replayKey = newKey();
  if (kind === 'replay') {
    await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': replayKey },
      body: BODY,
    });
  }
  await cannon(server, path, kind, SETTINGS.warmup, replayKey);
  return { server, path, kind, replayKey, slices: [] };
}

async function slice(slot: Slot): Promise<void> {
  await control(slot.server, '/__reset', 'POST');
  const result = await cannon(slot.server, slot.path, slot.kind, SETTINGS.seconds, slot.replayKey);
  const cpu = await control<{ userUs: number; systemUs: number; requests: number }>(slot.server, '/__cpu');
  if (result.non2xx + result.errors + result.timeouts > 0) {
    progress(
      `WARNING ${slot.path} (${slot.kind}): ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  slot.slices.push({
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: cpu.requests,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    cpuUs: cpu.userUs + cpu.systemUs,
  });
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/** Across slices: mean req/s, median p50/p99, total CPU over total requests. */
function combine(slot: Slot): Load {
  const s = slot.slices;
  const requests = s.reduce((a, l) => a + l.requests, 0);
  return {
    rps: s.reduce((a, l) => a + l.rps, 0) / s.length,
    p50: median(s.map((l) => l.p50)),
    p99: median(s.map((l) => l.p99)),
    requests,
    non2xx: s.reduce((a, l) => a + l.non2xx, 0),
    errors: s.reduce((a, l) => a + l.errors, 0),
    cpuUs: requests > 0 ? s.reduce((a, l) => a + l.cpuUs, 0) / requests : NaN,
  };
}

// ---- round trips and correctness -----------------------------------------------------------------------------------
interface Stats {
  executions: number;
  roundTrips: number;
}
const stats = (server: Server, key: string) => control<Stats>(server, `/__stats?key=${encodeURIComponent(key)}`);
const post = (server: Server, key: string, body = BODY, path = '/pay') =>
  fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body,
  });

async function untilExecuted(server: Server, key: string, count: number): Promise<void> {
  for (let i = 0; i < 200 && (await stats(server, key)).executions < count; i++) await sleep(10);
}

async function roundTrips(
  server: Server,
): Promise<Record<'new' | 'replay' | 'conflict' | 'mismatch' | 'cachedReplay', number>> {
  const key = newKey();
  const trips = async () => (await stats(server, key)).roundTrips;
  const r0 = await trips();
  await (await post(server, key)).arrayBuffer();
  const r1 = await trips();
  await (await post(server, key)).arrayBuffer();
  const r2 = await trips();
  await (await post(server, key, JSON.stringify({ amount: 999 }))).arrayBuffer();
  const r3 = await trips();
  const slow = newKey();
  await control(server, `/__delay?ms=${QUICK ? 600 : 1500}`, 'POST');
  const first = post(server, slow);
  await untilExecuted(server, slow, 1);
  await control(server, '/__delay?ms=0', 'POST');
  const c0 = (await stats(server, slow)).roundTrips;
  const conflict = await post(server, slow);
  await conflict.arrayBuffer();
  const c1 = (await stats(server, slow)).roundTrips;
  await (await first).arrayBuffer();
  if (conflict.status !== 409) console.warn(`conflict probe answered ${conflict.status}, not 409`);
  // The cached route: its first replay reads the store (and keeps the record), the next one must not.
  const hot = newKey();
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  const h0 = (await stats(server, hot)).roundTrips;
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  const h1 = (await stats(server, hot)).roundTrips;
  return { new: r1 - r0, replay: r2 - r1, mismatch: r3 - r2, conflict: c1 - c0, cachedReplay: h1 - h0 };
}

/** Rounds of the 20-concurrent test, each with its own key. */
const ROUNDS = QUICK ? 2 : 5;

interface Correctness {
  concurrent: string;
  executions: number;
  location: string;
  afterError: string;
}

async function correctness(server: Server): Promise<Correctness> {
  // 20 concurrent requests with one key, while the handler takes 200 ms.
  // ROUNDS rounds, each with its own key; `executions` is the most runs any one key got.
  await control(server, '/__delay?ms=200', 'POST');
  const answers: number[] = [];
  let executions = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const key = newKey();
    answers.push(
      ...(await Promise.all(
        Array.from({ length: 20 }, () => post(server, key).then(async (r) => (await r.arrayBuffer(), r.status))),
      )),
    );
    executions = Math.max(executions, (await stats(server, key)).executions);
  }
  await control(server, '/__delay?ms=0', 'POST');
  const byStatus = new Map<number, number>();
  for (const status of answers) byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
  const concurrent = [...byStatus]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${n}×${status}`)
    .join(' ');
  // A replay keeps the Location header?
  const located = newKey();
  const original = await post(server, located);
  await original.arrayBuffer();
  const replay = await post(server, located);
  await replay.arrayBuffer();
  const want = original.headers.get('location');
  const got = replay.headers.get('location');
  const location = want !== null && got === want ? 'kept' : `lost (${got ?? 'none'})`;
  // A thrown error, then a retry of the same key.
  const failing = newKey();
  await control(server, '/__fail-next', 'POST');
  const failed = await post(server, failing);
  await failed.arrayBuffer();
  await sleep(200);
  const retry = await post(server, failing);
  await retry.arrayBuffer();
  const ran = (await stats(server, failing)).executions;
  const afterError =
    ran === 2 && retry.status < 300
      ? `retryable (${failed.status}, retry ${retry.status} ran)`
      : ran === 1
        ? `not retryable (${failed.status}, retry ${retry.status} without running)`
        : `${failed.status}, retry ${retry.status}, ran ${ran}×`;
  return { concurrent, executions, location, afterError };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- the run -------------------------------------------------------------------------------------------------------
/** Frameworks other than Express, each with its own no-key route and Idem on Redis (bench/server.ts). */
const FRAMEWORKS = ['fastify', 'hono', 'web'] as const;
type Framework = (typeof FRAMEWORKS)[number];
const FRAMEWORK_NAMES: Record<Framework | 'express', string> = {
  express: 'Express 5',
  fastify: 'Fastify 5',
  hono: 'Hono 4 on node:http',
  web: 'idem/http on node:http',
};

/**
 * `npm run bench:instructions` as a section of this run: the counts, the baseline and the change (a regression over
 * the tolerance is marked). `--quick` counts the Express rows and the Web layer's new key only.
 */
function instructions(): Promise<Results['instructions']> {
  const env = { ...process.env };
  if (QUICK && !env.BENCH_INSTR_ONLY)
    env.BENCH_INSTR_ONLY = 'new/null,new/express-plain,new/express-null,replay/express-null';
  return new Promise<Results['instructions']>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', 'instructions.ts'), '--json'], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('exit', () => {
      const line = out.split('\n').find((l) => l.startsWith('JSON '));
      if (!line) progress('instruction counts unavailable (valgrind missing?)');
      resolve(line ? (JSON.parse(line.slice(5)) as Results['instructions']) : undefined);
    });
  });
}

const STORES = ['memory', 'sqlite', 'postgres', 'redis'] as const;
type StoreName = (typeof STORES)[number];
/** Stores whose bench server serves `/pay-local` (database-local work). */
const LOCAL_STORES: ReadonlySet<StoreName> = new Set(['sqlite', 'postgres']);
const PEERS = [
  { mode: 'ei', name: 'express-idempotency 1.0.6 + Redis adapter', trips: 'new 3 (GET, SET, SET), replay 1 (GET)' },
  {
    mode: 'pt',
    name: '@aws-lambda-powertools/idempotency 2.35 (CachePersistenceLayer)',
    trips: 'new 2 (SET NX, SET), replay 2 (SET NX, GET)',
  },
  {
    mode: 'ni',
    name: '@node-idempotency/core 1.0.11 + Redis adapter',
    trips: 'new 2 (SET NX, SET), replay 2 (SET NX, GET)',
  },
] as const;

/**
 * One framework's routes: no key, Idem on Redis (new keys, replays), replays with the engine's cache (`cached`), and
 * the floor's new keys (`floor`: no layer, two raw Redis commands). Runs before the cache and the floor have neither.
 */
interface FrameworkLoads {
  plain: Load;
  new: Load;
  replay: Load;
  cached?: Load;
  floor?: Load;
}

/** Express (from the store sections) and every other framework, in one list. */
function frameworkRows(r: Results): Array<[string, FrameworkLoads]> {
  const express: FrameworkLoads = {
    plain: r.plain,
    new: r.idem.redis.new,
    replay: r.idem.redis.replay,
    cached: r.idem.redis.cached,
    floor: r.floor.redis.write2,
  };
  return [['express', express], ...Object.entries(r.frameworks ?? {})];
}

interface Results {
  started: string;
  finished: string;
  quick: boolean;
  settings: typeof SETTINGS;
  machine: Record<string, string>;
  plain: Load;
  plainRuns: Load[];
  idem: Record<StoreName, { new: Load; replay: Load; cached: Load; trips: Awaited<ReturnType<typeof roundTrips>> }>;
  /** `local`: database-local work on the same route (`/pay-local`, SQL stores only). */
  floor: Record<StoreName, { write: Load; write2: Load; read: Load; local?: Load }>;
  peers: Array<{ mode: string; name: string; trips: string; new: Load; replay: Load; correctness: Correctness }>;
  idemCorrectness: Correctness;
  /** Idem's new keys on a store that keeps nothing (bench/server.ts `null`): the layer's own cost. */
  nullStore?: Load;
  /** The same route on other frameworks, each without Idem (no key) and with Idem on Redis (new keys, replays). */
  frameworks?: Record<Framework, FrameworkLoads>;
  /**
   * BENCH_AB_ROOT: another checkout (built) whose Express servers run beside this one's, for a before/after of a
   * change in the same run: its null-store new keys and Redis new keys and replays.
   */
  ab?: { label: string; null: Load; redisNew: Load; redisReplay: Load };
  /** Sections a reduced run left out (BENCH_SKIP). */
  skipped?: string[];
  /** Instructions per request kind (bench/instructions.ts), with the baseline they are compared to. */
  instructions?: {
    n1: number;
    n2: number;
    tolerance: number;
    counts: Record<string, number>;
    baseline: Record<string, number>;
    baselineLabel?: string;
  };
  scale: Record<
    'sqlite' | 'postgres',
    {
      smallN: number;
      largeN: number;
      seedMs: number;
      settleMs: number;
      small: Load;
      large: Load;
      expiredN: number;
      expiredSeedMs: number;
      before: Load;
      during: Load;
      sweep: { deleted: number; ms: number };
    }
  >;
}

function progress(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

async function versions(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  try {
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    const { rows } = await client.query<{ server_version: string }>('SHOW server_version');
    out.postgres = rows[0]?.server_version ?? '?';
    await client.end();
  } catch (error) {
    out.postgres = `unavailable (${String(error)})`;
  }
  try {
    const redis = new Redis(REDIS_URL, { lazyConnect: true });
    await redis.connect();
    out.redis = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? '?';
    redis.disconnect();
  } catch (error) {
    out.redis = `unavailable (${String(error)})`;
  }
  return out;
}

async function cleanRedis(): Promise<void> {
  const redis = new Redis(REDIS_URL);
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `bench:${RUN}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== '0');
  redis.disconnect();
}

/**
 * 10 thousand vs 10 million records, side by side: two servers of their own, each on a fresh table, one seeded to
 * each size, then measured in interleaved rounds like the overhead runs (so the machine's drift hits both). Then
 * the sweep, on the large one.
 */
async function scale(store: 'sqlite' | 'postgres'): Promise<Results['scale'][typeof store]> {
  const [smallServer, largeServer] = await Promise.all([start('idem', store), start('idem', store)]);
  try {
    const count = async (server: Server) => (await control<{ count: number }>(server, '/__count')).count;
    /** Seeds up to `total` live records in statements of at most 1M rows (each well inside a request timeout). */
    const seedTo = async (server: Server, total: number): Promise<number> => {
      let ms = 0;
      for (let have = await count(server); have < total; have = await count(server)) {
        ms += (await control<{ ms: number }>(server, `/__seed?count=${Math.min(1_000_000, total - have)}`, 'POST')).ms;
        progress(`scale on ${store}: ${r0(await count(server))} / ${r0(total)} records`);
      }
      return ms;
    };
    // A bulk seed leaves work behind (autovacuum and analyze, a checkpoint, the WAL): done before measuring, so
    // neither size pays for the seeding.
    const settle = async (server: Server) => (await control<{ ms: number }>(server, '/__settle', 'POST')).ms;
    const seedMs = (await seedTo(smallServer, SETTINGS.small)) + (await seedTo(largeServer, SETTINGS.large));
    let settleMs = (await settle(smallServer)) + (await settle(largeServer));
    const [smallN, largeN] = [await count(smallServer), await count(largeServer)];
    const small = await prepare(smallServer, '/pay', 'new');
    const large = await prepare(largeServer, '/pay', 'new');
    for (let round = 1; round <= SETTINGS.rounds; round++) {
      progress(`scale on ${store}, round ${round}/${SETTINGS.rounds}: ${r0(smallN)} vs ${r0(largeN)} records`);
      await slice(small);
      await slice(large);
    }
    progress(`sweep on ${store}: seeding ${SETTINGS.expired} expired records`);
    const expired = await control<{ ms: number }>(largeServer, `/__seed?count=${SETTINGS.expired}&expired=1`, 'POST');
    settleMs += await settle(largeServer);
    const before = await load(largeServer, '/pay', 'new');
    await control(largeServer, '/__sweep', 'POST');
    const during = await load(largeServer, '/pay', 'new', SETTINGS.seconds);
    let sweep = await control<{ running: boolean; deleted: number; ms: number }>(largeServer, '/__sweep');
    while (sweep.running) {
      await sleep(200);
      sweep = await control(largeServer, '/__sweep');
    }
    return {
      smallN,
      largeN,
      seedMs,
      settleMs,
      small: combine(small),
      large: combine(large),
      expiredN: SETTINGS.expired,
      expiredSeedMs: expired.ms,
      before,
      during,
      sweep: { deleted: sweep.deleted, ms: sweep.ms },
    };
  } finally {
    await Promise.all([stop(smallServer), stop(largeServer)]);
  }
}

async function main(): Promise<void> {
  const started = new Date();
  const load0 = loadavg();
  const cpu = cpus();
  progress(
    `run ${RUN}${QUICK ? ' (quick)' : ''}: ${SETTINGS.rounds} round(s) of ${SETTINGS.seconds} s per measurement, ${SETTINGS.connections} connections`,
  );
  const results = { started: started.toISOString(), quick: QUICK, settings: SETTINGS } as Results;
  results.machine = {
    cpu: `${cpu.length} × ${cpu[0]?.model ?? '?'}`,
    memory: `${Math.round(totalmem() / 2 ** 30)} GiB`,
    kernel: release(),
    node: process.version,
    loadStart: load0.map((n) => n.toFixed(2)).join(' '),
    ...(await versions()),
  };

  const only = (process.env.BENCH_ONLY ?? '').split(',').filter(Boolean);
  // BENCH_SKIP=scale,instructions: a reduced run that still writes the docs, saying what it left out.
  const skip = (process.env.BENCH_SKIP ?? '').split(',').filter(Boolean);
  if (skip.length > 0) results.skipped = skip;
  const want = (section: string) => !skip.includes(section) && (only.length === 0 || only.includes(section));
  try {
    // Every server stays up (idle servers cost nothing); the measurements are then taken in rounds, each round
    // visiting every route once, so a drift of the machine's load hits all of them alike.
    const servers: Server[] = [];
    const slots = new Map<string, Slot>();
    progress('starting servers, counting round trips, checking correctness, warming up');
    const stores = STORES.filter((store) => want(store));
    const peers = want('peers') ? PEERS : [];
    // Started together (each is an idle process until driven), then probed and warmed one at a time.
    const [plain, ...rest] = await Promise.all([
      start('plain'),
      ...stores.map((store) => start('idem', store)),
      ...peers.map((peer) => start(peer.mode)),
      start('idem', 'null'),
    ]);
    const nullStore = rest.pop() as Server;
    servers.push(plain, ...rest, nullStore);
    const abRoot = process.env.BENCH_AB_ROOT;
    if (abRoot) {
      const [abNull, abRedis] = await Promise.all([
        start('idem', 'null', 'express', abRoot),
        start('idem', 'redis', 'express', abRoot),
      ]);
      servers.push(abNull, abRedis);
      slots.set('ab:null:new', await prepare(abNull, '/pay', 'new'));
      slots.set('ab:redis:new', await prepare(abRedis, '/pay', 'new'));
      slots.set('ab:redis:replay', await prepare(abRedis, '/pay', 'replay'));
    }
    const frameworks = want('frameworks') ? FRAMEWORKS : [];
    // Per framework: the no-key route, Idem on Redis, the same with the engine's cache (replays), and the floor
    // (no layer, the two raw Redis commands of a new key around the same work).
    const frameworkServers = await Promise.all(
      frameworks.map(
        async (fw) =>
          [
            fw,
            await start('plain', 'memory', fw),
            await start('idem', 'redis', fw),
            await start('idem', 'redis', fw, ROOT, { BENCH_CACHE: '1' }),
            await start('floor', 'redis', fw),
          ] as const,
      ),
    );
    for (const [fw, bare, guarded, cached, floor] of frameworkServers) {
      servers.push(bare, guarded, cached, floor);
      slots.set(`${fw}:plain`, await prepare(bare, '/pay', 'none'));
      slots.set(`${fw}:new`, await prepare(guarded, '/pay', 'new'));
      slots.set(`${fw}:replay`, await prepare(guarded, '/pay', 'replay'));
      slots.set(`${fw}:cached`, await prepare(cached, '/pay', 'replay'));
      slots.set(`${fw}:floor`, await prepare(floor, '/pay', 'new'));
    }
    // Idem on a store that keeps nothing and answers at once: the layer's own CPU, without any store client's.
    slots.set('null:new', await prepare(nullStore, '/pay', 'new'));
    slots.set('plain', await prepare(plain, '/pay', 'none'));
    const idemServers = new Map<StoreName, Server>();
    results.idem = {} as Results['idem'];
    results.floor = {} as Results['floor'];
    results.scale = {} as Results['scale'];
    for (const [i, store] of stores.entries()) {
      const server = rest[i] as Server;
      idemServers.set(store, server);
      results.idem[store] = { trips: await roundTrips(server) } as Results['idem'][StoreName];
      if (store === 'redis') results.idemCorrectness = await correctness(server);
      slots.set(`${store}:new`, await prepare(server, '/pay', 'new'));
      slots.set(`${store}:replay`, await prepare(server, '/pay', 'replay'));
      slots.set(`${store}:cached`, await prepare(server, '/pay-cached', 'replay'));
      slots.set(`${store}:write`, await prepare(server, '/floor/write', 'new'));
      slots.set(`${store}:write2`, await prepare(server, '/floor/write2', 'new'));
      slots.set(`${store}:read`, await prepare(server, '/floor/read', 'replay'));
      if (LOCAL_STORES.has(store)) slots.set(`${store}:local`, await prepare(server, '/pay-local', 'new'));
    }
    results.peers = [];
    const peerCorrectness = new Map<string, Correctness>();
    for (const [i, peer] of peers.entries()) {
      const server = rest[stores.length + i] as Server;
      peerCorrectness.set(peer.mode, await correctness(server));
      slots.set(`${peer.mode}:new`, await prepare(server, '/pay', 'new'));
      slots.set(`${peer.mode}:replay`, await prepare(server, '/pay', 'replay'));
    }
    for (let round = 1; round <= SETTINGS.rounds; round++) {
      progress(`round ${round}/${SETTINGS.rounds}: ${slots.size} measurements of ${SETTINGS.seconds} s`);
      // A different order each round (rotated, and reversed every other round): what runs just before a route —
      // PostgreSQL's checkpoints after the SQL routes' writes, say — must not always fall on the same routes.
      const order = [...slots.values()];
      const shift = Math.floor(((round - 1) * order.length) / SETTINGS.rounds);
      const rotated = [...order.slice(shift), ...order.slice(0, shift)];
      for (const slot of round % 2 === 0 ? rotated.reverse() : rotated) await slice(slot);
    }
    const get = (id: string): Load => combine(slots.get(id) as Slot);
    results.plain = get('plain');
    results.plainRuns = (slots.get('plain') as Slot).slices;
    results.nullStore = get('null:new');
    if (abRoot)
      results.ab = {
        label: process.env.BENCH_AB_LABEL ?? abRoot,
        null: get('ab:null:new'),
        redisNew: get('ab:redis:new'),
        redisReplay: get('ab:redis:replay'),
      };
    if (frameworks.length > 0) {
      results.frameworks = {} as NonNullable<Results['frameworks']>;
      for (const fw of frameworks)
        results.frameworks[fw] = {
          plain: get(`${fw}:plain`),
          new: get(`${fw}:new`),
          replay: get(`${fw}:replay`),
          cached: get(`${fw}:cached`),
          floor: get(`${fw}:floor`),
        };
    }
    for (const store of idemServers.keys()) {
      results.idem[store] = {
        ...results.idem[store],
        new: get(`${store}:new`),
        replay: get(`${store}:replay`),
        cached: get(`${store}:cached`),
      };
      results.floor[store] = {
        write: get(`${store}:write`),
        write2: get(`${store}:write2`),
        read: get(`${store}:read`),
        ...(LOCAL_STORES.has(store) ? { local: get(`${store}:local`) } : {}),
      };
    }
    for (const peer of peers) {
      results.peers.push({
        ...peer,
        new: get(`${peer.mode}:new`),
        replay: get(`${peer.mode}:replay`),
        correctness: peerCorrectness.get(peer.mode) as Correctness,
      });
    }
    for (const server of servers) if (![...idemServers.values()].includes(server)) await stop(server);
    for (const server of idemServers.values()) await stop(server);
    for (const store of ['sqlite', 'postgres'] as const) {
      if (idemServers.has(store) && want('scale')) results.scale[store] = await scale(store);
    }
  } finally {
    await cleanRedis();
  }
  if (want('instructions')) {
    progress('counting instructions per request kind (valgrind)');
    const counted = await instructions();
    if (counted) results.instructions = counted;
  }
  results.finished = new Date().toISOString();
  results.machine.loadEnd = loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
  // Kept before the report, so a report that fails can be redone from it (`--report` reads docs/bench/results.json).
  writeFileSync(join(tmpdir(), `idem-bench-${RUN}.json`), JSON.stringify(results, null, 2) + '\n');
  if (only.length > 0) console.log(JSON.stringify(results, null, 2));
  else report(results);
}

// ---- report --------------------------------------------------------------------------------------------------------
const r0 = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
const r1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '–');
const pct = (a: number, b: number) => (b > 0 ? `${Math.round((a / b) * 100)} %` : '–');
const ms = (n: number) => `${n} ms`;

interface Target {
  name: string;
  measured: string;
  met: boolean;
  /** Measured against required, where it is one number: 1 or more is met (the targets chart). */
  ratio?: number;
}

function targets(r: Results): Target[] {
  const out: Target[] = [];
  const addedCpu = (l: Load) => l.cpuUs - r.plain.cpuUs;
  if (r.peers.length > 0) {
    // Issue 15, item 1: new keys on Express + Redis against the peers, side by side.
    const ours = addedCpu(r.idem.redis.new);
    const peers = r.peers.map((p) => ({ name: p.mode, cpu: addedCpu(p.new), rps: p.new.rps }));
    const leanest = peers.reduce((a, b) => (b.cpu < a.cpu ? b : a));
    const fastest = peers.reduce((a, b) => (b.rps > a.rps ? b : a));
    out.push({
      name: 'Added CPU per new key ≤ the leanest peer (Express + Redis)',
      measured: `${r1(ours)} µs vs ${r1(leanest.cpu)} µs (${leanest.name}): ${(ours / leanest.cpu).toFixed(2)}×`,
      met: ours <= leanest.cpu,
      ratio: leanest.cpu / ours,
    });
    out.push({
      name: 'New-key throughput ≥ the best peer (Express + Redis)',
      measured: `${r0(r.idem.redis.new.rps)} vs ${r0(fastest.rps)} req/s (${fastest.name}): ${pct(r.idem.redis.new.rps, fastest.rps)}`,
      met: r.idem.redis.new.rps >= fastest.rps,
      ratio: r.idem.redis.new.rps / fastest.rps,
    });
  }
  // Issue 15, items 1 and 2: the same comparison in instructions, which repeat where times do not: past the
  // warm-up (requests 11,000 to 12,000), with the late warm-up window (1,000 to 2,000, V8 still compiling) beside it.
  const addedInstructions = (window: string) => {
    const at = (store: string) => r.instructions?.counts[`new/${store}@${window}`];
    const [plainI, idemI, niI] = [at('express-plain'), at('express-ioredis'), at('express-ni')];
    return plainI === undefined || idemI === undefined || niI === undefined
      ? undefined
      : { ours: idemI - plainI, theirs: niI - plainI };
  };
  const [steady, warming] = [addedInstructions('11000-12000'), addedInstructions('1000-2000')];
  const measured = steady ?? warming;
  if (measured) {
    const { ours, theirs } = measured;
    const beside = steady && warming ? `; requests 1,000–2,000: ${r0(warming.ours)} vs ${r0(warming.theirs)}` : '';
    out.push({
      name: `Instructions added per new key ≤ the leanest peer’s (Express + Redis, requests ${steady ? '11,000–12,000' : '1,000–2,000'})`,
      measured: `${r0(ours)} vs ${r0(theirs)} (ni): ${(ours / theirs).toFixed(2)}×${beside}`,
      met: ours <= theirs,
      ratio: theirs / ours,
    });
  }
  // Issue 15, item 3: on frameworks that do not cap the throughput, Idem's routes against the same framework's no-key route.
  for (const [fw, f] of frameworkRows(r)) {
    const name = FRAMEWORK_NAMES[fw as Framework] ?? fw;
    const floor = f.floor
      ? `; the floor, two raw Redis commands and no layer: ${pct(f.floor.rps, f.plain.rps)} (${r0(f.floor.rps)} req/s)`
      : '';
    out.push({
      name: `New keys ≥ 70 % of the no-key route (${name}, Redis)`,
      measured: `${pct(f.new.rps, f.plain.rps)} (${r0(f.new.rps)} / ${r0(f.plain.rps)} req/s)${floor}`,
      met: f.new.rps >= 0.7 * f.plain.rps,
      ratio: f.new.rps / f.plain.rps / 0.7,
    });
    // Hot replays are what the engine's cache is for: read on the cached route where the run has one, the
    // uncached route (one store read per replay) beside it.
    const replay = f.cached ?? f.replay;
    out.push({
      name: `Replays ≥ 95 % of the no-key route (${name}, Redis)`,
      measured: f.cached
        ? `${pct(f.cached.rps, f.plain.rps)} with the cache (${r0(f.cached.rps)} / ${r0(f.plain.rps)} req/s); ${pct(f.replay.rps, f.plain.rps)} without (${r0(f.replay.rps)} req/s)`
        : `${pct(f.replay.rps, f.plain.rps)} (${r0(f.replay.rps)} / ${r0(f.plain.rps)} req/s), no cache`,
      met: replay.rps >= 0.95 * f.plain.rps,
      ratio: replay.rps / f.plain.rps / 0.95,
    });
  }
  // Issue 15, item 5: the Web layer on node:http costs no more per request than Hono on node:http, same bridge.
  const web = r.frameworks?.web;
  const hono = r.frameworks?.hono;
  if (web && hono) {
    for (const kind of ['new', 'replay'] as const) {
      out.push({
        name: `idem/http on node:http: CPU per ${kind === 'new' ? 'new key' : 'replay'} ≤ Hono on node:http's`,
        measured: `${r1(web[kind].cpuUs)} vs ${r1(hono[kind].cpuUs)} µs/request (${((web[kind].cpuUs / hono[kind].cpuUs) * 100).toFixed(0)} %)`,
        met: web[kind].cpuUs <= hono[kind].cpuUs,
        ratio: hono[kind].cpuUs / web[kind].cpuUs,
      });
    }
  }
  // The same comparison in instructions, past the warm-up, which repeat where the CPU times above do not.
  for (const kind of ['new', 'replay'] as const) {
    const at = (store: string) => r.instructions?.counts[`${kind}/${store}@11000-12000`];
    const [webI, honoI] = [at('web-ioredis'), at('hono-ioredis')];
    if (webI === undefined || honoI === undefined) continue;
    out.push({
      name: `idem/http on node:http: instructions per ${kind === 'new' ? 'new key' : 'replay'} ≤ Hono on node:http's (Redis, requests 11,000–12,000)`,
      measured: `${r0(webI)} vs ${r0(honoI)} (${((webI / honoI) * 100).toFixed(1)} %)`,
      met: webI <= honoI,
      ratio: honoI / webI,
    });
  }
  for (const store of ['redis', 'sqlite'] as const) {
    // Hot replays are what the engine's cache is for (issue 9 item 3): the target is read on the cached route;
    // the uncached route, one store read per replay, is shown beside it.
    const ratio = r.idem[store].cached.rps / r.plain.rps;
    out.push({
      name: `Replays ≥ 95 % of the no-key route (${store})`,
      measured: `${(ratio * 100).toFixed(0)} % with the cache (${r0(r.idem[store].cached.rps)} / ${r0(r.plain.rps)} req/s); ${pct(r.idem[store].replay.rps, r.plain.rps)} without (${r0(r.idem[store].replay.rps)} req/s)`,
      met: ratio >= 0.95,
    });
  }
  const redisNew = r.idem.redis.new.rps / r.plain.rps;
  out.push({
    name: 'New keys ≥ 80 % of the no-key route (Redis)',
    measured: `${(redisNew * 100).toFixed(0)} % (${r0(r.idem.redis.new.rps)} / ${r0(r.plain.rps)} req/s)`,
    met: redisNew >= 0.8,
  });
  const pgFloor1 = r.idem.postgres.new.rps / r.floor.postgres.write.rps;
  const pgFloor2 = r.idem.postgres.new.rps / r.floor.postgres.write2.rps;
  out.push({
    name: 'New keys ≥ 90 % of the raw store floor (Postgres)',
    measured: `${(pgFloor1 * 100).toFixed(0)} % of 1 raw INSERT … ON CONFLICT (${r0(r.floor.postgres.write.rps)} req/s); ${(pgFloor2 * 100).toFixed(0)} % of the raw INSERT + UPDATE pair (${r0(r.floor.postgres.write2.rps)} req/s)`,
    met: pgFloor1 >= 0.9,
  });
  // Issue 15, item 4: database-local work (claim, the handler's ledger row and the record in one transaction)
  // against one raw INSERT … ON CONFLICT on the same route.
  for (const store of ['sqlite', 'postgres'] as const) {
    const local = r.floor[store]?.local;
    if (!local) continue;
    const ratio = local.rps / r.floor[store].write.rps;
    out.push({
      name: `Local new keys ≥ 0.9× one raw INSERT … ON CONFLICT on the same route (${store})`,
      measured: `${ratio.toFixed(2)}× (${r0(local.rps)} / ${r0(r.floor[store].write.rps)} req/s); the lease path: ${(r.idem[store].new.rps / r.floor[store].write.rps).toFixed(2)}×`,
      met: ratio >= 0.9,
      ratio: ratio / 0.9,
    });
  }
  const added = (l: Load) => l.cpuUs - r.plain.cpuUs;
  for (const kind of ['new', 'replay'] as const) {
    // Replays: Idem with its cache (a peer has none to turn on); new keys never touch the cache.
    const idemLoad = kind === 'new' ? r.idem.redis.new : r.idem.redis.cached;
    const ours = added(idemLoad);
    const peers = r.peers.map((p) => ({ name: p.mode, cpu: added(p[kind]), rps: p[kind].rps }));
    const leanest = peers.reduce((a, b) => (b.cpu < a.cpu ? b : a));
    const fastest = peers.reduce((a, b) => (b.rps > a.rps ? b : a));
    out.push({
      name: `Added CPU/request ≤ ½ of the leanest peer (${kind} keys, Redis)`,
      // A replay skips the handler, so a peer's added CPU can be negative; then the ratio means nothing, the gap does.
      measured:
        leanest.cpu > 0
          ? `${r1(ours)} µs vs ${r1(leanest.cpu)} µs (${leanest.name}): ${(ours / leanest.cpu).toFixed(2)}×`
          : `${r1(ours)} µs vs ${r1(leanest.cpu)} µs (${leanest.name}; negative, i.e. below the no-key route: noise, or a replay skipping the handler): difference ${r1(ours - leanest.cpu)} µs`,
      met: ours <= leanest.cpu / 2,
    });
    out.push({
      name: `Throughput ≥ the best peer (${kind} keys, Redis)`,
      measured: `${r0(idemLoad.rps)} vs ${r0(fastest.rps)} req/s (${fastest.name}): ${pct(idemLoad.rps, fastest.rps)}${kind === 'replay' ? ` (without the cache: ${r0(r.idem.redis.replay.rps)} req/s, ${pct(r.idem.redis.replay.rps, fastest.rps)})` : ''}`,
      met: idemLoad.rps >= fastest.rps,
    });
  }
  for (const store of ['sqlite', 'postgres'] as const) {
    const s = r.scale[store];
    if (!s) continue;
    const ratio = s.large.rps / s.small.rps;
    out.push({
      name: `${r0(s.largeN)} records ≥ 90 % of ${r0(s.smallN)} (${store}, new keys)`,
      measured: `${(ratio * 100).toFixed(0)} % (${r0(s.large.rps)} / ${r0(s.small.rps)} req/s)`,
      met: ratio >= 0.9,
    });
    const p99 = s.during.p99 / s.before.p99;
    out.push({
      name: `p99 during a sweep ≤ 1.5× before (${store})`,
      measured: `${p99.toFixed(2)}× (${s.during.p99} ms vs ${s.before.p99} ms; swept ${r0(s.sweep.deleted)} rows in ${ms(s.sweep.ms)})`,
      met: p99 <= 1.5,
    });
  }
  return out;
}

function loadRow(label: string, l: Load, base: Load): string {
  return `| ${label} | ${r0(l.rps)} | ${pct(l.rps, base.rps)} | ${l.p50} | ${l.p99} | ${r1(l.cpuUs)} | ${r1(l.cpuUs - base.cpuUs)} | ${l.non2xx + l.errors} |`;
}

function report(r: Results): void {
  const lines: string[] = [];
  const head =
    '| route | req/s | vs no key | p50 ms | p99 ms | CPU µs/req | added CPU µs/req | non-2xx + errors |\n|---|---:|---:|---:|---:|---:|---:|---:|';
  lines.push(
    '## Overhead: the same Express route with Idem vs without (no key)',
    '',
    head,
    loadRow('no Idem, no key', r.plain, r.plain),
  );
  for (const store of STORES) {
    lines.push(loadRow(`Idem ${store}, new keys`, r.idem[store].new, r.plain));
    lines.push(loadRow(`Idem ${store}, replays`, r.idem[store].replay, r.plain));
    lines.push(loadRow(`Idem ${store}, replays, cache on`, r.idem[store].cached, r.plain));
  }
  if (r.nullStore) lines.push(loadRow('Idem on a null store (keeps nothing), new keys', r.nullStore, r.plain));
  lines.push('', '![Requests/s per route](bench/overhead.svg)', '', '![Added CPU per request](bench/cpu.svg)');
  if (r.ab) {
    lines.push('', `## Before and after, side by side: ${r.ab.label} vs this build (Express)`, '');
    lines.push(
      '| route | before req/s | after req/s | after / before | before added CPU µs/req | after added CPU µs/req | CPU saved µs/req |',
      '|---|---:|---:|---:|---:|---:|---:|',
    );
    const pairs: Array<[string, Load, Load]> = [
      ['null store, new keys', r.ab.null, r.nullStore as Load],
      ['Redis, new keys', r.ab.redisNew, r.idem.redis.new],
      ['Redis, replays', r.ab.redisReplay, r.idem.redis.replay],
    ];
    for (const [label, before, after] of pairs) {
      lines.push(
        `| ${label} | ${r0(before.rps)} | ${r0(after.rps)} | ${pct(after.rps, before.rps)} | ${r1(before.cpuUs - r.plain.cpuUs)} | ${r1(after.cpuUs - r.plain.cpuUs)} | ${r1(before.cpuUs - after.cpuUs)} |`,
      );
    }
    lines.push('', '![Before and after](bench/before-after.svg)');
  }
  if (r.frameworks) {
    lines.push('', '## Frameworks: the same route on each, without Idem (no key) and with Idem on Redis', '');
    lines.push(
      "Hono and idem/http are served from node:http through one bridge (bench/server.ts `bridge`: a Web `Request` over the message, the `Response` written back), as @hono/node-server and the demo's node adapter do; Fastify through its own server. Each framework's no-key route is its own baseline.",
      '',
    );
    lines.push(
      "The floor is the same framework's route with no layer, doing only a new key's two raw Redis commands (`SET NX`, then `SET XX`) around the same work, on the same ioredis client: what any layer keeping the key in Redis pays at least. Cached replays are Idem's route with `cacheSize` (a server of its own).",
      '',
      '| framework | no key req/s | floor req/s | floor / no key | new keys req/s | new / no key | replays req/s | replays / no key | cached replays / no key | CPU µs/req no key | added CPU µs/req floor | added CPU µs/req new | added CPU µs/req replay |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    const dash = (value: Load | undefined, show: (load: Load) => string) => (value ? show(value) : '—');
    for (const [fw, f] of frameworkRows(r)) {
      lines.push(
        `| ${FRAMEWORK_NAMES[fw as Framework] ?? fw} | ${r0(f.plain.rps)} | ${dash(f.floor, (l) => r0(l.rps))} | ${dash(f.floor, (l) => pct(l.rps, f.plain.rps))} | ${r0(f.new.rps)} | ${pct(f.new.rps, f.plain.rps)} | ${r0(f.replay.rps)} | ${pct(f.replay.rps, f.plain.rps)} | ${dash(f.cached, (l) => pct(l.rps, f.plain.rps))} | ${r1(f.plain.cpuUs)} | ${dash(f.floor, (l) => r1(l.cpuUs - f.plain.cpuUs))} | ${r1(f.new.cpuUs - f.plain.cpuUs)} | ${r1(f.replay.cpuUs - f.plain.cpuUs)} |`,
      );
    }
    lines.push('', '![Requests/s per framework](bench/frameworks.svg)');
  }
  if (r.instructions) {
    const ins = r.instructions;
    lines.push(
      '',
      `## Instructions per request (valgrind callgrind, (count at ${ins.n2} − count at ${ins.n1}) / ${ins.n2 - ins.n1} requests)`,
      '',
    );
    lines.push(
      `Deterministic where the timings above are not: a change of more than ${ins.tolerance * 100} % against the baseline (${ins.baselineLabel ?? 'docs/bench/instructions.json'}) is marked **REGRESSION**. \`null\` and \`memory\` are the Web layer in process (bench/instructions-run.ts); \`express-plain\` is the Express route with no key, \`express-null\` the same route behind Idem's Express middleware on a store that keeps nothing, over node:http; \`express-ioredis\` is Idem on the Redis store through ioredis (as in the HTTP runs), \`express-redis\` the same through node-redis 6, \`express-ni\` @node-idempotency on its own Redis adapter (node-redis 4), and \`express-floor\` the route with no layer, only a new key's two commands (\`SET NX\`, \`SET XX\`) through ioredis; one request at a time against the local Redis. \`fastify-*\`, \`hono-*\` and \`web-*\` are the same charge on Fastify 5, on Hono 4 and on idem/http, the last two served from node:http through the HTTP runs' bridge: \`plain\` without Idem, \`null\` and \`ioredis\` with Idem on those stores. Rows marked \`@1000-2000\` are counted from request 1,000 to 2,000 instead, and \`@11000-12000\` from request 11,000 to 12,000, past the warm-up (callgrind's instrumentation switched on at request 10,000). V8's optimizing compiler is a large share of every Express count in the first two windows (Idem on ioredis: 1.05 M of 2.63 M per new key at 100–400, 1.11 M of 2.20 M at 1,000–2,000; Express alone 0.77 M of 1.69 M at 1,000–2,000): with \`--single-threaded\` it compiles on the main thread, where it is counted. It is warm-up: \`--trace-opt\` on these routes counts about 100 optimizations in requests 1,000 to 2,000 and none to 4 in any thousand after 5,000.`,
      '',
    );
    lines.push('| request | store | instructions / request | baseline | change |', '|---|---|---:|---:|---:|');
    for (const [name, value] of Object.entries(ins.counts)) {
      const [kind, store] = name.split('/') as [string, string];
      const before = ins.baseline[name];
      const change = before ? (value - before) / before : undefined;
      const mark =
        change === undefined
          ? ''
          : `${change >= 0 ? '+' : ''}${(change * 100).toFixed(1)} %${change > ins.tolerance ? ' **REGRESSION**' : ''}`;
      lines.push(`| ${kind} | ${store} | ${r0(value)} | ${before === undefined ? '—' : r0(before)} | ${mark} |`);
    }
    lines.push('', '![Instructions per request](bench/instructions.svg)');
  }
  lines.push('', "## Floor: the store's raw operations on the same route", '');
  lines.push(
    '| store | raw conditional write req/s | raw write + update req/s | raw point read req/s | Idem new / write | Idem new / write+update | Idem replay / read | Idem local new req/s | local / write |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  );
  for (const store of STORES) {
    const f = r.floor[store];
    const i = r.idem[store];
    lines.push(
      `| ${store} | ${r0(f.write.rps)} | ${r0(f.write2.rps)} | ${r0(f.read.rps)} | ${pct(i.new.rps, f.write.rps)} | ${pct(i.new.rps, f.write2.rps)} | ${pct(i.replay.rps, f.read.rps)} | ${f.local ? r0(f.local.rps) : '—'} | ${f.local ? pct(f.local.rps, f.write.rps) : '—'} |`,
    );
  }
  lines.push('', '![Idem against the raw floor](bench/floor.svg)');
  lines.push('', '## Round trips per request kind (counted by the store, one request at a time)', '');
  lines.push(
    '| store | new key | replay | conflict (409 while in progress) | mismatch | cached replay |',
    '|---|---:|---:|---:|---:|---:|',
  );
  for (const store of STORES) {
    const t = r.idem[store].trips;
    lines.push(`| ${store} | ${t.new} | ${t.replay} | ${t.conflict} | ${t.mismatch} | ${t.cachedReplay} |`);
  }
  lines.push('| [DESIGN.md budget](DESIGN.md#round-trip-budget) | 2 | 1 | 1 | 1 | 0 |');
  lines.push('', '![Round trips per request kind](bench/trips.svg)');
  lines.push('', '## Peers: same Express, same Redis, same handler, same TTL (1 h) and in-progress lease (10 s)', '');
  lines.push(
    '| layer | new req/s | replay req/s | added CPU µs/req new | added CPU µs/req replay | Redis commands (from source) | 20 concurrent same-key | handler runs | Location on replay | after a thrown error |',
    '|---|---:|---:|---:|---:|---|---|---:|---|---|',
  );
  const idemC = r.idemCorrectness;
  const t = r.idem.redis.trips;
  const c = r.idem.redis.cached;
  lines.push(
    `| **Idem** (redisStore, ioredis) | ${r0(r.idem.redis.new.rps)} | ${r0(r.idem.redis.replay.rps)} (cache on: ${r0(c.rps)}) | ${r1(r.idem.redis.new.cpuUs - r.plain.cpuUs)} | ${r1(r.idem.redis.replay.cpuUs - r.plain.cpuUs)} (cache on: ${r1(c.cpuUs - r.plain.cpuUs)}) | new ${t.new} (EVALSHA claim, complete), replay ${t.replay} (measured) | ${idemC.concurrent} | ${idemC.executions} | ${idemC.location} | ${idemC.afterError} |`,
  );
  for (const p of r.peers) {
    const c = p.correctness;
    const flag = c.executions > 1 ? ' **double-executes**' : '';
    lines.push(
      `| ${p.name} | ${r0(p.new.rps)} | ${r0(p.replay.rps)} | ${r1(p.new.cpuUs - r.plain.cpuUs)} | ${r1(p.replay.cpuUs - r.plain.cpuUs)} | ${p.trips} | ${c.concurrent} | ${c.executions}${flag} | ${c.location} | ${c.afterError} |`,
    );
  }
  lines.push(
    '',
    '![Idem vs peers, requests/s](bench/peers.svg)',
    '',
    '![Idem vs peers, added CPU](bench/peers-cpu.svg)',
  );
  const scaled = (['sqlite', 'postgres'] as const).filter((store) => r.scale[store]);
  if (scaled.length > 0) lines.push('', '## Scale and sweep (Idem, new keys)', '');
  if (scaled.length > 0)
    lines.push(
      '| store | req/s at small N | req/s at large N | large / small | seeding | p99 before sweep | p99 during sweep | during / before | sweep |',
      '|---|---:|---:|---:|---|---:|---:|---:|---|',
    );
  for (const store of scaled) {
    const s = r.scale[store];
    lines.push(
      `| ${store} | ${r0(s.small.rps)} (${r0(s.smallN)}) | ${r0(s.large.rps)} (${r0(s.largeN)}) | ${pct(s.large.rps, s.small.rps)} | ${r0(s.largeN)} rows in ${ms(s.seedMs)}, ${r0(s.expiredN)} expired in ${ms(s.expiredSeedMs)}; settling (vacuum, checkpoint) ${ms(s.settleMs ?? 0)} | ${s.before.p99} ms | ${s.during.p99} ms | ${(s.during.p99 / s.before.p99).toFixed(2)}× | ${r0(s.sweep.deleted)} rows in ${ms(s.sweep.ms)} |`,
    );
  }
  const tgt = targets(r);
  if (scaled.length > 0) lines.push('', '![Scale and sweep](bench/scale.svg)');
  const targetLines = [
    '| target | measured | met |',
    '|---|---|---|',
    ...tgt.map((x) => `| ${x.name} | ${x.measured} | ${x.met ? 'yes' : '**no**'} |`),
    '',
    '![Targets: measured / required](bench/targets.svg)',
  ];

  const met = tgt.filter((x) => x.met).length;
  const summary = `**${met} of ${tgt.length} targets met** in this run.`;
  console.log(['', summary, '', ...targetLines, '', ...lines].join('\n'));
  if (r.quick) {
    // docs/BENCHMARKS.md holds the last full run; a quick run is a smoke test and only prints.
    const file = join(tmpdir(), `idem-bench-quick-${RUN}.json`);
    writeFileSync(file, JSON.stringify(r, null, 2) + '\n');
    progress(`quick run: docs/ left as they are (they hold the last full run); results in ${file}`);
    return;
  }

  const notesFile = join(ROOT, 'bench', 'notes.md');
  const notes = existsSync(notesFile) ? readFileSync(notesFile, 'utf8') : '';
  // The store-work section, from its own script's last run (`npm run bench:store -- --write`, bench/store-work.ts).
  const storeWorkFile = join(ROOT, 'docs', 'bench', 'store-work.json');
  const storeWork = existsSync(storeWorkFile)
    ? ['', storeWorkSection(JSON.parse(readFileSync(storeWorkFile, 'utf8')) as StoreWorkResult)]
    : [];
  const m = r.machine;
  const doc = [
    '# Benchmarks',
    '',
    `Generated by \`npm run bench${r.quick ? ' -- --quick' : ''}\` (bench/run.ts) on ${r.started} — finished ${r.finished}. Every figure below is from that one run, measured side by side; ratios are what to read, absolute numbers are this machine's. Nothing here is a timed test.`,
    '',
    `**Machine:** ${m.cpu}, ${m.memory}, Linux ${m.kernel}, Node ${m.node}, PostgreSQL ${m.postgres}, Redis ${m.redis}. Shared and noisy: load average at start ${m.loadStart}, at end ${m.loadEnd} (1/5/15 min) — other work was running. Server processes, PostgreSQL, Redis and autocannon share the same 2 cores.`,
    '',
    `**Method:** each server is its own Node process (bench/server.ts) on 127.0.0.1 with the same Express 5 app and handler (\`POST /pay\`: JSON body parsed, 201 with \`Location\` and a small JSON body). Every server is started and warmed up (${r.settings.warmup} s of its own load per route), then the measurements are taken in ${r.settings.rounds} round(s), each round driving every route in turn for ${r.settings.seconds} s with autocannon (${r.settings.connections} connections) — interleaved, so the machine's drift hits every route alike, in an order rotated each round and reversed every other round, so that no route always follows the same one (the SQL routes leave PostgreSQL checkpointing); req/s is the mean over rounds, p50/p99 the median of the rounds' percentiles. The no-Idem route's req/s per round was ${r.plainRuns.map((l) => r0(l.rps)).join(', ')} — the spread is this machine's noise. New keys get a fresh \`Idempotency-Key\` per request (\`setupRequest\`), replays reuse one completed key. CPU per request is the server's \`process.cpuUsage()\` (user + system) over the measured requests; *added CPU* subtracts the no-Idem route's. p50/p99 are autocannon's latency percentiles in ms (integer resolution).`,
    '',
    ...(r.skipped?.length || r.settings.rounds < 4 || r.settings.seconds < 3
      ? [
          `**Reduced run:** ${r.settings.rounds} round(s) of ${r.settings.seconds} s (the full run: 4 of 3 s), warm-up ${r.settings.warmup} s (full: 3 s)${r.skipped?.length ? `; sections left out: ${r.skipped.join(', ')}${r.skipped.includes('scale') ? ' (the scale and sweep table and targets are absent)' : ''}` : ''}. Chosen for a machine at load ~15; see the notes below.`,
          '',
        ]
      : []),
    '## Targets (issue 15, then issue 9)',
    '',
    summary,
    '',
    ...targetLines,
    '',
    ...lines,
    ...storeWork,
    '',
    notes,
    '',
  ].join('\n');
  mkdirSync(join(ROOT, 'docs', 'bench'), { recursive: true });
  writeFileSync(join(ROOT, 'docs', 'BENCHMARKS.md'), doc);
  writeFileSync(join(ROOT, 'docs', 'bench', 'results.json'), JSON.stringify(r, null, 2) + '\n');

  const overhead = [{ label: 'no Idem (no key)', value: r.plain.rps }];
  for (const store of STORES) {
    overhead.push({ label: `${store}: new keys`, value: r.idem[store].new.rps });
    overhead.push({ label: `${store}: replays`, value: r.idem[store].replay.rps });
    overhead.push({ label: `${store}: replays, cache on`, value: r.idem[store].cached.rps });
    overhead.push({ label: `${store}: raw write+update floor`, value: r.floor[store].write2.rps });
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'overhead.svg'),
    barChart('Requests/s, same Express route (higher is better)', overhead, 'req/s'),
  );
  const peers = [
    { label: 'Idem: new keys', value: r.idem.redis.new.rps },
    { label: 'Idem: replays', value: r.idem.redis.replay.rps },
    { label: 'Idem: replays, cache on', value: r.idem.redis.cached.rps },
  ];
  const cpuBars = [
    { label: 'Idem: new keys', value: r.idem.redis.new.cpuUs - r.plain.cpuUs },
    { label: 'Idem: replays', value: r.idem.redis.replay.cpuUs - r.plain.cpuUs },
    { label: 'Idem: replays, cache on', value: r.idem.redis.cached.cpuUs - r.plain.cpuUs },
  ];
  for (const p of r.peers) {
    peers.push(
      { label: `${p.mode}: new keys`, value: p.new.rps },
      { label: `${p.mode}: replays`, value: p.replay.rps },
    );
    cpuBars.push(
      { label: `${p.mode}: new keys`, value: p.new.cpuUs - r.plain.cpuUs },
      { label: `${p.mode}: replays`, value: p.replay.cpuUs - r.plain.cpuUs },
    );
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'peers.svg'),
    barChart('Requests/s on Express + Redis: Idem vs peers (higher is better)', peers, 'req/s'),
  );
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'peers-cpu.svg'),
    barChart('Added server CPU per request over the bare route, Express + Redis, µs (lower is better)', cpuBars, 'µs'),
  );
  const overheadCpu = [{ label: 'Idem on a null store: new keys', value: (r.nullStore?.cpuUs ?? NaN) - r.plain.cpuUs }];
  for (const store of STORES) {
    overheadCpu.push({ label: `${store}: new keys`, value: r.idem[store].new.cpuUs - r.plain.cpuUs });
    overheadCpu.push({ label: `${store}: replays`, value: r.idem[store].replay.cpuUs - r.plain.cpuUs });
    overheadCpu.push({ label: `${store}: replays, cache on`, value: r.idem[store].cached.cpuUs - r.plain.cpuUs });
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'cpu.svg'),
    barChart('Added server CPU per request over the bare Express route, µs (lower is better)', overheadCpu, 'µs'),
  );
  const floor = STORES.flatMap((store) => [
    { label: `${store}: Idem new keys`, value: r.idem[store].new.rps },
    { label: `${store}: raw write floor`, value: r.floor[store].write.rps },
    { label: `${store}: raw write+update floor`, value: r.floor[store].write2.rps },
    ...(r.floor[store].local ? [{ label: `${store}: Idem local new keys`, value: r.floor[store].local.rps }] : []),
    { label: `${store}: Idem replays`, value: r.idem[store].replay.rps },
    { label: `${store}: raw read floor`, value: r.floor[store].read.rps },
  ]);
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'floor.svg'),
    barChart("Requests/s: Idem against the store's raw operations (higher is better)", floor, 'req/s'),
  );
  const trips = STORES.flatMap((store) => {
    const t = r.idem[store].trips;
    return [
      { label: `${store}: new key`, value: t.new },
      { label: `${store}: replay`, value: t.replay },
      { label: `${store}: conflict`, value: t.conflict },
      { label: `${store}: mismatch`, value: t.mismatch },
      { label: `${store}: cached replay`, value: t.cachedReplay },
    ];
  });
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'trips.svg'),
    barChart('Store round trips per request (budget: new 2, others 1, cached 0)', trips, 'trips'),
  );
  if (r.frameworks) {
    const bars = frameworkRows(r).flatMap(([fw, f]) => [
      { label: `${fw}: no key (no Idem)`, value: f.plain.rps },
      ...(f.floor ? [{ label: `${fw}: floor, 2 raw Redis commands`, value: f.floor.rps }] : []),
      { label: `${fw}: Idem new keys`, value: f.new.rps },
      { label: `${fw}: Idem replays`, value: f.replay.rps },
      ...(f.cached ? [{ label: `${fw}: Idem replays, cache on`, value: f.cached.rps }] : []),
    ]);
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'frameworks.svg'),
      barChart('Requests/s per framework, Idem on Redis (higher is better)', bars, 'req/s'),
    );
  }
  if (r.instructions) {
    const bars = Object.entries(r.instructions.counts).map(([name, value]) => ({
      label: `${name}: instructions`,
      value,
    }));
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'instructions.svg'),
      barChart('Instructions per request, callgrind (lower is better)', bars, 'instr'),
    );
  }
  if (scaled.length > 0) {
    const bars = scaled.flatMap((store) => [
      { label: `${store}: ${r0(r.scale[store].smallN)} records`, value: r.scale[store].small.rps },
      { label: `${store}: ${r0(r.scale[store].largeN)} records`, value: r.scale[store].large.rps },
    ]);
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'scale.svg'),
      barChart('New keys, requests/s at small and large N (higher is better)', bars, 'req/s'),
    );
  }
  if (r.ab) {
    const bars = [
      { label: 'before: null store, new keys', value: r.ab.null.cpuUs - r.plain.cpuUs },
      { label: 'after: null store, new keys', value: (r.nullStore as Load).cpuUs - r.plain.cpuUs },
      { label: 'before: Redis, new keys', value: r.ab.redisNew.cpuUs - r.plain.cpuUs },
      { label: 'after: Redis, new keys', value: r.idem.redis.new.cpuUs - r.plain.cpuUs },
      { label: 'before: Redis, replays', value: r.ab.redisReplay.cpuUs - r.plain.cpuUs },
      { label: 'after: Redis, replays', value: r.idem.redis.replay.cpuUs - r.plain.cpuUs },
    ];
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'before-after.svg'),
      barChart('Added CPU per request over the bare Express route, µs: before vs after (lower is better)', bars, 'µs'),
    );
  }
  const ratios = tgt
    .filter((x) => x.ratio !== undefined)
    .map((x) => ({ label: `${x.met ? '' : 'MISSED: '}${x.name}`.slice(0, 60), value: (x.ratio as number) * 100 }));
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'targets.svg'),
    barChart('Targets: measured as % of required (100 % or more is met)', ratios, '%'),
  );
  progress('wrote docs/BENCHMARKS.md, docs/bench/*.svg, docs/bench/results.json');
}

if (process.argv.includes('--report')) {
  // Regenerate the tables, the doc (with bench/notes.md) and the charts from the last run's results.json.
  report(JSON.parse(readFileSync(join(ROOT, 'docs', 'bench', 'results.json'), 'utf8')) as Results);
} else {
  await main();
}
