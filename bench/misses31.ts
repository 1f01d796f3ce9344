/**
 * @module The "Issue 31: the misses" section of docs/BENCHMARKS.md: for each of issue 31's targets this run
 * missed, what explains it (this run's figures, with the profiles and the allocation measurement they rest on,
 * each named with its date and source) and what meeting it would take. Generated with the run's numbers, so the
 * prose cannot drift from the tables above it.
 */
import type { LatencyRow } from './latency.js';
import { FRAMEWORK_NAMES, frameworkRows, pct, r0, r1, type Framework, type Results } from './results.js';
import type { Target } from './targets.js';

const STEADY = '11000-12000';
const FRAMEWORKS = ['express', 'fastify', 'hono', 'web'] as const;
const name = (fw: string) => FRAMEWORK_NAMES[fw as Framework | 'express'] ?? fw;

/**
 * The PostgreSQL local route and the raw transaction under `--cpu-prof` (bench/profile.ts, 10 s each at 16
 * connections, 2026-12-05 on this machine, other work running): main-thread time per request by where it went.
 */
const LOCAL_PROFILE = {
  local: { busy: 1160, writes: 565, pg: 98, idem: 99, gc: 48, express: 86 },
  tx: { busy: 475, writes: 216, pg: 26, idem: 0, gc: 27, express: 65 },
};

/**
 * The Express + Redis new-key servers under `--cpu-prof` (bench/profile.ts idem|ni redis new 10, 2026-12-05 at 08:04
 * UTC on this machine, right after the full run): main-thread µs per request — busy, the layer's own code, its Redis
 * client (for Idem: ioredis's JavaScript plus `writeUtf8String`, which is `utf8`), and GC.
 */
const EXPRESS_PROFILE = {
  idem: { busy: 250, own: 38, client: 43, utf8: 19, gc: 28 },
  ni: { busy: 202, own: 10, client: 8, gc: 18 },
};

/** The section, with one paragraph per missed target (and one line for those met). */
export function missesSection(r: Results, tgt31: readonly Target[]): string[] {
  const missed = (prefix: string) => tgt31.some((t) => t.name.startsWith(prefix) && !t.met);
  const out = ['', '## Issue 31: the misses', ''];
  const met = tgt31.filter((t) => t.met).map((t) => t.name);
  if (met.length > 0) out.push(`Met in this run: ${met.join('; ')}.`, '');
  if (missed('Express + Redis new key: added')) out.push(addedCpu(r), '');
  if (missed('Express + Redis new key: throughput')) out.push(throughput(r), '');
  if (missed('Redis CPU')) out.push(redisWork(r), '');
  if (missed('Null store')) out.push(nullShare(r), '');
  if (missed('Cached replays')) out.push(cachedReplays(r), '');
  if (missed('`local: true`')) out.push(local(r), '');
  out.push(sqliteLocal(r), '', latencyReading(r));
  return out;
}

const added = (r: Results, cpuUs: number) => cpuUs - r.plain.cpuUs;

