import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalBytes, canonicalBytesFrom, canonicalCosts } from './canonical-json.js';
import { canonicalJson } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);

/**
 * A JSON value as written in a body (`source`: its text, with whitespace) and as the canonical form must write it
 * (`canonical`), built here by a plain reference: keys sorted with Array.prototype.sort on the decoded strings, the
 * last duplicate kept, strings as JSON.stringify writes their value. Numbers take their canonical form from
 * canonicalJson alone, which fingerprint.test.ts checks against its own reference.
 */
interface Sample {
  readonly source: string;
  readonly canonical: string;
}

const space = fc.constantFrom('', '', '', ' ', '\n', '\t', '\r\n  ');

/** String contents as a body writes them: raw characters and escapes, around U+E000 and the surrogates. */
const stringSource = (maxLength: number) =>
  fc
    .array(
      fc.constantFrom(
        'a',
        'b',
        'k',
        'z',
        'A',
        '0',
        ' ',
        '~',
        '\u007f',
        'é',
        '日',
        '\uE000',
        '\uFFFF',
        '😀',
        '\u{10000}',
        '\\n',
        '\\"',
        '\\\\',
        '\\/',
        '\\t',
        '\\u0000',
        '\\u001f',
        '\\u00e9',
        '\\u00E9',
        '\\uE000',
        '\\ud83d\\ude00',
        '\\uD800\\uDC00',
        '\\uDBFF\\uDFFF',
        '\\ud83d',
        '\\ude00',
        '\\u0061',
      ),
      { maxLength },
    )
    .map((parts) => parts.join(''));

const string = (maxLength: number): fc.Arbitrary<Sample> =>
  stringSource(maxLength).map((contents) => ({
    source: `"${contents}"`,
    canonical: JSON.stringify(JSON.parse(`"${contents}"`) as string),
  }));

const number: fc.Arbitrary<Sample> = fc
  .constantFrom(
    '0',
    '-0',
    '1',
    '10',
    '-7',
    '1.50',
    '0.001',
    '1e5',
    '2E-3',
    '123.4500e+2',
    '9007199254740993',
    '1e0000000000000000000001',
  )
  .map((source) => ({ source, canonical: canonicalJson(utf8(source)) as string }));

const literal: fc.Arbitrary<Sample> = fc
  .constantFrom('true', 'false', 'null')
  .map((word) => ({ source: word, canonical: word }));

/** A small pool of keys, so that objects get duplicates, escaped twins (`a` and `\u0061`) and shared prefixes. */
const key = fc.oneof(
  fc.constantFrom(
    '"a"',
    '"\\u0061"',
    '"b"',
    '"ab"',
    '"a b"',
    '"é"',
    '"\uE000"',
    '"😀"',
    '"\\ud83d"',
    '"key_0001"',
    '"key_0002"',
    '""',
  ),
  stringSource(4).map((contents) => `"${contents}"`),
);

function object(members: ReadonlyArray<readonly [string, Sample]>, gaps: readonly string[]): Sample {
  const last = new Map<string, string>();
  for (const [name, value] of members) last.set(JSON.parse(name) as string, value.canonical);
  const canonical = [...last.keys()].sort().map((name) => `${JSON.stringify(name)}:${last.get(name) as string}`);
  const gap = (i: number) => gaps[i % gaps.length] ?? '';
  const source = members.map(
    ([name, value], i) => `${gap(i)}${name}${gap(i + 1)}:${gap(i + 2)}${value.source}${gap(i + 3)}`,
  );
  return { source: `{${source.join(',')}${gap(0)}}`, canonical: `{${canonical.join(',')}}` };
}

const value: fc.Arbitrary<Sample> = fc.letrec<{ value: Sample }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    number,
    literal,
    string(6),
    fc.tuple(fc.array(tie('value'), { maxLength: 6 }), space).map(([items, gap]) => ({
      source: `[${gap}${items.map((item) => item.source).join(`${gap},`)}]`,
      canonical: `[${items.map((item) => item.canonical).join(',')}]`,
    })),
    fc
      .tuple(fc.array(fc.tuple(key, tie('value')), { maxLength: 12 }), fc.array(space, { minLength: 1, maxLength: 4 }))
      .map(([members, gaps]) => object(members, gaps)),
  ),
})).value;

