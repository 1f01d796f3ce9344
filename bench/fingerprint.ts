/**
 * @module Worst-case bodies for the canonical JSON fingerprint: each shape fills 1 MiB (the default
 * `maxBodyBytes`). bench/fingerprint.bench.ts (`npm run bench:micro`) times the fingerprint of each beside
 * `JSON.parse` of the same bytes: a ratio that grows with the body's size is a denial of service (one request
 * holds the event loop for seconds). `IDEM_FINGERPRINT=path/to/old-fingerprint.ts` benches an old copy
 * (`git show <rev>:packages/idem/src/core/fingerprint.ts > /tmp/old-fingerprint.ts`) beside the source.
 * `CHARGES` are the same hostile shapes as whole charges the demo accepts, for bench/worst-case.ts.
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

/** A charge the demo accepts (`amount` and the rest valid), with `pad` filling the body to at most 1 MiB. */
function charge(pad: (room: number) => string): string {
  const head = '{"amount":500,"currency":"usd","source":"tok_visa","pad":';
  return `${head}${pad(MiB - head.length - 1)}}`;
}

/** `item` repeated in a JSON array of at most `room` bytes. */
function repeat(item: string, room: number): string {
  return `[${Array<string>(Math.floor((room - 2) / (item.length + 1)))
    .fill(item)
    .join(',')}]`;
}

/** One object of `count` keys named by `name`, last first: every record must be sorted. */
function reversed(count: number, name: (i: number) => string): string {
  return `{${Array.from({ length: count }, (_, i) => `"${name(count - i)}":1`).join(',')}}`;
}

/** `count` keys named by `name` in an order of their own for record `r` (a fixed shuffle): none like another's. */
function shuffled(count: number, r: number, name: (i: number) => string): string {
  const keys = Array.from({ length: count }, (_, i) => `"${name(i)}":1`);
  let seed = r + 1;
  for (let i = count - 1; i > 0; i--) {
    seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
    const j = seed % (i + 1);
    [keys[i], keys[j]] = [keys[j] as string, keys[i] as string];
  }
  return `{${keys.join(',')}}`;
}

/** Records made by `record(i)` for i = 0, 1, … in a JSON array of at most `room` bytes (of UTF-8): each its own keys. */
function records(record: (i: number) => string, room: number): string {
  const items: string[] = [];
  let length = 2;
  for (let i = 0; ; i++) {
    const item = record(i);
    const bytes = new TextEncoder().encode(item).byteLength;
    if (length + bytes + 1 > room) return `[${items.join(',')}]`;
    items.push(item);
    length += bytes + 1;
  }
}

/**
 * Crafted 1 MiB charge bodies (bench/worst-case.ts): valid charges, so the demo fingerprints them rather than
 * refusing them, each padded with one hostile shape. Lengths count bytes: most shapes are ASCII, `records` counts the
 * UTF-8 of each, and a CJK character is 3 bytes.
 */
