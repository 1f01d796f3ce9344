/**
 * @module `node --import tsx bench/local.ts [--rounds N] [--batch N] [--store sqlite|sqlite-full|postgres]`:
 * database-local work (`runLocal`) against the store's raw floor, in process, one key at a time, one connection.
 *
 * Per store, these loops of `batch` new keys each, interleaved within every round (the order flips each round, so
 * the machine's drift hits them alike):
 * - **raw**: one `INSERT … ON CONFLICT DO NOTHING` (SQLite `INSERT OR IGNORE`) of the key into a table shaped like
 *   the floor's in bench/server.ts — one raw conditional write, autocommitted (PostgreSQL: sent unnamed, as the
 *   floor sends it; **raw prepared**: the same as a named prepared statement);
 * - **local**: `runLocal` through the engine — the claim, the work's ledger INSERT and the completion in one
 *   transaction (PostgreSQL: BEGIN, claim, INSERT, UPDATE, COMMIT; SQLite: one `BEGIN IMMEDIATE`); **local
 *   pipelined**: the same on a pool with pg's `pipeline: true`, where BEGIN goes out with the claim and the UPDATE
 *   with COMMIT (2 network round trips plus the work's, instead of 4);
 * - **lease + effects**: `engine.run` with the same ledger INSERT declared as `effects` — the path local mode
 *   replaces (PostgreSQL: the claim commits, then BEGIN, INSERT, UPDATE, COMMIT).
 * Prints keys/s per loop (total keys over total time), and each against each raw loop, overall and the median of
 * the rounds'. `sqlite` keeps better-sqlite3's WAL default `synchronous = NORMAL` (commits are not fsynced: CPU
 * decides); `sqlite-full` sets `synchronous = FULL` (every commit fsynced, as PostgreSQL's are). PostgreSQL runs
 * at `BENCH_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`), in a schema of its own, dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import { createEngine, type Engine } from '../packages/idem/src/core/engine.js';
import { runLocal } from '../packages/idem/src/core/local.js';
import type { StoredResponse } from '../packages/idem/src/core/record.js';
import { postgresStore } from '../packages/idem/src/stores/postgres/index.js';
import { sqliteStore } from '../packages/idem/src/stores/sqlite/index.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '10' },
    batch: { type: 'string', default: '200' },
    store: { type: 'string', multiple: true, default: ['sqlite', 'sqlite-full', 'postgres'] },
  },
});
const ROUNDS = Number(args.rounds);
const BATCH = Number(args.batch);
const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const TTL_MS = 24 * 3_600_000;
const RUN = randomBytes(4).toString('hex');

const body = new TextEncoder().encode(
  JSON.stringify({ id: 'ch_bench', object: 'charge', amount: 500, currency: 'usd' }),
);
const response = (id: string): StoredResponse => ({
  status: 201,
  headers: [
    ['content-type', 'application/json'],
    ['location', `/v1/charges/${id}`],
  ],
  body,
});

/** One store's loops: each writes `n` new keys whose names start with `prefix`. */
interface Loops {
  readonly raw: (prefix: string, n: number) => Promise<void>;
  /** The raw write as a named prepared statement (PostgreSQL; SQLite's `raw` is already prepared). */
  readonly rawPrepared?: (prefix: string, n: number) => Promise<void>;
  readonly local: (prefix: string, n: number) => Promise<void>;
  /** `local` on a pipelining pool (PostgreSQL). */
  readonly localPipelined?: (prefix: string, n: number) => Promise<void>;
  readonly lease: (prefix: string, n: number) => Promise<void>;
  readonly close: () => Promise<void>;
}

/** `synchronous`: better-sqlite3's WAL default is NORMAL (a commit is not fsynced); FULL fsyncs each commit. */
async function sqliteLoops(synchronous: 'NORMAL' | 'FULL'): Promise<Loops> {
  const file = join(tmpdir(), `idem-bench-local-${RUN}-${synchronous}.db`);
  const database = new Database(file);
  const store = sqliteStore({ database });
  await store.migrate();
  database.pragma(`synchronous = ${synchronous}`);
  database.exec('CREATE TABLE floor (k TEXT PRIMARY KEY, v TEXT NOT NULL, expires_at INTEGER NOT NULL)');
  database.exec('CREATE TABLE ledger (ref TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
  const raw = database.prepare('INSERT OR IGNORE INTO floor (k, v, expires_at) VALUES (?, ?, ?)');
  const ledger = database.prepare('INSERT INTO ledger (ref, amount) VALUES (?, ?)');
  const engine = createEngine({ store, ttlMs: TTL_MS });
  return {
    raw: async (prefix, n) => {
      for (let i = 0; i < n; i++) raw.run(`${prefix}${i}`, 'in_progress', Date.now() + TTL_MS);
    },
    local: async (prefix, n) => {
      for (let i = 0; i < n; i++) {
        await runLocal(engine, { scope: 'bench', key: `${prefix}${i}`, fingerprint: 'f' }, (_tx, { id }) => {
          ledger.run(id, 500);
          return { response: response(id), resultId: id };
        });
      }
    },
    lease: async (prefix, n) => {
      for (let i = 0; i < n; i++) {
        await engine.run({ scope: 'bench', key: `${prefix}${i}`, fingerprint: 'f' }, async ({ id }) => ({
          response: response(id),
          resultId: id,
          effects: () => ledger.run(id, 500),
        }));
      }
    },
    close: async () => {
      await store.close();
      database.close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true });
    },
  };
}

