/**
 * What the input fuzz test generates: key shapes, bodies, methods, targets and headers, for `fetch` and raw TCP.
 * Each generated key takes a fresh prefix (`nextPrefix` in the test), so a valid key is never reused.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { API_KEY } from './oracle.js';

export const AUTH = `Bearer ${API_KEY}`;

// ---- keys: shapes that take the unique prefix -------------------------------------------------------------

export type KeyShape = (prefix: string) => string;
export const visible = fc.string({
  unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 40,
});
export const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 30,
});
export const escapeSf = (s: string): string => s.replace(/["\\]/g, '\\$&');

/** Key header values `fetch` can send (it refuses NUL, CR, LF and code points above 0xFF). */
export const fetchKeyShape: fc.Arbitrary<KeyShape> = fc.oneof(
  { weight: 4, arbitrary: fc.constant((p: string) => `${p}${randomUUID()}`) },
  { weight: 3, arbitrary: visible.map((s) => (p: string) => `${p}${s}`) },
  { weight: 2, arbitrary: printable.map((s) => (p: string) => `"${p}${escapeSf(s)}"`) },
  { weight: 1, arbitrary: printable.map((s) => (p: string) => `"${p}${s}"`) },
  fc.constantFrom<KeyShape>(
    () => '',
    () => ' ',
    () => '""',
    () => '"',
    (p) => `"${p}`,
    (p) => `${p}"`,
    (p) => `"${p}\\q"`,
    (p) => `"${p}\\"`,
    (p) => `${p}"x"`,
    (p) => ` ${p} `,
    (p) => `\t${p}`,
    (p) => `${p} x`,
    (p) => `${p}, ${p}`,
    (p) => `${p},${p}`,
    (p) => `${p}\tx`,
    (p) => `${p}é`,
    (p) => `${p}\u00ff`,
    (p) => (p + 'k'.repeat(255)).slice(0, 255),
    (p) => `"${(p + 'k'.repeat(255)).slice(0, 255)}"`,
    (p) => (p + 'k'.repeat(256)).slice(0, 256),
    (p) => `${p}${'k'.repeat(1_000)}`,
  ),
  fc.integer({ min: 256, max: 2_000 }).map((n) => () => 'k'.repeat(n)),
  fc
    .constantFrom(...[...Array(32).keys()].filter((c) => c !== 0 && c !== 9 && c !== 10 && c !== 13), 0x7f)
    .map((c) => (p: string) => `${p}${String.fromCharCode(c)}x`),
);

// ---- bodies ----------------------------------------------------------------------------------------------

export const amount = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: 99_999_999 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom<unknown>(
      0,
      -1,
      1,
      99_999_999,
      100_000_000,
      1.5,
      2 ** 53,
      -0,
      1e21,
      '500',
      true,
      null,
      [500],
      { v: 500 },
    ),
  },
);
export const currency = fc.option(
  fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom('usd', 'eur', 'gbp') },
    fc.constantFrom<unknown>('USD', 'xyz', '', 5, null),
  ),
  {
    nil: undefined,
  },
);
export const source = fc.option(
  fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom('tok_visa', 'tok_mastercard', 'tok_chargeDeclined') },
    fc.constantFrom<unknown>('tok_nope', 1, null),
  ),
  { nil: undefined },
);
export const extra = fc.dictionary(
  fc.constantFrom('metadata', 'description', '__proto__', 'constructor', 'x', 'amount_decimal'),
  fc.jsonValue({ maxDepth: 3 }),
  {
    maxKeys: 2,
  },
);
export const validish = fc
  .record({ amount, currency, source, extra, pretty: fc.boolean() })
  .map(({ amount: a, currency: c, source: s, extra: x, pretty }) => {
    const object: Record<string, unknown> = { ...x, amount: a };
    if (c !== undefined) object.currency = c;
    if (s !== undefined) object.source = s;
    return Buffer.from(JSON.stringify(object, null, pretty ? 2 : undefined));
  });
export const nest = (depth: number, open: string, close: string, inner: string): string =>
  open.repeat(depth) + inner + close.repeat(depth);
