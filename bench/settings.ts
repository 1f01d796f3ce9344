/**
 * @module The bench run's settings (bench/run.ts and the modules it drives): the checkout, the flags (`--quick`,
 * `--cpu-prof`), this run's id, the database URLs, the rounds and seconds per measurement, the request body, and the
 * progress line on stderr.
 */
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const QUICK = process.argv.includes('--quick');
export const PROFILE = process.argv.includes('--cpu-prof');
export const RUN = randomUUID().slice(0, 8);
export const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

export const SETTINGS = QUICK
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
export type Settings = typeof SETTINGS;

export const BODY = JSON.stringify({ amount: 500, currency: 'usd', source: 'tok_visa' });

export function progress(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
