/**
 * @module Worst-case bodies for the canonical JSON fingerprint: each shape fills 1 MiB (the default
 * `maxBodyBytes`). bench/fingerprint.bench.ts (`npm run bench:micro`) times the fingerprint of each beside
 * `JSON.parse` of the same bytes: a ratio that grows with the body's size is a denial of service (one request
 * holds the event loop for seconds). `IDEM_FINGERPRINT=path/to/old-fingerprint.ts` benches an old copy
 * (`git show <rev>:packages/idem/src/core/fingerprint.ts > /tmp/old-fingerprint.ts`) beside the source.
 */

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
