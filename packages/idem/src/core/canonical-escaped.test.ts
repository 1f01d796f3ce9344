import { describe, expect, it } from 'vitest';
import { canonicalJson } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);

describe('canonicalJson, strings with escapes', () => {
  it('reads the rest of a string after an escape a word at a time, and stops at any byte that needs a look', () => {
    // After a first escape (`\u0070`, written again as `p`), each special byte at each offset of a 4-byte word.
    const cases: Array<[string, Uint8Array, string | undefined]> = [];
    for (let offset = 0; offset < 8; offset++) {
      const head = 'x'.repeat(20 + offset);
      cases.push([`escape at ${offset}`, utf8(`"\\u0070${head}\\n${head}"`), `"p${head}\\n${head}"`]);
      cases.push([`escaped quote at ${offset}`, utf8(`["\\u0070${head}\\"", 1]`), `["p${head}\\"",1e0]`]);
      cases.push([`end at ${offset}`, utf8(`{"\\u0070${head}":"\\/${head}"}`), `{"p${head}":"/${head}"}`]);
      cases.push([`é at ${offset}`, utf8(`"\\u0070${head}é${head}é"`), `"p${head}é${head}é"`]);
      cases.push([`\\u00e9 at ${offset}`, utf8(`"\\u0070${head}\\u00e9${head}"`), `"p${head}é${head}"`]);
      cases.push([`pair at ${offset}`, utf8(`"\\t${head}\\ud83d\\ude00${head}"`), `"\\t${head}😀${head}"`]);
      cases.push([`lone half at ${offset}`, utf8(`"\\t${head}\\ud83d${head}"`), `"\\t${head}\\ud83d${head}"`]);
      cases.push([`control at ${offset}`, utf8(`"\\u0070${head}\t${head}"`), undefined]);
      cases.push([`bad escape at ${offset}`, utf8(`"\\u0070${head}\\x${head}"`), undefined]);
      const invalid = utf8(`"\\u0070${head}é??${head}"`);
      invalid[9 + head.length] = 0xc3; // after a valid é, a lead byte then `?`: not UTF-8
      cases.push([`invalid UTF-8 at ${offset}`, invalid, undefined]);
      cases.push([`unterminated at ${offset}`, utf8(`"\\u0070${head}${head}`), undefined]);
      cases.push([`an escape cut at the end at ${offset}`, utf8(`"\\u0070${head}\\u00`), undefined]);
    }
    const actual = cases.map(([name, body]) => [name, canonicalJson(body)]);
    expect(actual).toEqual(cases.map(([name, , expected]) => [name, expected]));
  });

  it('agrees with JSON.stringify on keys of 90 bytes with escapes, records in two shapes', () => {
    const record = (r: number) =>
      `{${Array.from({ length: 4 }, (_, i) => `"\\u0070${'p'.repeat(31)}${'ab'[r % 2]}${'q'.repeat(28)}${4 - i}":"r${r}"`).join(',')}}`;
    const body = `[${Array.from({ length: 6 }, (_, r) => record(r)).join(',')}]`;
    const value = JSON.parse(body) as Array<Record<string, string>>;
    const sorted = value.map((item) => Object.fromEntries(Object.entries(item).sort(([x], [y]) => (x < y ? -1 : 1))));
    expect(canonicalJson(utf8(body))).toBe(JSON.stringify(sorted));
  });
});