describe('canonicalJson', () => {
  it('agrees with a plain reference on random bodies: key order, duplicates, escapes, whitespace, nesting', () => {
    fc.assert(
      fc.property(value, space, (sample, gap) => {
        expect(canonicalJson(utf8(`${gap}${sample.source}${gap}`))).toBe(sample.canonical);
      }),
      { numRuns: 3_000 },
    );
  });

  it('agrees with it on large objects: many keys sharing long prefixes, members of every size, nested out of order', () => {
    // Members past 512 bytes and objects past 8 members take the other paths: pieces relinked, the radix sort.
    const prefix = fc.constantFrom('', 'k', 'key_', 'x'.repeat(40), 'é'.repeat(9), '\uE000', '😀');
    const bigKey = fc
      .tuple(prefix, stringSource(3), fc.integer({ min: 0, max: 60 }))
      .map(([head, tail, n]) => `"${head}${tail}${n}"`);
    const filler = fc
      .integer({ min: 0, max: 700 })
      .map((n) => ({ source: `"${'y'.repeat(n)}"`, canonical: `"${'y'.repeat(n)}"` }));
    const leaf = fc.oneof(filler, number, string(4));
    const inner = fc.array(fc.tuple(bigKey, leaf), { maxLength: 30 }).map((members) => object(members, ['']));
    const outer = fc
      .tuple(
        fc.array(fc.tuple(bigKey, fc.oneof(leaf, inner)), { minLength: 1, maxLength: 80 }),
        fc.array(space, { minLength: 1, maxLength: 3 }),
      )
      .map(([members, gaps]) => object(members, gaps));
    fc.assert(
      fc.property(fc.array(outer, { minLength: 1, maxLength: 3 }), (objects) => {
        const body = `[${objects.map((o) => o.source).join(',')}]`;
        expect(canonicalJson(utf8(body))).toBe(`[${objects.map((o) => o.canonical).join(',')}]`);
      }),
      { numRuns: 400 },
    );
  });

  it('agrees with it on arrays of records: one shape repeated, varied in one key, with records sorted inside', () => {
    // A record takes the order of the last one sorted when its keys are the same (key-order.ts LastShape); a record
    // sorted inside another changes that shape while the outer one is being read.
    const leaf = fc.oneof(number, string(3));
    const pool = ['"a"', '"b"', '"c"', '"d"', '"e"', '"\\u0062"', '"é"', '"b b"'];
    const keys = fc.uniqueArray(fc.constantFrom(...pool), { minLength: 3, maxLength: 6 });
    const values = (count: number) => fc.array(leaf, { minLength: count, maxLength: count });
    const records = fc.tuple(keys, keys).chain(([outer, inner]) =>
      fc.array(
        fc
          .tuple(values(outer.length), values(inner.length), fc.nat(outer.length - 1), fc.boolean())
          .map(([own, nestedValues, at, rename]) => {
            // The nested record is the value of one outer key; sometimes the next key is renamed.
            const nested = object(
              inner.map((name, i) => [name, nestedValues[i] as Sample] as const),
              [''],
            );
            const name = (i: number) => (rename && i === (at + 1) % outer.length ? '"z"' : (outer[i] as string));
            return object(
              outer.map((_, i) => [name(i), i === at ? nested : (own[i] as Sample)] as const),
              [''],
            );
          }),
        { minLength: 2, maxLength: 12 },
      ),
    );
    fc.assert(
      fc.property(records, (items) => {
        const body = `[${items.map((item) => item.source).join(',')}]`;
        expect(canonicalJson(utf8(body))).toBe(`[${items.map((item) => item.canonical).join(',')}]`);
      }),
      { numRuns: 1_000 },
    );
  });

  it('reads long strings a word at a time, and stops at any byte that needs a look, wherever it falls', () => {
    // Each special byte at each offset of a 4-byte word, after a run long enough for the word-at-a-time scan.
    const cases: Array<[string, Uint8Array, string | undefined]> = [];
    for (let offset = 0; offset < 8; offset++) {
      const head = 'x'.repeat(20 + offset);
      cases.push([`escape at ${offset}`, utf8(`"${head}\\n${head}"`), `"${head}\\n${head}"`]);
      cases.push([`escaped quote at ${offset}`, utf8(`["${head}\\"", 1]`), `["${head}\\"",1e0]`]);
      cases.push([`end at ${offset}`, utf8(`{"${head}":"${head}"}`), `{"${head}":"${head}"}`]);
      cases.push([`é at ${offset}`, utf8(`"${head}é${head}"`), `"${head}é${head}"`]);
      cases.push([`control at ${offset}`, utf8(`"${head}\t${head}"`), undefined]);
      const invalid = utf8(`"${head}??${head}"`);
      invalid[1 + head.length] = 0xc3; // a lead byte, then `?`: not UTF-8
      cases.push([`invalid UTF-8 at ${offset}`, invalid, undefined]);
      cases.push([`unterminated at ${offset}`, utf8(`"${head}${head}`), undefined]);
    }
    const actual = cases.map(([name, body]) => [name, canonicalJson(body)]);
    expect(actual).toEqual(cases.map(([name, , expected]) => [name, expected]));
  });

  it('copies at most twice the body to reorder objects in place, however they nest; keeps about 2 MiB', () => {
    // 60 chains of 255 objects, each out of order, around a 12 KiB string: every object is small enough to be
    // reordered by copying, and copying them all would move each string 255 times (about 190 MiB).
    const chain = `${'{"b":0,"a":'.repeat(255)}"${'x'.repeat(12_000)}"${'}'.repeat(255)}`;
    const canonical = `${'{"a":'.repeat(255)}"${'x'.repeat(12_000)}"${',"b":0}'.repeat(255)}`;
    const body = utf8(`[${Array<string>(60).fill(chain).join(',')}]`);
    expect(canonicalJson(body)).toBe(`[${Array<string>(60).fill(canonical).join(',')}]`);
    const { copied } = canonicalCosts();
    expect([copied > 0, copied <= 2 * body.byteLength + 16_384]).toEqual([true, true]);
    // The output buffer is kept for bodies up to 1 MiB (twice that, 16 bytes and the scanner's room), not for larger.
    const large = (size: number) => utf8(`"${'y'.repeat(size - 2)}"`);
    const { room } = canonicalCosts();
    expect(room).toBe(20_840);
    expect(canonicalJson(large(1_048_576))?.length).toBe(1_048_576);
    expect(canonicalCosts().kept).toBe(2 * 1_048_576 + 16 + room);
    expect(canonicalJson(large(3_000_000))?.length).toBe(3_000_000);
    expect(canonicalCosts().kept).toBe(2 * 1_048_576 + 16 + room);
  });

  it('reads the body again into a larger buffer when the first is full (sized for the body, it never is)', () => {
    const bodies = [
      `[${Array<string>(5000).fill('1').join(',')}]`, // twice its size when canonical: `1e0`
      `{"b":"${'x'.repeat(3000)}","a":[1.5,-0.25e3,true,null],"c":{"z":1,"y":2}}`,
      '"\\u0041\\n"',
    ].map(utf8);
    const decode = (bytes: Uint8Array | undefined) => bytes && new TextDecoder().decode(bytes);
    const expected = bodies.map((body) => decode(canonicalBytes(body)));
    expect(bodies.map((body) => decode(canonicalBytesFrom(body, 1)))).toEqual(expected);
    expect(bodies.map((body) => decode(canonicalBytesFrom(body, 64)))).toEqual(expected);
  });

  it('reorders objects nested 255 deep around a long string, each out of order', () => {
    const inner = `"${'x'.repeat(100_000)}"`;
    const body = `${'{"b":0,"a":'.repeat(255)}${inner}${'}'.repeat(255)}`;
    expect(canonicalJson(utf8(body))).toBe(`${'{"a":'.repeat(255)}${inner}${',"b":0}'.repeat(255)}`);
  });
});
