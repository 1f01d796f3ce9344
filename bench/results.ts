/**
 * @module The shape of one bench run's results: bench/run.ts produces them, docs/bench/results.json keeps them,
 * bench/report.ts, bench/targets.ts and bench/charts.ts read them. With them, the stores and frameworks a run
 * measures, and the number formats every table uses.
 */
import type { LatencyResults } from './latency.js';
import type { Load } from './load.js';
import type { Correctness, Trips } from './probes.js';
import type { Settings } from './settings.js';

/** Frameworks other than Express, each with its own no-key route and Idem on Redis (bench/server.ts). */
export const FRAMEWORKS = ['fastify', 'hono', 'web'] as const;
export type Framework = (typeof FRAMEWORKS)[number];
export const FRAMEWORK_NAMES: Record<Framework | 'express', string> = {
  express: 'Express 5',
  fastify: 'Fastify 5',
  hono: 'Hono 4 on node:http',
  web: 'idem/http on node:http',
};

export const STORES = ['memory', 'sqlite', 'postgres', 'redis'] as const;
export type StoreName = (typeof STORES)[number];

/**
 * One framework's routes: no key, Idem on Redis (new keys, replays), replays with the engine's cache (`cached`), and
 * the floor's new keys (`floor`: no layer, two raw Redis commands). Runs before the cache and the floor have neither.
 */
export interface FrameworkLoads {
  plain: Load;
  new: Load;
  replay: Load;
  cached?: Load;
  floor?: Load;
}

/** Express (from the store sections) and every other framework, in one list. */
export function frameworkRows(r: Results): Array<[string, FrameworkLoads]> {
  const express: FrameworkLoads = {
    plain: r.plain,
    new: r.idem.redis.new,
    replay: r.idem.redis.replay,
    cached: r.idem.redis.cached,
    floor: r.floor.redis.write2,
  };
  return [['express', express], ...Object.entries(r.frameworks ?? {})];
}

export interface Results {
  started: string;
  finished: string;
  quick: boolean;
  settings: Settings;
  machine: Record<string, string>;
  plain: Load;
  plainRuns: Load[];
  idem: Record<StoreName, { new: Load; replay: Load; cached: Load; trips: Trips }>;
  /**
   * `local`: database-local work on the same route (`/pay-local`, SQL stores only); `tx`: the raw transaction it
   * replaces (`/floor/tx`: BEGIN, the key's INSERT, the ledger INSERT, COMMIT).
   */
  floor: Record<StoreName, { write: Load; write2: Load; read: Load; local?: Load; tx?: Load }>;
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
    /** Counted before the run by `bench:instructions` (BENCH_INSTRUCTIONS_FROM): what, when. */
    from?: string;
  };
  /** Redis's work per new key from bench:store on Redis (bench/children.ts): CPU and commandstats µs. */
  redisWork?: {
    settings: { keys: number; rounds: number };
    idem: { cpuUs: number; redisUs: number; statements: number };
    peer: { cpuUs: number; redisUs: number; statements: number };
  };
  /** p50/p99 at 1, 16 and 64 connections (bench/latency.ts). */
  latency?: LatencyResults;
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

// ---- number formats ----------------------------------------------------------------------------------------------
export const r0 = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
export const r1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '–');
export const pct = (a: number, b: number) => (b > 0 ? `${Math.round((a / b) * 100)} %` : '–');
export const ms = (n: number) => `${n} ms`;
