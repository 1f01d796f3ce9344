import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, fingerprint, fingerprintsEqual } from './fingerprint.js';

const json = (text: string) => new TextEncoder().encode(text);
const post = (body: string, overrides: Partial<Parameters<typeof fingerprint>[0]> = {}) =>
  fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body: json(body), ...overrides });

describe('canonicalJson', () => {
  it('sorts keys, drops whitespace and writes numbers in one exact form', () => {
    expect(canonicalJson(json('{ "b": 1.50, "a": [true, null, "x"] }'))).toBe('{"a":[true,null,"x"],"b":15e-1}');
    expect(canonicalJson(json('100'))).toBe('1e2');
    expect(canonicalJson(json('1E2'))).toBe('1e2');
    expect(canonicalJson(json('-0.0'))).toBe('0');
    expect(canonicalJson(json('"\\u0041"'))).toBe('"A"');
  });

  it('keeps precision JSON.parse would lose', () => {
    expect(canonicalJson(json('9007199254740993'))).toBe('9007199254740993e0');
    expect(canonicalJson(json('9007199254740992'))).toBe('9007199254740992e0');
  });

  it('keeps the last of duplicate keys, as JSON.parse does', () => {
    expect(canonicalJson(json('{"a":1,"a":2}'))).toBe('{"a":2e0}');
  });

  it('returns undefined for non-JSON, bad UTF-8 and nesting deeper than 256', () => {
    expect(canonicalJson(json('{"a":'))).toBeUndefined();
    expect(canonicalJson(json('{"a":1} x'))).toBeUndefined();
    expect(canonicalJson(json("{'a':1}"))).toBeUndefined();
    expect(canonicalJson(new Uint8Array([0x22, 0xff, 0x22]))).toBeUndefined();
    expect(canonicalJson(json('['.repeat(256) + ']'.repeat(256)))).toBe('['.repeat(256) + ']'.repeat(256));
    expect(canonicalJson(json('['.repeat(300) + ']'.repeat(300)))).toBeUndefined();
    expect(canonicalJson(json('['.repeat(100_000)))).toBeUndefined();
  });
});

describe('fingerprint', () => {
  it('is a 64-character hex SHA-256', () => {
    expect(post('{}')).toMatch(/^[0-9a-f]{64}$/);
  });

  it('ignores JSON key order and whitespace', () => {
    expect(post('{"a":1,"b":2}')).toBe(post('{"b":2, "a":1}'));
    expect(post('{"amount":50000,"currency":"usd"}')).toBe(post('{\n "currency": "usd",\n "amount": 5e4\n}'));
  });

  it('differs for another payload, method, route, query or configured header', () => {
    const base = post('{"amount":50000}');
    expect(post('{"amount":500000}')).not.toBe(base);
    expect(post('{"amount":50000}', { method: 'PUT' })).not.toBe(base);
    expect(post('{"amount":50000}', { path: '/v1/refunds' })).not.toBe(base);
    expect(post('{"amount":50000}', { query: 'expand=customer' })).not.toBe(base);
    expect(post('{"amount":50000}', { headers: [['x-api-version', '2']] })).not.toBe(base);
  });

  it('sorts query pairs and header names', () => {
    expect(post('{}', { query: '?b=2&a=1' })).toBe(post('{}', { query: 'a=1&b=2' }));
    expect(
      post('{}', {
        headers: [
          ['B', '1'],
          ['a', '2'],
        ],
      }),
    ).toBe(
      post('{}', {
        headers: [
          ['a', '2'],
          ['b', '1'],
        ],
      }),
    );
  });

  it('hashes non-JSON bodies as raw bytes', () => {
    const text = (body: string) => post(body, { contentType: 'text/plain' });
    expect(text('a=1&b=2')).not.toBe(text('b=2&a=1')); // forms: canonical-form.test.ts
    expect(post('{"a":1}', { contentType: 'text/plain' })).not.toBe(post('{ "a":1}', { contentType: 'text/plain' }));
    expect(post('{"a":1}', { contentType: 'application/vnd.api+json' })).toBe(post('{ "a":1}'));
  });

  it('is stable across versions: these inputs hash to the values stored records already carry', () => {
    // A changed fingerprint turns every retry of a stored key into a mismatch; this pins the format.
    const body = json('{"currency":"usd","amount":5e4,"note":"caf\u00e9 \\u00e9"}');
    expect(post('', { query: '?b=2&a=1', body, headers: [['X-Api-Version', '2']] })).toBe(
      'c1f083cae4cd1983eec0826471583eace69b955058e50fa48457fc8d2e4b9a17',
    );
    expect(post('a=1&b=2', { path: '/v1/uploads', contentType: 'text/plain' })).toBe(
      '1fda7fa86e5f3bf1ab50eaf4eebe454025e5a2163d68e174ae3743e84cb095cf',
    );
  });

  it('compares in constant time and only equal strings match', () => {
    const a = post('{"a":1}');
    expect(fingerprintsEqual(a, a)).toBe(true);
    expect(fingerprintsEqual(a, post('{"a":2}'))).toBe(false);
    expect(fingerprintsEqual(a, a.slice(1))).toBe(false);
  });
});

