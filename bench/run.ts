/**
 * @module `npm run bench [-- --quick] [-- --cpu-prof] [-- --report]`: Idem against no idempotency, against each store's raw floor,
 * and against the peers, on 127.0.0.1 with autocannon. Prints a table, writes docs/BENCHMARKS.md and docs/bench/*.svg
 * (a `--quick` run only prints; `--report` rewrites the docs from docs/bench/results.json and bench/notes.md).
 * Every server is its own process (bench/server.ts), so its `process.cpuUsage()` is its CPU per request.
 * This file is the run: what is measured (stores, frameworks, peers, latency, Redis's work, scale, instructions)
 * and in what order. The servers and their load are bench/load.ts, the latency section bench/latency.ts, the
 * sections run as child processes bench/children.ts, the round-trip and correctness probes bench/probes.ts, the
 * results' shape bench/results.ts, the report bench/report.ts (with bench/targets.ts, bench/targets31.ts,
 * bench/misses31.ts and bench/charts.ts), the settings bench/settings.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { combine, control, load, prepare, slice, start, stop, type Load, type Server, type Slot } from './load.js';
import { instructions, redisWork } from './children.js';
import { latency } from './latency.js';
import { correctness, roundTrips, type Correctness } from './probes.js';
import { report } from './report.js';
import { FRAMEWORKS, STORES, r0, type Framework, type Results, type StoreName } from './results.js';
import { PG_URL, QUICK, REDIS_URL, ROOT, RUN, SETTINGS, progress, sleep } from './settings.js';

// ---- the run -------------------------------------------------------------------------------------------------------

/** Stores whose bench server serves `/pay-local` (database-local work) and `/floor/tx` (the raw transaction). */
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
type Peer = (typeof PEERS)[number];

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
    // BENCH_CHECKOUT: what code was measured (a commit, and any uncommitted changes), said in the doc's header.
    ...(process.env.BENCH_CHECKOUT ? { checkout: process.env.BENCH_CHECKOUT } : {}),
  };

  const only = (process.env.BENCH_ONLY ?? '').split(',').filter(Boolean);
  // BENCH_SKIP=scale,instructions: a reduced run that still writes the docs, saying what it left out.
  const skip = (process.env.BENCH_SKIP ?? '').split(',').filter(Boolean);
  if (skip.length > 0) results.skipped = skip;
  const want = (section: string) => !skip.includes(section) && (only.length === 0 || only.includes(section));
  try {
    await measure(results, want);
  } finally {
    await cleanRedis();
  }
  if (want('store')) {
    progress("Redis's work per new key: Idem vs @node-idempotency (bench:store on Redis)");
    const work = await redisWork();
    if (work) results.redisWork = work;
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

/** Every server up and warmed, the rounds, the results; then the servers stopped and the stores measured at scale. */
async function measure(results: Results, want: (section: string) => boolean): Promise<void> {
  const setup = await setUp(results, want);
  await rounds(setup.slots);
  collect(results, setup);
  // Issue 31 item 5: p50/p99 at 1, 16 and 64 connections, on the servers the rounds have warmed up.
  const redis = setup.idemServers.get('redis');
  if (redis && want('latency')) results.latency = await latency(setup.plain, redis, setup.peerServers.get('ni'));
  const { servers, idemServers } = setup;
  for (const server of servers) if (![...idemServers.values()].includes(server)) await stop(server);
  for (const server of idemServers.values()) await stop(server);
  for (const store of ['sqlite', 'postgres'] as const) {
    if (idemServers.has(store) && want('scale')) results.scale[store] = await scale(store);
  }
}

/** A run's servers and its slots (each warmed up), with what the results are collected by. */
interface Setup {
  servers: Server[];
  /** The no-key route's server. */
  plain: Server;
  peerServers: Map<string, Server>;
  slots: Map<string, Slot>;
  abRoot: string | undefined;
  frameworks: readonly Framework[];
  idemServers: Map<StoreName, Server>;
  peers: readonly Peer[];
  peerCorrectness: Map<string, Correctness>;
}

/** Starts every server, counts each store's round trips, checks correctness, and prepares every slot. */
async function setUp(results: Results, want: (section: string) => boolean): Promise<Setup> {
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
    if (LOCAL_STORES.has(store)) {
      slots.set(`${store}:local`, await prepare(server, '/pay-local', 'new'));
      // The raw transaction the local route replaces: BEGIN, the key's INSERT, the ledger INSERT, COMMIT.
      slots.set(`${store}:tx`, await prepare(server, '/floor/tx', 'new'));
    }
  }
  results.peers = [];
  const peerCorrectness = new Map<string, Correctness>();
  const peerServers = new Map<string, Server>();
  for (const [i, peer] of peers.entries()) {
    const server = rest[stores.length + i] as Server;
    peerServers.set(peer.mode, server);
    peerCorrectness.set(peer.mode, await correctness(server));
    slots.set(`${peer.mode}:new`, await prepare(server, '/pay', 'new'));
    slots.set(`${peer.mode}:replay`, await prepare(server, '/pay', 'replay'));
  }
  return { servers, plain, peerServers, slots, abRoot, frameworks, idemServers, peers, peerCorrectness };
}

/** Every slot once per round, in an order that changes each round. */
async function rounds(slots: Map<string, Slot>): Promise<void> {
  for (let round = 1; round <= SETTINGS.rounds; round++) {
    progress(`round ${round}/${SETTINGS.rounds}: ${slots.size} measurements of ${SETTINGS.seconds} s`);
    // A different order each round (rotated, and reversed every other round): what runs just before a route —
    // PostgreSQL's checkpoints after the SQL routes' writes, say — must not always fall on the same routes.
    const order = [...slots.values()];
    const shift = Math.floor(((round - 1) * order.length) / SETTINGS.rounds);
    const rotated = [...order.slice(shift), ...order.slice(0, shift)];
    for (const slot of round % 2 === 0 ? rotated.reverse() : rotated) await slice(slot);
  }
}

/** Each slot's slices, combined, into the results. */
function collect(results: Results, setup: Setup): void {
  const { slots, abRoot, frameworks, idemServers, peers, peerCorrectness } = setup;
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
      ...(LOCAL_STORES.has(store) ? { local: get(`${store}:local`), tx: get(`${store}:tx`) } : {}),
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
}

if (process.argv.includes('--report')) {
  // Regenerate the tables, the doc (with bench/notes.md) and the charts from the last run's results.json.
  report(JSON.parse(readFileSync(join(ROOT, 'docs', 'bench', 'results.json'), 'utf8')) as Results);
} else {
  await main();
}