export const CHARGES: Readonly<Record<string, () => string>> = {
  // The body is an object and `pad` an array: 254 more objects bring the innermost number to the depth limit (256).
  'objects 254 deep, repeated': () => charge((room) => repeat(`${'{"a":'.repeat(254)}1${'}'.repeat(254)}`, room)),
  'unordered objects 254 deep around a string': () =>
    charge((room) => {
      const open = '{"b":0,"a":'.repeat(254);
      return `${open}"${'x'.repeat(room - open.length - 254 - 2)}"${'}'.repeat(254)}`;
    }),
  'numbers [1,1,…]': () => charge((room) => repeat('1', room)),
  'numbers [1.5,1.5,…]': () => charge((room) => repeat('1.5', room)),
  'one object, 50 000 shuffled keys': () => {
    // A fixed shuffle: i × 7919 mod 50 000 visits every index once (7919 is a prime, coprime with 50 000).
    const keys = Array.from({ length: 50_000 }, (_, i) => `"key_${String((i * 7919) % 50_000).padStart(11, '0')}":1`);
    return `{"amount":500,"currency":"usd","source":"tok_visa",${keys.join(',')}}`;
  },
  'small objects {"b":1,"a":2}': () => charge((room) => repeat('{"b":1,"a":2}', room)),
  'records of 16 keys, reversed': () =>
    charge((room) =>
      repeat(
        reversed(16, (i) => `k${i}`),
        room,
      ),
    ),
  'records of 20 keys, 40 bytes shared, reversed': () =>
    charge((room) =>
      repeat(
        reversed(20, (i) => `${'p'.repeat(40)}${i}`),
        room,
      ),
    ),
  'strings with escapes': () => charge((room) => repeat('"\\u0041\\n"', room)),
  'a plain long string': () => charge((room) => `"${'x'.repeat(room - 2)}"`),
  // Found since: each was 3× to 150× JSON.parse before the sort and the string scan were changed for it.
  'keys a, aa, aaa, … in one object, longest first': () =>
    charge((room) => {
      const keys: string[] = [];
      for (let i = 1, length = 2; length + i + 5 <= room; length += i + 5, i++) keys.push(`"${'a'.repeat(i)}":1`);
      return `{${keys.reverse().join(',')}}`;
    }),
  'records of 8 keys, 1000 bytes shared, each its own': () =>
    charge((room) => records((r) => reversed(8, (i) => `${'p'.repeat(1000)}${r}_${i}`), room)),
  'records of 16 keys, two shapes alternating': () =>
    charge((room) => records((r) => reversed(16, (i) => `${r % 2 === 0 ? 'a' : 'b'}${i}`), room)),
  'records of 9 keys, reversed': () =>
    charge((room) =>
      repeat(
        reversed(9, (i) => `k${i}`),
        room,
      ),
    ),
  'records of 8 escaped keys, each its own': () =>
    charge((room) => records((r) => reversed(8, (i) => `\\u006b${r}_${i}`), room)),
  'small objects {"\\u0062":1,"\\u0061":2}': () => charge((room) => repeat('{"\\u0062":1,"\\u0061":2}', room)),
  // U+FFFF sorts after U+10000 in UTF-16 (JavaScript's order), before it by code point (UTF-8's).
  'records of 8 keys U+FFFF/U+10000…, each its own': () =>
    charge((room) => records((r) => reversed(8, (i) => `${i % 2 === 0 ? '\uffff' : '\u{10000}'}${r}_${i}`), room)),
  'a long string, an escape first': () => charge((room) => `"\\n${'x'.repeat(room - 4)}"`),
  'a long CJK string': () => charge((room) => `"${'中'.repeat(Math.floor((room - 2) / 3))}"`),
  'nulls [null,null,…]': () => charge((room) => repeat('null', room)),
  // Reviews rev30 and rev31: two shapes whose keys agree on their lengths and ends (the shape cache's hash once read
  // only those), and 90-byte keys with an escape in the middle.
  'records of 16 escaped keys, two shapes alike at the ends': () =>
    charge((room) => records((r) => reversed(16, (i) => `\\u0070fx_${'ab'[r % 2]?.repeat(4)}${i}`), room)),
  'records of 16 long keys, two shapes alike but the middle': () =>
    charge((room) =>
      records((r) => reversed(16, (i) => `\\u0070${'p'.repeat(31)}${'ab'[r % 2]}${'q'.repeat(28)}${i}`), room),
    ),
  'records of 16 long keys, an escape in the middle': () =>
    charge((room) =>
      repeat(
        reversed(16, (i) => `${'p'.repeat(32)}\\u0061\\u0061${'q'.repeat(28)}${i}`),
        room,
      ),
    ),
  // Issue 30's review: keys with an escape and a long shared prefix, in an order of each record's own (no shape kept).
  'records of 8 escaped keys, 1000 bytes shared, shuffled': () =>
    charge((room) => records((r) => shuffled(8, r, (i) => `\\u0061${'k'.repeat(1000)}${i}`), room)),
  'records of 32 escaped keys, 50 bytes shared, shuffled': () =>
    charge((room) => records((r) => shuffled(32, r, (i) => `\\u0061${'k'.repeat(50)}${i}`), room)),
};