/**
 * The canonical number as the first version wrote it, straightforwardly (regular expressions and BigInt, fine for
 * the short inputs here): the rewritten parser must agree with it on every number it accepted.
 */
function referenceNumber(source: string): string | undefined {
  const match = /^(-?)(0|[1-9]\d*)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(source);
  if (!match || source.length > 4096) return undefined;
  const [, sign = '', int = '', frac = '', exp = '0'] = match;
  const digits = (int + frac).replace(/^0+/, '');
  if (digits === '') return '0';
  const trimmed = digits.replace(/0+$/, '');
  return `${sign}${trimmed}e${BigInt(exp) + BigInt(digits.length - trimmed.length - frac.length)}`;
}

describe('canonical numbers', () => {
  // Zeros and nines weighted up: they make the trailing zeros, the carries and the borrows.
  const digit = fc.constantFrom('0', '0', '0', '9', '9', '1', '5');
  const digits = (minLength: number, maxLength: number) => fc.string({ unit: digit, minLength, maxLength });
  // A run of zeros or nines in an exponent's last 15 digits, where adding the shift carries or borrows.
  const longExponent = fc
    .tuple(digits(0, 4), fc.constantFrom('0', '9'), fc.integer({ min: 12, max: 20 }), digits(0, 3))
    .map(([head, run, length, tail]) => `${head}${run.repeat(length)}${tail}`);
  const number = fc
    .record({
      sign: fc.constantFrom('', '-'),
      int: fc.oneof(
        fc.constant('0'),
        fc.tuple(fc.constantFrom('1', '5', '9'), digits(0, 30)).map(([a, b]) => a + b),
      ),
      frac: fc.option(digits(1, 30), { nil: undefined }),
      exp: fc.option(
        fc
          .tuple(
            fc.constantFrom('e', 'E'),
            fc.constantFrom('', '+', '-'),
            fc.oneof(digits(1, 3), digits(14, 40), longExponent),
          )
          .map((parts) => parts.join('')),
        { nil: undefined },
      ),
    })
    .map(({ sign, int, frac, exp }) => `${sign}${int}${frac === undefined ? '' : `.${frac}`}${exp ?? ''}`);

  it('match the reference on random numbers, alone and inside JSON', () => {
    fc.assert(
      fc.property(number, (source) => {
        const expected = referenceNumber(source);
        expect(canonicalJson(json(source))).toBe(expected);
        expect(canonicalJson(json(`{"n":[ ${source} ]}`))).toBe(`{"n":[${expected}]}`);
      }),
      { numRuns: 3_000 },
    );
  });

  it('match the reference on random text made of number characters (what it accepts, and what it refuses)', () => {
    const noise = fc.string({
      unit: fc.constantFrom('0', '0', '1', '9', '.', 'e', 'E', '+', '-'),
      minLength: 1,
      maxLength: 24,
    });
    fc.assert(
      fc.property(noise, (source) => void expect(canonicalJson(json(source))).toBe(referenceNumber(source))),
      { numRuns: 3_000 },
    );
  });

  it('carry and borrow across a long exponent, and keep the 4096-character limit', () => {
    const cases = [
      '10e1999999999999999', // shift +1 carries out of the last 15 digits
      '0.1e-1999999999999999', // shift -1 on a negative exponent carries too
      '0.01e1000000000000000', // shift -2 borrows, down to 15 digits
      '0.01e10000000000000000', // … and from a 17-digit exponent to 16
      '100e-10000000000000001', // shift +2 on a negative exponent borrows
      '1e+0000000000000000000000000000007',
      '-1.0e-0000000000000000000000000000000',
      '5e123456789012345678901234567890',
      `1${'0'.repeat(4094)}1`,
      `1${'0'.repeat(4095)}1`, // 4097 characters: hashed raw, as before
      `1e${'9'.repeat(4094)}`,
    ];
    for (const source of cases)
      expect([source, canonicalJson(json(source))]).toEqual([source, referenceNumber(source)]);
    expect(canonicalJson(json('10e1999999999999999'))).toBe('1e2000000000000000');
    expect(canonicalJson(json('0.1e-1999999999999999'))).toBe('1e-2000000000000000');
    expect(canonicalJson(json('0.01e1000000000000000'))).toBe('1e999999999999998');
    expect(canonicalJson(json('0.01e10000000000000000'))).toBe('1e9999999999999998');
    expect(canonicalJson(json('100e-10000000000000001'))).toBe('1e-9999999999999999');
    expect(canonicalJson(json(`1${'0'.repeat(4095)}1`))).toBeUndefined();
  });

  it('take time linear in the body: 1 MiB of worst-case numbers within 50× JSON.parse of the same bytes', () => {
    // The first version trimmed trailing zeros with /0+$/, quadratic in a run of zeros followed by a non-zero
    // digit: 1 MiB of `1000…0001` (the longest number canonicalised) took over a second, ~1000× JSON.parse.
    const MiB = 1_048_576;
    const fill = (item: string) =>
      `[${Array<string>(Math.floor((MiB - 2) / (item.length + 1)))
        .fill(item)
        .join(',')}]`;
    const zeros = (n: number) => '0'.repeat(n);
    const shapes: Record<string, string> = {
      integers: fill(`1${zeros(4094)}1`),
      fractions: fill(`1.${zeros(4093)}1`),
      'two runs of zeros': fill(`1${zeros(2046)}1${zeros(2047)}1`),
      'fraction and exponent': fill(`1.${zeros(2048)}1e${'9'.repeat(2043)}`),
      'long exponents': fill(`1e${'9'.repeat(4094)}`),
      // Objects 255 deep with two members each around one long string: a join per level copied the subtree at
      // every level (depth × size, 357× JSON.parse before; a hostile review's find).
      'deep objects around a long string': (() => {
        const open = '{"b":0,"a":'.repeat(255);
        const close = '}'.repeat(255);
        return `${open}"${'x'.repeat(MiB - open.length - close.length - 2)}"${close}`;
      })(),
    };
    // Not here: 1 MiB of `10,10,…` (14× JSON.parse, 22× before): a constant factor of building strings where
    // JSON.parse allocates nothing, not a growth; too close to the bound on a loaded machine (bench/fingerprint.ts).
    const fastest = (fn: () => unknown, runs: number): number => {
      let best = Number.POSITIVE_INFINITY;
      for (let i = 0; i < runs; i++) {
        const started = performance.now();
        fn();
        best = Math.min(best, performance.now() - started);
      }
      return best;
    };
    const ratios: Record<string, true | string> = {};
    for (const [name, text] of Object.entries(shapes)) {
      const body = json(text);
      expect(body.byteLength).toBeLessThanOrEqual(MiB);
      expect(canonicalJson(body)).not.toBeUndefined();
      const parse = fastest(() => JSON.parse(new TextDecoder().decode(body)), 5);
      // The best of up to three runs (the first also warms the code up): noise only ever slows a run down.
      let ratio = Number.POSITIVE_INFINITY;
      for (let run = 0; run < 3 && ratio >= 50; run++)
        ratio = Math.min(ratio, fastest(() => post('', { body }), 1) / parse);
      ratios[name] = ratio < 50 || `${ratio.toFixed(0)}× JSON.parse`;
    }
    expect(ratios).toEqual(Object.fromEntries(Object.keys(shapes).map((name) => [name, true])));
  }, 120_000);
});