function addedCpu(r: Results): string {
  const peers = r.peers.map((p) => ({ mode: p.mode, cpu: added(r, p.new.cpuUs) }));
  const leanest = peers.reduce((a, b) => (b.cpu < a.cpu ? b : a));
  const ni = peers.find((p) => p.mode === 'ni');
  const at = (store: string) => r.instructions?.counts[`new/${store}@${STEADY}`];
  const was = (store: string) => r.instructions?.baseline[`new/${store}@${STEADY}`];
  const [plainI, idemI, niI] = [at('express-plain'), at('express-ioredis'), at('express-ni')];
  const longer = plainI !== undefined && idemI !== undefined && niI !== undefined && idemI - plainI > niI - plainI;
  const growth = (store: string) => {
    const [now, then] = [at(store), was(store)];
    return now !== undefined && then
      ? `${store} ${now > then ? '+' : ''}${(((now - then) / then) * 100).toFixed(1)} %`
      : '';
  };
  let counted = '';
  if (plainI !== undefined && idemI !== undefined && niI !== undefined) {
    const ratio = `${r0(idemI - plainI)} instructions per new key to Express against @node-idempotency's ${r0(niI - plainI)} (${((idemI - plainI) / (niI - plainI)).toFixed(2)}×)`;
    counted = longer
      ? ` The code path is longer too: past the warm-up callgrind counts Idem adding ${ratio} (${[growth('express-null'), growth('express-ioredis')].filter(Boolean).join(', ')} against the instruction table's baseline).`
      : ` Not the code path's length: past the warm-up callgrind counts Idem adding ${ratio}.`;
  }
  return `**Added server CPU per new key, Express + Redis: ${r1(added(r, r.idem.redis.new.cpuUs))} µs against ${r1(leanest.cpu)} µs (${leanest.mode}, the leanest peer in this run${ni && ni !== leanest ? `; @node-idempotency ${r1(ni.cpu)} µs` : ''}).**${counted} A 10 s \`--cpu-prof\` of each server at 16 connections (bench/profile.ts, 2026-12-05, right after this run: Idem 3,314 req/s, the peer 4,281) puts the main thread's busy time per new key at ${EXPRESS_PROFILE.idem.busy} µs against ${EXPRESS_PROFILE.ni.busy}: Idem's own code ${EXPRESS_PROFILE.idem.own} µs against the peer's ${EXPRESS_PROFILE.ni.own}; the Redis client ${EXPRESS_PROFILE.idem.client} µs (ioredis ${EXPRESS_PROFILE.idem.client - EXPRESS_PROFILE.idem.utf8}, and ${EXPRESS_PROFILE.idem.utf8} µs in \`writeUtf8String\` encoding the arguments of two \`EVALSHA\`s of 13 and 11 arguments, the response's headers and base64 body among them) against node-redis's ${EXPRESS_PROFILE.ni.client} µs for two 5-argument \`SET\`s; GC ${EXPRESS_PROFILE.idem.gc} against ${EXPRESS_PROFILE.ni.gc} µs. ${longer ? 'Beyond the longer path, the' : 'Counted one request at a time, Idem runs fewer instructions than the peer; under load the'} difference is the Redis client's encoding, Idem's own code and the rest of the process's CPU outside the main thread (V8's GC and compiler threads, the kernel's side of the sockets), paid per byte allocated and sent — Idem allocates about 18 KB per new key on Express, 20–24 KB on the other frameworks (\`bench:alloc\`, 2026-12-05, [allocation.md](bench/allocation.md); item 2's ≤ 5 KB is not met). Redis itself, on the same 2 cores, does several times the peer's work per new key (below). Needed: ${longer ? "first the instructions back under the peer's; then " : ''}the store's two calls made with few, short arguments (the record as one string, the response written once), the allocation cut as allocation.md lists (one shared timer for store timeouts instead of one per call, the lease as one object without closures, the signal made only when read, one UUID), and Redis's work brought to the peer's.`;
}

function throughput(r: Results): string {
  const bare = r.plain.cpuUs;
  const ours = r.idem.redis.new.cpuUs;
  return `**New-key throughput, Express + Redis: ${(r.idem.redis.new.rps / r.plain.rps).toFixed(2)}× the bare route** (the floor — no layer, a new key's two raw Redis commands around the same work — ${(r.floor.redis.write2.rps / r.plain.rps).toFixed(2)}×). On one saturated machine throughput follows CPU per request: the bare route costs ${r1(bare)} µs, Idem's new key ${r1(ours)} µs (a ratio of ${(bare / ours).toFixed(2)}). 0.8× needs Idem's added CPU at most a quarter of the bare route's, ${r1(bare / 4)} µs; it is ${r1(ours - bare)} µs. The same work as the previous target closes it.`;
}

