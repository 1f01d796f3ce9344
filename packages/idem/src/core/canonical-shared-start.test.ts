import { describe, expect, it } from 'vitest';
import { canonicalJson } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);

/** JavaScript's own canonical form of `body`: keys in UTF-16 order, the last of equal keys kept. */
function reference(body: string): string {
  const sort = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(sort)
      : typeof value === 'object' && value !== null
        ? Object.fromEntries(
            Object.entries(value)
              .sort(([x], [y]) => (x < y ? -1 : 1))
              .map(([key, item]) => [key, sort(item)]),
          )
        : value;
  return JSON.stringify(sort(JSON.parse(body)));
}

describe('canonicalJson, keys with escapes that share their first bytes (canonical-keys.ts sharedStart)', () => {
  it('cuts the shared bytes back to where an escape or a UTF-8 character starts', () => {
    const cases: Array<[string, string, string]> = [
      // Shared up to `\u00`: hex digits in upper and lower case do not sort as their values.
      ['within an escape', '{"\\u0061kk\\u00E9":"x","\\u0061kk\\u00e8":"y"}', '{"akkè":"y","akké":"x"}'],
      // Shared up to the lead byte C3 of é (C3 A9) and ê (C3 AA), and up to the lead EE of U+E000 and U+E001.
      ['within a UTF-8 character', '{"\\u0061pê":"x","\\u0061pé":"y"}', '{"apé":"y","apê":"x"}'],
      ['within a 3-byte character', '{"\\u0061p\ue001":"x","\\u0061p\ue000":"y"}', '{"ap\ue000":"y","ap\ue001":"x"}'],
      // U+FFFF (EF BF BF) after U+10000 (F0 90 80 80) in UTF-16, before it by code point: the shared bytes end at p.
      ['U+FFFF and U+10000', '{"\\u0061p\uffff":"x","\\u0061p\u{10000}":"y"}', '{"ap\u{10000}":"y","ap\uffff":"x"}'],
      // `\ud800` shared, then the pair's second half or U+E000: DC00 before E000.
      [
        'half a pair shared',
        '{"\\u0061\\ud800\ue000":"x","\\u0061\\ud800\\udc00":"y"}',
        '{"a𐀀":"y","a\\ud800\ue000":"x"}',
      ],
      // An escaped backslash then `u0061`: not an escape, so `\\u` is shared and `0061` against `0062`.
      [
        'an escaped backslash',
        '{"\\u0061\\\\u0062":"x","\\u0061\\\\u0061":"y"}',
        '{"a\\\\u0061":"y","a\\\\u0062":"x"}',
      ],
      // The same key written two ways, and one that is all the shared bytes: the last of equal keys kept.
      ['equal keys', '{"\\u0061bc":"x","ab\\u0063":"y","\\u0061b":"z"}', '{"ab":"z","abc":"y"}'],
      ['all the same bytes', '{"\\u0061\\u0062":"x","\\u0061\\u0062":"y"}', '{"ab":"y"}'],
    ];
    const actual = cases.map(([name, body]) => [name, canonicalJson(utf8(body))]);
    expect(actual).toEqual(cases.map(([name, , expected]) => [name, expected]));
    expect(cases.map(([, body]) => reference(body))).toEqual(cases.map(([, , expected]) => expected));
  });

  it('agrees with JavaScript on records of shuffled keys sharing long prefixes, at each cut', () => {
    const tails = [
      '\\u0061',
      'a',
      '\\u00e9',
      'é',
      '\\u00E9',
      '\ue000',
      '\\uffff',
      '\u{10000}',
      '\\ud800',
      '\\udc00',
      'b',
    ];
    for (const head of ['\\u0061', 'é\\n', '\\u0061\\u0062\\u0063', '\\\\', '\u{1f600}\\"']) {
      for (let pad = 0; pad < 6; pad++) {
        const prefix = `${head}${'k'.repeat(pad)}`;
        // Each record: every tail after the prefix, and after the prefix and another tail, in a rotated order.
        const records = tails.map((_, r) => {
          const keys = tails.flatMap((tail, i) => [
            `${prefix}${tail}`,
            `${prefix}${tails[(i + r) % tails.length]}${tail}`,
          ]);
          const rotated = [...keys.slice(r), ...keys.slice(0, r)];
          return `{${rotated.map((key, i) => `"${key}":"v${i}"`).join(',')}}`;
        });
        const body = `[${records.join(',')}]`;
        expect([prefix, canonicalJson(utf8(body))]).toEqual([prefix, reference(body)]);
      }
    }
  });
});
