/**
 * @module Worst-case bodies for the canonical JSON fingerprint: each shape fills 1 MiB (the default
 * `maxBodyBytes`), and the fingerprint's time is shown beside `JSON.parse` of the same bytes. A ratio that grows
 * with the body's size is a denial of service (one request holds the event loop for seconds).
 * Run: `node --import tsx bench/fingerprint.ts [path/to/fingerprint.ts]` — the default is the source; pass an
 * old copy (`git show <rev>:src/core/fingerprint.ts > /tmp/old-fingerprint.ts`) to compare.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { FingerprintInput } from '../packages/idem/src/core/fingerprint.js';

const MiB = 1_048_576;
/** The longest number the fingerprint canonicalises (`MAX_NUMBER_LENGTH`); a longer one hashes the body raw. */
const LONGEST = 4096;

/** A JSON array of `item` repeated, as long as fits in 1 MiB. */
function fill(item: string): string {
  const count = Math.floor((MiB - 2) / (item.length + 1));
  return `[${Array<string>(count).fill(item).join(',')}]`;
}

const zeros = (n: number): string => '0'.repeat(n);

/** Each shape's 1 MiB body. */
export const SHAPES: Readonly<Record<string, () => string>> = {
  'integers 1000…0001 (4096 digits)': () => fill(`1${zeros(LONGEST - 2)}1`),
  'integers 1000…0001000…0001': () => fill(`1${zeros(LONGEST / 2 - 2)}1${zeros(LONGEST / 2 - 1)}1`),
  'fractions 1.000…0001': () => fill(`1.${zeros(LONGEST - 3)}1`),
  'fractions 0.000…0001': () => fill(`0.${zeros(LONGEST - 3)}1`),
  'fraction and exponent 1.0…01e9…9': () => fill(`1.${zeros(LONGEST / 2)}1e${'9'.repeat(LONGEST / 2 - 5)}`),
  'exponents 1e999…9 (4094 digits)': () => fill(`1e${'9'.repeat(LONGEST - 2)}`),
  'exponents -1e-100…0': () => fill(`-1e-1${zeros(LONGEST - 5)}`),
  'integers 1000…0001 (256 digits)': () => fill(`1${zeros(254)}1`),
  'integers 100001': () => fill('100001'),
  'integers 1': () => fill('1'),
  'integers 10': () => fill('10'),
  'a number one byte too long': () => fill(`1${zeros(LONGEST - 1)}1`),
  'strings with escapes': () => fill('"\\u0041\\n"'),
  'objects 200 deep': () => fill(`${'{"a":'.repeat(200)}1${'}'.repeat(200)}`),
  'one object, 130 000 duplicate keys': () => `{${Array.from({ length: 130_000 }, () => '"k":1').join(',')}}`,
  'one object, 60 000 keys': () => `{${Array.from({ length: 60_000 }, (_, i) => `"k${i}":1`).join(',')}}`,
};

type Fingerprint = (input: FingerprintInput) => string;

/** The fastest of `runs` timings of `fn`, in ms. */
export function fastest(fn: () => unknown, runs: number): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    fn();
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

async function main(): Promise<void> {
  const path = resolve(process.argv[2] ?? 'packages/idem/src/core/fingerprint.ts');
  const { fingerprint } = (await import(pathToFileURL(path).href)) as { fingerprint: Fingerprint };
  console.log(`${path}\n${'shape'.padEnd(40)} ${'KiB'.padStart(5)} ${'parse ms'.padStart(9)} ${'print ms'.padStart(9)} ${'ratio'.padStart(7)}`);
  for (const [name, make] of Object.entries(SHAPES)) {
    const body = new TextEncoder().encode(make());
    const parse = fastest(() => JSON.parse(new TextDecoder().decode(body)), 5);
    // One warm-up run, then the fastest of three (one for a shape slower than a second: the old code).
    const first = fastest(() => fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body }), 1);
    const print = first > 1_000 ? first : fastest(() => fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body }), 3);
    const cells = [(body.byteLength / 1024).toFixed(0).padStart(5), parse.toFixed(1).padStart(9), print.toFixed(1).padStart(9)];
    console.log(`${name.padEnd(40)} ${cells.join(' ')} ${(print / parse).toFixed(1).padStart(7)}`);
  }
}

await main();
