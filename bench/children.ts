/**
 * @module The sections of `npm run bench` that run as child processes of their own: the instruction counts
 * (bench/instructions.ts, under valgrind) and Redis's own work per new key (bench/store-work.ts on Redis: Idem
 * against @node-idempotency, `INFO commandstats` and the Redis process's CPU).
 */
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Results } from './results.js';
import { QUICK, ROOT, RUN, progress } from './settings.js';
import type { StoreWorkResult } from './store-report.js';

/**
 * `npm run bench:instructions` as a section of this run: the counts, the baseline and the change (a regression over
 * the tolerance is marked). `--quick` counts the Express rows and the Web layer's new key only.
 */
export function instructions(): Promise<Results['instructions']> {
  // BENCH_INSTRUCTIONS_FROM=<file>: the output of `bench:instructions -- --json` run beforehand on the same checkout
  // (the counts do not depend on the machine's load, only on the code), read instead of counting again.
  const from = process.env.BENCH_INSTRUCTIONS_FROM;
  if (from) {
    const line = readFileSync(from, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('JSON '));
    if (!line) throw new Error(`BENCH_INSTRUCTIONS_FROM=${from} holds no JSON line`);
    const counted = JSON.parse(line.slice(5)) as NonNullable<Results['instructions']>;
    return Promise.resolve({ ...counted, from: process.env.BENCH_INSTRUCTIONS_LABEL ?? from });
  }
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

/**
 * Redis's work per new key, Idem against @node-idempotency (issue 31's target: at most 2× the peer's): the
 * Redis process's CPU and its own time in the commands each sends, from `bench:store` on Redis alone (private
 * `redis-server`s, one key at a time; `--quick`: 2 rounds of 200 keys).
 */
export function redisWork(): Promise<Results['redisWork']> {
  const out = join(tmpdir(), `idem-bench-${RUN}-store.json`);
  const args = ['--import', 'tsx', join(ROOT, 'bench', 'store-work.ts'), ...(QUICK ? ['--quick'] : [])];
  return new Promise<Results['redisWork']>((resolve) => {
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      env: { ...process.env, BENCH_STORES: 'redis', BENCH_STORE_OUT: out },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    child.once('exit', () => {
      try {
        const result = JSON.parse(readFileSync(out, 'utf8')) as StoreWorkResult;
        const row = (layer: string) => {
          const found = result.rows.find((r) => r.store === 'redis' && r.layer === layer);
          return found
            ? { cpuUs: found.cpuUs, redisUs: found.redisUs ?? NaN, statements: found.statements }
            : undefined;
        };
        const [idem, peer] = [row('Idem'), row('@node-idempotency')];
        resolve(idem && peer ? { settings: result.settings, idem, peer } : undefined);
      } catch (error) {
        progress(`Redis's work per new key unavailable: ${String(error)}`);
        resolve(undefined);
      } finally {
        rmSync(out, { force: true });
      }
    });
  });
}
