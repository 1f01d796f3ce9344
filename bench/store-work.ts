/**
 * @module `npm run bench:store [-- --quick | --write | --report]`: what one new key asks of each store's backend —
 * its claim and its completion, one key at a time — beside the least any layer keeping the key there asks (the
 * *floor*: one conditional write, one update) and, on Redis, beside @node-idempotency. Counted: requests (round
 * trips), statements or commands the backend runs (a Redis script's own `redis.call`s included), and the CPU of
 * the process or thread serving them (/proc/<id>/schedstat). Redis runs on private `redis-server`s started here,
 * so `INFO commandstats` sees only one subject each. Subjects run interleaved, in rounds, in an order rotated each
 * round. `--write` writes docs/bench/store-work.md (every subject, and the reading), the summary section of
 * docs/BENCHMARKS.md ("Store work per new key"; bench/run.ts keeps it from docs/bench/store-work.json when it
 * rewrites the doc) and docs/bench/store-work.json; `--report` writes the two docs again from that JSON.
 * `BENCH_STORES=redis,postgres` runs some stores only; `BENCH_STORE_BEFORE=<a copy of packages/idem/src>` adds
 * that copy's stores ("Idem before") to the same rounds; `BENCH_STORE_OUT=<file>` writes the result there as JSON.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { report, section, splice, type StoreWorkResult } from './store-report.js';
import {
  cleanups,
  dynamoSubjects,
  machine,
  mysqlSubjects,
  postgresSubjects,
  redisSubjects,
  sqliteSubjects,
  type Subject,
} from './store-subjects.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const QUICK = process.argv.includes('--quick');
const WRITE = process.argv.includes('--write') && !QUICK;
const KEYS = QUICK ? 200 : Number(process.env.BENCH_STORE_KEYS ?? 2_000);
const ROUNDS = QUICK ? 2 : Number(process.env.BENCH_STORE_ROUNDS ?? 5);
const WARMUP = QUICK ? 50 : 300;
const BACKENDS = {
  redis: redisSubjects,
  postgres: postgresSubjects,
  mysql: mysqlSubjects,
  sqlite: sqliteSubjects,
  dynamodb: dynamoSubjects,
};
const chosen = (process.env.BENCH_STORES ?? Object.keys(BACKENDS).join(',')).split(',');

interface Tally {
  keys: number;
  requests: number;
  statements: number;
  cpuNs: number;
  commands: Map<string, { calls: number; usec: number }>;
}
interface Snapshot {
  requests: number;
  statements: number;
  cpuNs: number;
  commands: Map<string, { calls: number; usec: number }>;
}
const snapshot = async (s: Subject): Promise<Snapshot> => ({
  requests: s.requests(),
  statements: await s.statements(),
  cpuNs: await s.cpuNs(),
  commands: (await s.commandstats?.()) ?? new Map<string, { calls: number; usec: number }>(),
});

async function main(): Promise<void> {
  const load = loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
  const subjects: Subject[] = [];
  for (const name of chosen) {
    const make = BACKENDS[name as keyof typeof BACKENDS];
    if (!make) throw new Error(`unknown store ${name} (one of ${Object.keys(BACKENDS).join(', ')})`);
    try {
      subjects.push(...(await make()));
    } catch (error) {
      console.error(`skipping ${name}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  for (const s of subjects) for (let i = 0; i < WARMUP; i++) await s.newKey();
  const tallies = new Map<Subject, Tally>(
    subjects.map((s) => [s, { keys: 0, requests: 0, statements: 0, cpuNs: 0, commands: new Map() }]),
  );
  for (let round = 0; round < ROUNDS; round++) {
    const order = subjects.map((_, i) => subjects[(i + round) % subjects.length] as Subject);
    if (round % 2 === 1) order.reverse();
    for (const s of order) {
      const before = await snapshot(s);
      for (let i = 0; i < KEYS; i++) await s.newKey();
      const after = await snapshot(s);
      const tally = tallies.get(s) as Tally;
      tally.keys += KEYS;
      tally.requests += after.requests - before.requests;
      tally.statements += after.statements - before.statements;
      tally.cpuNs += after.cpuNs - before.cpuNs;
      for (const [name, { calls, usec }] of after.commands) {
        const was = before.commands.get(name) ?? { calls: 0, usec: 0 };
        const sum = tally.commands.get(name) ?? { calls: 0, usec: 0 };
        tally.commands.set(name, { calls: sum.calls + calls - was.calls, usec: sum.usec + usec - was.usec });
      }
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }
  const rows = subjects.map((s) => {
    const t = tallies.get(s) as Tally;
    const commands = [...t.commands]
      .map(([name, { calls, usec }]) => ({ name, calls: calls / t.keys, usec: usec / t.keys }))
      .filter(({ calls }) => calls > 0.001)
      .sort((a, b) => b.calls - a.calls || a.name.localeCompare(b.name));
    const sent = commands.filter(({ name }) => s.sends?.includes(name));
    return {
      store: s.store,
      layer: s.layer,
      requests: t.requests / t.keys,
      statements: t.statements / t.keys,
      cpuUs: t.cpuNs / t.keys / 1_000,
      ...(s.commandstats ? { commands, redisUs: sent.reduce((sum, { usec }) => sum + usec, 0) } : {}),
    };
  });
  const result: StoreWorkResult = {
    started: new Date().toISOString(),
    settings: { keys: KEYS, rounds: ROUNDS, warmup: WARMUP },
    machine: { cpu: cpus()[0]?.model ?? '?', cores: cpus().length, node: process.version, load, ...machine },
    rows,
  };
  console.log(report(result));
  // BENCH_STORE_OUT=<file>: the result as JSON there, docs untouched (`npm run bench` reads Redis's rows from it).
  if (process.env.BENCH_STORE_OUT) writeFileSync(process.env.BENCH_STORE_OUT, JSON.stringify(result, null, 2) + '\n');
  if (WRITE) {
    writeFileSync(join(ROOT, 'docs', 'bench', 'store-work.json'), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(ROOT, 'docs', 'bench', 'store-work.md'), report(result));
    splice(join(ROOT, 'docs', 'BENCHMARKS.md'), section(result));
  }
}

/** `--report`: the docs again from docs/bench/store-work.json, without a run. */
function rewrite(): void {
  const result = JSON.parse(readFileSync(join(ROOT, 'docs', 'bench', 'store-work.json'), 'utf8')) as StoreWorkResult;
  writeFileSync(join(ROOT, 'docs', 'bench', 'store-work.md'), report(result));
  splice(join(ROOT, 'docs', 'BENCHMARKS.md'), section(result));
}

try {
  if (process.argv.includes('--report')) rewrite();
  else await main();
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => console.error(error));
}