function redisWork(r: Results): string {
  const w = r.redisWork;
  if (!w) return '';
  return `**Redis's work per new key: ${r1(w.idem.redisUs)} µs of its time in Idem's commands against ${r1(w.peer.redisUs)} µs in the peer's (${(w.idem.redisUs / w.peer.redisUs).toFixed(2)}×; the Redis process's CPU ${r1(w.idem.cpuUs)} against ${r1(w.peer.cpuUs)} µs, ${(w.idem.cpuUs / w.peer.cpuUs).toFixed(2)}×).** Item 1 took the index's upkeep off the claim (it is one \`ZADD\` now; pruning moved to \`list\` and \`sweep\`). What is left is the record's shape and the fencing: each of the two calls is a script; the claim reads (\`HMGET\`) and writes a hash of 10 fields (\`HSET\`, \`PEXPIRE\`), the completion reads the token and writes 14, whose response values pass Redis's default \`hash-max-listpack-value\` (64 bytes) and turn the hash into a hash table; the peer writes one string twice and its second \`SET\` overwrites whatever is there. Needed: the record kept as one string (one read and one write per script) and no index entry on the hot path — [store-work.md](bench/store-work.md#what-the-numbers-say) has every command.`;
}

function nullShare(r: Results): string {
  const rows = FRAMEWORKS.flatMap((fw) => {
    const plain = r.instructions?.counts[`new/${fw}-plain@${STEADY}`];
    const withIdem = r.instructions?.counts[`new/${fw}-null@${STEADY}`];
    return plain === undefined || withIdem === undefined ? [] : [{ fw, plain, adds: withIdem - plain }];
  });
  const shares = rows.map((x) => `${name(x.fw)} ${r0(x.adds)} on ${r0(x.plain)} (${pct(x.adds, x.plain)})`).join('; ');
  const over = rows.filter((x) => x.adds > 0.3 * x.plain);
  const expressCheaper = rows.some((x) => x.fw === 'express' && x.adds < 0);
  const cuts = over.map((x) => `${name(x.fw)} ${r0(x.adds - 0.3 * x.plain)}`).join(', ');
  return `**Null store, instructions Idem adds to each framework's route per new key, past the warm-up:** ${shares}. A new key pays the same things on every framework — the body read and hashed for the fingerprint, the whole response held, the lease (a timer per store call, the renewal timer and its closures, the signal), two UUIDs${expressCheaper ? '; Express comes out cheaper with Idem than without because Idem turns `req` and `res` into dictionaries before Express adds its properties' : ''}. The cheaper the route, the larger that fixed cost's share: Fastify's route is the cheapest. A profile of Fastify on the null store (2026-12-02, before item 3, [history](bench/history.md)) had Idem's own functions at about 30 % of the samples and GC at 18 %. Needed, in instructions per new key: ${cuts} fewer — about the allocation list of [allocation.md](bench/allocation.md) and, on Fastify, its per-request hooks (≈ 6 KB besides the core).`;
}

function cachedReplays(r: Results): string {
  const rows = frameworkRows(r).filter(([, f]) => f.cached);
  const shares = rows
    .map(([fw, f]) => `${name(fw)} ${pct((f.cached as NonNullable<typeof f.cached>).rps, f.plain.rps)}`)
    .join(', ');
  const missedRows = rows.filter(([, f]) => (f.cached as NonNullable<typeof f.cached>).rps < 0.8 * f.plain.rps);
  const cpu = missedRows
    .map(([fw, f]) => `${name(fw)} ${r1(f.plain.cpuUs)} → ${r1((f.cached as NonNullable<typeof f.cached>).cpuUs)} µs`)
    .join('; ');
  return `**Cached replays against the no-key route:** ${shares}. A cached replay makes no store trip, but it still reads the body and computes its fingerprint (a retry with other bytes must be refused as a mismatch), claims through the engine's cache and writes the stored answer; where the framework's own route is cheap, that is a large part of the request. Server CPU per request, no-key route → cached replay: ${cpu}. Needed: a cached replay at most 1.25× the no-key route's CPU; on Fastify also what [allocation.md](bench/allocation.md#what-a-fastify-replay-runs-that-it-does-not-need) lists (Fastify's own body parse, which the claim's place in \`preHandler\` keeps).`;
}

