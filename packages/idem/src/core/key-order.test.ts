import { describe, expect, it } from 'vitest';
import { canonicalCosts } from './canonical-json.js';
import { canonicalJson } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);

/** An object of these keys (as written in the body, escapes allowed) with values "v0", "v1", … in that order. */
function objectOf(keys: readonly string[]): { body: Uint8Array; canonical: string } {
  const last = new Map<string, string>();
  keys.forEach((key, i) => last.set(JSON.parse(`"${key}"`) as string, `v${i}`));
  const sorted = [...last.keys()].sort(); // JavaScript's order: UTF-16 code units
  return {
    body: utf8(`{${keys.map((key, i) => `"${key}":"v${i}"`).join(',')}}`),
    canonical: `{${sorted.map((key) => `${JSON.stringify(key)}:"${last.get(key) as string}"`).join(',')}}`,
  };
}

/** A fixed shuffle (a linear congruential generator). */
function shuffled<T>(items: T[], seed = 7): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    const j = seed % (i + 1);
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

const range = (count: number, key: (i: number) => string) => Array.from({ length: count }, (_, i) => key(i));

describe('key order', () => {
  // Up to 24 keys an insertion sort, more a multikey quicksort; both past the bytes every key shares.
  const cases: Record<string, string[]> = {
    'each key a prefix of the next, longest first': range(300, (i) => 'a'.repeat(300 - i)),
    'each key a prefix of the next, shuffled, with duplicates': shuffled(range(400, (i) => 'a'.repeat(1 + (i % 150)))),
    'a few keys, each a prefix of the next': shuffled(range(9, (i) => 'ab'.repeat(i))),
    'long shared prefixes, differing in the last byte': shuffled(range(60, (i) => `${'p'.repeat(100)}${i % 40}`)),
    'two groups with long prefixes of their own': shuffled(
      range(40, (i) => `${i % 2 === 0 ? 'a' : 'b'}${'x'.repeat(64)}${i}`),
    ),
    'many copies of a few keys': shuffled(range(300, (i) => `k${i % 3}`)),
    'U+FFFF after U+10000, as in UTF-16': shuffled(range(40, (i) => `${i % 2 === 0 ? '\uffff' : '\u{10000}'}${i % 7}`)),
    'escaped keys, raw twins, lone surrogates': shuffled([
      ...range(30, (i) => `\\u00${(0x61 + (i % 5)).toString(16)}${i % 4}`),
      ...range(30, (i) => `${String.fromCharCode(0x61 + (i % 5))}${i % 4}`),
      '\\ud83d',
      '\\ude00',
      '\\ud83d\\ude00',
      '😀',
      '\\uffff',
      '\\uE000',
      '\\u0000',
      '\\n',
      '\\"',
      '\\\\',
      '',
    ]),
    'a few escaped keys': ['\\u0062', 'a', '\\ud800', '\\u{10000}'.replace('{10000}', 'd800\\udc00'), 'é', '\\u00e9'],
  };
  for (const [name, keys] of Object.entries(cases)) {
    it(`sorts as JavaScript does, the last duplicate kept: ${name}`, () => {
      const { body, canonical } = objectOf(keys);
      expect(canonicalJson(body)).toBe(canonical);
    });
  }

  it('sorts keys each a prefix of the next in work linear in their bytes', () => {
    // 1,400 keys a, aa, …, longest first (about 1 MiB of keys): the radix sort before this one read every key again
    // at each of its 350 levels.
    const keys = range(1_400, (i) => 'a'.repeat(1_400 - i));
    const { body, canonical } = objectOf(keys);
    expect(canonicalJson(body)).toBe(canonical);
    const keyBytes = keys.reduce((total, key) => total + key.length, 0);
    // About 1.25 times their bytes (each read once for the prefix all share, then a word per 4 bytes); a scan per
    // group of the bytes its keys share was 60 times, and grew with their number.
    const { sorted } = canonicalCosts();
    expect([sorted > keyBytes, sorted <= 2 * keyBytes]).toEqual([true, true]);
  });

  it('sorts each shape of record once: the next of its keys takes its order', () => {
    // 300 records of 5 shapes in turn, 16 keys each, last first: only the first record of each shape is sorted.
    const keys = (r: number) => range(16, (i) => `${'vwxyz'[r % 5] as string}${15 - i}`);
    const record = (r: number) =>
      `{${keys(r)
        .map((key) => `"${key}":"${r}"`)
        .join(',')}}`;
    const sorted = (r: number) =>
      `{${[...keys(r)]
        .sort()
        .map((key) => `"${key}":"${r}"`)
        .join(',')}}`;
    const sortWork = (records: number) => {
      const body = utf8(`[${range(records, record).join(',')}]`);
      expect(canonicalJson(body)).toBe(`[${range(records, sorted).join(',')}]`);
      return canonicalCosts().sorted;
    };
    const once = sortWork(5);
    expect([once > 0, sortWork(300)]).toEqual([true, once]);
  });

  it('sorts records of keys sharing a long prefix, each its own, in work linear in their bytes', () => {
    // 100 records of 20 keys, each its own, 1,000 bytes shared but for the first byte of one (so the prefix all
    // share is empty): the 19 are read past their shared bytes 4 at a time, all at once, never compared pairwise.
    const record = (r: number) =>
      `{${range(20, (i) => `"${i === 0 ? 'b' : 'a'}${'x'.repeat(1000)}${r}_${19 - i}":1`).join(',')}}`;
    const body = utf8(`[${range(100, record).join(',')}]`);
    expect(canonicalJson(body)?.length).toBe(body.length + 2 * 2000);
    // A word of each of the 19 per 4 shared bytes, and a few more per record: 4,656 per record.
    expect(canonicalCosts().sorted).toBe(100 * 4_656);
  });
});
