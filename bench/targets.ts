/**
 * @module The bench's targets (issue 15, then issue 9), each read from one run's results: what is required, what
 * was measured, and whether it is met. bench/report.ts puts them at the top of docs/BENCHMARKS.md.
 */
import type { Load } from './load.js';
import { FRAMEWORK_NAMES, frameworkRows, ms, pct, r0, r1, type Framework, type Results } from './results.js';

export interface Target {
  name: string;
  measured: string;
  met: boolean;
  /** Measured against required, where it is one number: 1 or more is met (the targets chart). */
  ratio?: number;
}

/** Every target, in the order of the table. */
export function targets(r: Results): Target[] {
  return [...peerTargets(r), ...frameworkTargets(r), ...storeTargets(r), ...peerKindTargets(r), ...scaleTargets(r)];
}

/** New keys on Express + Redis against the peers: added CPU, throughput and instructions. */
function peerTargets(r: Results): Target[] {
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
  return out;
}

/** Each framework's routes against its own no-key route; idem/http against Hono, both on node:http. */
function frameworkTargets(r: Results): Target[] {
  const out: Target[] = [];
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
  return out;
}

/** Replays and new keys against the no-key route, and against the raw store floor. */
function storeTargets(r: Results): Target[] {
  const out: Target[] = [];
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
  return out;
}

/** Added CPU and throughput per new key and per replay against the peers (Express + Redis). */
function peerKindTargets(r: Results): Target[] {
  const out: Target[] = [];
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
  return out;
}

/** Throughput at large N against small N, and p99 during a sweep against before it. */
function scaleTargets(r: Results): Target[] {
  const out: Target[] = [];
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
