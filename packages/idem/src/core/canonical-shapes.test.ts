/**
 * The shape cache (canonical-shapes.ts) against shapes made to share a slot (review rev30): records alternating
 * between two sets of keys of the same lengths and the same first and last 4 bytes, escaped or not. The cache hashed
 * only those bytes, so each record evicted the other shape and was sorted again: 3.2–4.5× JSON.parse. Then (rev31)
 * keys over 64 bytes alike in their first and last 32: 5.2×.
 */
import { describe, expect, it } from 'vitest';
import { canonicalCosts } from './canonical-json.js';
import { canonicalJson } from './fingerprint.js';

const range = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

/** The sort work for `records` records alternating between two shapes of 16 keys named by `name(shape, i)`, last first. */
function sortWork(records: number, name: (shape: number, i: number) => string): number {
  const record = (r: number) => `{${range(16, (i) => `"${name(r % 2, 15 - i)}":"${r}"`).join(',')}}`;
  const body = utf8(`[${range(records, record).join(',')}]`);
  const parsed = JSON.parse(new TextDecoder().decode(body)) as Array<Record<string, string>>;
  const sorted = (value: Record<string, string>) =>
    `{${Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${JSON.stringify(value[key])}`)
      .join(',')}}`;
  expect(canonicalJson(body)).toBe(`[${parsed.map(sorted).join(',')}]`);
  return canonicalCosts().sorted;
}

describe('shapes that agree on their keys but for the middle bytes', () => {
  it.each([
    ['plain keys', (shape: number, i: number) => `pfx_${'ab'[shape]!.repeat(4)}${String(i).padStart(4, '0')}`],
    ['escaped keys', (shape: number, i: number) => `\\u0070fx_${'ab'[shape]!.repeat(4)}${String(i).padStart(4, '0')}`],
    [
      'keys of 40 bytes',
      (shape: number, i: number) => `pfx_${'x'.repeat(15)}${'ab'[shape]}${'y'.repeat(16)}${String(i).padStart(4, '0')}`,
    ],
    [
      'escaped keys of 65 bytes, alike but for the middle (a long key is hashed on its ends first)',
      (shape: number, i: number) =>
        `\\u0070${'p'.repeat(31)}${'ab'[shape]}${'q'.repeat(28)}${String(i).padStart(4, '0')}`,
    ],
  ])('%s: two shapes alternating are each sorted once, over 2 records or 400', (_, name) => {
    const twice = sortWork(2, name);
    expect([twice > 0, sortWork(400, name)]).toEqual([true, twice]);
  });
});