async function postgresLoops(): Promise<Loops> {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
  const pipelined = new pg.Pool({ connectionString: PG_URL, max: 2, pipeline: true });
  const schema = `bench_local_${RUN}`;
  const store = postgresStore<pg.PoolClient>({ pool, schema });
  await store.migrate();
  const floor = `"${schema}".floor`;
  const ledger = `"${schema}".ledger`;
  await pool.query(`CREATE TABLE ${floor} (k text PRIMARY KEY, v text NOT NULL, expires_at bigint NOT NULL)`);
  await pool.query(`CREATE TABLE ${ledger} (ref text PRIMARY KEY, amount integer NOT NULL)`);
  const insertLedger = `INSERT INTO ${ledger} (ref, amount) VALUES ($1, $2)`;
  // The floor's statement in bench/server.ts, sent the same way (unnamed), and as a prepared statement.
  const insertFloor = `INSERT INTO ${floor} (k, v, expires_at) VALUES ($1, 'in_progress', $2) ON CONFLICT DO NOTHING`;
  const engine: Engine<pg.PoolClient> = createEngine({ store, ttlMs: TTL_MS });
  const storePipelined = postgresStore<pg.PoolClient>({ pool: pipelined, schema });
  const enginePipelined: Engine<pg.PoolClient> = createEngine({ store: storePipelined, ttlMs: TTL_MS });
  const local = (on: Engine<pg.PoolClient>) => async (prefix: string, n: number) => {
    for (let i = 0; i < n; i++) {
      await runLocal(on, { scope: 'bench', key: `${prefix}${i}`, fingerprint: 'f' }, async (tx, { id }) => {
        await tx.query({ name: 'bench_ledger', text: insertLedger, values: [id, 500] });
        return { response: response(id), resultId: id };
      });
    }
  };
  return {
    raw: async (prefix, n) => {
      for (let i = 0; i < n; i++) await pool.query(insertFloor, [`${prefix}${i}`, Date.now() + TTL_MS]);
    },
    rawPrepared: async (prefix, n) => {
      for (let i = 0; i < n; i++) {
        await pool.query({ name: 'bench_floor', text: insertFloor, values: [`${prefix}${i}`, Date.now() + TTL_MS] });
      }
    },
    local: local(engine),
    localPipelined: local(enginePipelined),
    lease: async (prefix, n) => {
      for (let i = 0; i < n; i++) {
        await engine.run({ scope: 'bench', key: `${prefix}${i}`, fingerprint: 'f' }, async ({ id }) => ({
          response: response(id),
          resultId: id,
          effects: (tx) => tx.query({ name: 'bench_ledger', text: insertLedger, values: [id, 500] }),
        }));
      }
    },
    close: async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
      await pipelined.end();
    },
  };
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

type Kind = 'raw' | 'rawPrepared' | 'local' | 'localPipelined' | 'lease';
const label: Record<Kind, string> = {
  raw: 'raw',
  rawPrepared: 'raw prepared',
  local: 'local',
  localPipelined: 'local pipelined',
  lease: 'lease + effects',
};
for (const name of args.store) {
  const open = {
    sqlite: () => sqliteLoops('NORMAL'),
    'sqlite-full': () => sqliteLoops('FULL'),
    postgres: postgresLoops,
  }[name];
  if (!open) throw new Error(`--store must be sqlite, sqlite-full or postgres, got ${name}`);
  const loops = await open();
  const kinds = (['raw', 'rawPrepared', 'local', 'localPipelined', 'lease'] as const).filter(
    (kind) => loops[kind] !== undefined,
  );
  const run = (kind: Kind, prefix: string, n: number) =>
    (loops[kind] as (prefix: string, n: number) => Promise<void>)(prefix, n);
  try {
    // Warm-up: prepared statements, the pool's connection, the JIT.
    for (const kind of kinds) await run(kind, `warm-${kind}-`, Math.min(BATCH, 50));
    const totals: Record<Kind, number> = { raw: 0, rawPrepared: 0, local: 0, localPipelined: 0, lease: 0 };
    const ratios: Array<Partial<Record<Kind, number>>> = [];
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? kinds : [...kinds].reverse();
      const ms: Partial<Record<Kind, number>> = {};
      for (const kind of order) {
        const started = performance.now();
        await run(kind, `r${round}-${kind}-`, BATCH);
        ms[kind] = performance.now() - started;
        totals[kind] += ms[kind];
      }
      ratios.push(ms);
    }
    const rate = (kind: Kind) => Math.round((ROUNDS * BATCH * 1000) / totals[kind]);
    const lines = [`${name}: ${ROUNDS} rounds × ${BATCH} new keys per loop, one key at a time, one connection`];
    lines.push(`  keys/s: ${kinds.map((kind) => `${label[kind]} ${rate(kind)}`).join(', ')}`);
    for (const base of kinds.filter((kind) => kind === 'raw' || kind === 'rawPrepared')) {
      for (const kind of kinds.filter((kind) => kind !== 'raw' && kind !== 'rawPrepared')) {
        const perRound = ratios.map((r) => (r[base] as number) / (r[kind] as number));
        lines.push(
          `  ${label[kind]} / ${label[base]}: ${(totals[base] / totals[kind]).toFixed(2)} ` +
            `(median of rounds ${median(perRound).toFixed(2)}; rounds ${perRound.map((r) => r.toFixed(2)).join(' ')})`,
        );
      }
    }
    console.log(lines.join('\n'));
  } finally {
    await loops.close();
  }
}