function local(r: Results): string {
  const pg = r.floor.postgres;
  if (!pg.local || !pg.tx) return '';
  const p = LOCAL_PROFILE;
  return `**\`local: true\` against the raw transaction it replaces (PostgreSQL): ${(pg.local.rps / pg.tx.rps).toFixed(2)}×** (${r0(pg.local.rps)} against ${r0(pg.tx.rps)} req/s; server CPU ${r1(pg.local.cpuUs)} against ${r1(pg.tx.cpuUs)} µs per request). Both make three round trips (\`BEGIN\` goes out with the first statement); the local route sends five statements to the raw transaction's four. A \`--cpu-prof\` of each route (bench/profile.ts, 10 s at 16 connections, 2026-12-05): main-thread time per request ${r0(p.local.busy)} against ${r0(p.tx.busy)} µs — socket writes ${p.local.writes} against ${p.tx.writes} µs (on these 2 shared cores a write to PostgreSQL's socket wakes its backend, which often runs before the write returns, so this is mostly the statements' own cost in PostgreSQL: the claim's statement reads the key's row and inserts the 15-column record under its primary key and 2 indexes, returning every column, the completion's \`UPDATE\` writes the response's headers and body, where the raw transaction inserts two narrow rows), pg's JavaScript ${p.local.pg} against ${p.tx.pg} µs (per statement \`cloneQueryConfig\` copies the named query's config, and \`addFields\` builds the claim's wide \`RETURNING\` row), Idem's own ${p.local.idem} µs, GC ${p.local.gc} against ${p.tx.gc} µs. Needed for 0.9×: a claim that inserts a narrow row and returns only what the engine reads, the response written once, and Idem's and pg's JavaScript per local request under about 10 % of the raw transaction's cost — or a database on cores of its own, where the commit rather than this process sets the pace (\`bench/local.ts\` compares the two in process, without HTTP).`;
}

function sqliteLocal(r: Results): string {
  const sq = r.floor.sqlite;
  const ratio =
    sq.local && sq.tx
      ? `${(sq.local.rps / sq.tx.rps).toFixed(2)}× its raw transaction in this run (no target)`
      : 'not measured';
  return `**SQLite has no \`local\` route option**: its transaction is the process's one connection, which cannot wait for an asynchronous handler, so \`local: true\` on a SQLite store is a one-line \`CONFIG_INVALID\` when the route is built ([LOCAL.md](LOCAL.md)); database-local work on SQLite is \`runLocal\` with synchronous work, called inside the handler — which is what the bench's SQLite \`/pay-local\` does: ${ratio}.`;
}

function latencyReading(r: Results): string {
  const l = r.latency;
  if (!l) return '';
  const get = (subject: LatencyRow['subject'], kind: LatencyRow['kind'], c: number) =>
    l.rows.find((x) => x.subject === subject && x.kind === kind && x.connections === c);
  const pair = (subject: LatencyRow['subject'], kind: LatencyRow['kind'], c: number) => {
    const row = get(subject, kind, c);
    return row ? `${row.p50.toFixed(2)} / ${row.p99.toFixed(2)} ms` : '—';
  };
  return `**Latency (item 5, no target).** At one connection — one request at a time, no queueing — p50 / p99 is ${pair('bare', 'none', 1)} on the bare route, ${pair('idem', 'new', 1)} for Idem's new keys and ${pair('ni', 'new', 1)} for @node-idempotency's, ${pair('idem', 'replay', 1)} for Idem's replays (${pair('idem-cached', 'replay', 1)} with the cache) and ${pair('ni', 'replay', 1)} for the peer's: what each layer adds to one request. At 16 and 64 connections the server is saturated and latency is queueing — it follows each route's throughput; p99 there also carries this shared machine's stalls.`;
}