export const body: fc.Arbitrary<Buffer> = fc.oneof(
  { weight: 10, arbitrary: validish },
  // Malformed JSON: a valid body cut short, or with a byte changed.
  validish.chain((b) => fc.integer({ min: 0, max: Math.max(0, b.length - 1) }).map((cut) => b.subarray(0, cut))),
  validish.chain((b) =>
    fc.tuple(fc.integer({ min: 0, max: b.length - 1 }), fc.integer({ min: 0, max: 255 })).map(([at, byte]) => {
      const copy = Buffer.from(b);
      copy[at] = byte;
      return copy;
    }),
  ),
  fc.string({ maxLength: 60 }).map((s) => Buffer.from(s)),
  fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
  fc
    .constantFrom(
      // Huge and odd numbers.
      '{"amount":1e400}',
      '{"amount":123456789012345678901234567890}',
      '{"amount":9007199254740993}',
      '{"amount":5e2}',
      '{"amount":500.0}',
      '{"amount":-0}',
      '{"amount":0x1F4}',
      '{"amount":NaN}',
      '{"amount":Infinity}',
      '{"amount":500,}',
      "{'amount':500}",
      '{"amount":500} {"amount":600}',
      // Duplicate keys: the last one wins, in the handler and in the fingerprint alike.
      '{"amount":500,"amount":"500"}',
      '{"amount":"500","amount":500}',
      '{"amount":500,"currency":"usd","currency":"xyz"}',
      // Not UTF-8, BOM, NUL.
      '\uFEFF{"amount":500}',
      '{"amount":500,"x":"\u0000"}',
      '',
      'null',
      '[]',
      'amount=500&currency=usd',
    )
    .map((s) => Buffer.from(s)),
  fc.constantFrom(
    Buffer.from([0x7b, 0xff, 0x7d]),
    Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d]),
    Buffer.from('{"amount":500,"d":"\xc3\x28"}', 'latin1'),
  ),
  // Deep nesting, inside a valid charge and on its own.
  fc
    .constantFrom(10, 255, 300, 5_000, 100_000)
    .chain((depth) =>
      fc.constantFrom(
        Buffer.from(`{"amount":700,"deep":${nest(depth, '[', ']', '1')}}`),
        Buffer.from(`{"amount":700,"deep":${nest(depth, '{"a":', '}', '1')}}`),
        Buffer.from(nest(depth, '[', ']', '')),
        Buffer.from(nest(depth, '{"amount":', '}', '1')),
      ),
    ),
);

// ---- the rest of the request -----------------------------------------------------------------------------

export const method = fc.oneof(
  { weight: 12, arbitrary: fc.constant('POST') },
  fc.constantFrom('GET', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'),
);
export const target = fc.oneof(
  { weight: 12, arbitrary: fc.constant('/v1/charges') },
  fc.constantFrom(
    '/v1/charges?x=1&y=%00',
    '/v1/charges/',
    '/v1/charges/ch_missing',
    '/v1/charges/%E0%A4%A',
    '/v1/charges/%',
    '/v1/charges/..%2Fbalance',
    '/v1/nothing',
    '/V1/charges',
    '/v1/lab/reset',
    '/v1/idempotency_records/x',
  ),
);
export const authorization = fc.oneof(
  { weight: 12, arbitrary: fc.constant<string | null>(AUTH) },
  fc.constantFrom<string | null>(
    null,
    '',
    'Bearer',
    'bearer sk_live_alice',
    'Bearer  sk_live_alice',
    'Bearer sk_live_bobby',
    'Basic c2tfdGVzdF9hbGljZTo=',
    `${AUTH} x`,
  ),
);
export const contentType = fc.constantFrom<string | null>(
  'application/json',
  'application/json',
  'application/json; charset=utf-8',
  'application/problem+json',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json;;;',
  null,
);
/** Headers that must change nothing — lab fault headers included, since lab mode is off. */
export const extraHeaders = fc.array(
  fc.tuple(
    fc.constantFrom(
      'x-request-id',
      'idem-lab-fault',
      'idem-lab-delay-ms',
      'idem-lab-fail',
      'accept',
      'x-forwarded-for',
      'cookie',
      'user-agent',
      'x-idempotency-key',
    ),
    fc.oneof(fc.constantFrom('drop-after-commit', '60000', '503', '*/*', 'session=secret'), printable),
  ),
  { maxLength: 3 },
);

export interface Case {
  readonly method: string;
  readonly target: string;
  readonly authorization: string | null;
  readonly keys: readonly KeyShape[];
  readonly contentType: string | null;
  readonly body: Buffer;
  readonly extra: ReadonlyArray<readonly [string, string]>;
}

export const fetchCase: fc.Arbitrary<Case> = fc.record({
  method,
  target,
  authorization,
  // fetch folds repeated names into one line; the raw property sends real duplicates.
  keys: fc.oneof({ weight: 3, arbitrary: fetchKeyShape.map((k) => [k]) }, fc.constant([])),
  contentType,
  body,
  extra: extraHeaders,
});
