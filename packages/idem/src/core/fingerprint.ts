/**
 * @module The request fingerprint: SHA-256 over method, route, canonical query, canonical body and chosen headers.
 */
import { canonicalForm, isFormType } from './canonical-form.js';
import { canonicalBytes } from './canonical-json.js';
import { IdempotencyError } from './errors.js';

interface NodeCrypto {
  /** The one-shot hash (Node ≥ 20.12): no Hash object, no digest looked up by name per call. */
  readonly hash?: (algorithm: 'sha256', data: string, encoding: 'hex') => string;
  readonly createHash: (algorithm: 'sha256') => {
    update(data: string | Uint8Array, encoding?: 'utf8'): unknown;
    digest(encoding: 'hex'): string;
  };
}

/**
 * `node:crypto` where the runtime has it as a builtin (Node, Bun, Deno, workerd with `nodejs_compat`), found through
 * `process.getBuiltinModule` rather than imported, so this module loads on Web runtimes too. There it is undefined
 * and the fingerprint is WebCrypto's SHA-256 (`crypto.subtle.digest`), which only answers with a promise.
 */
const native: NodeCrypto | undefined = (() => {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule;
  if (typeof get !== 'function') return undefined;
  try {
    const crypto = get('node:crypto') as Partial<NodeCrypto> | undefined;
    return typeof crypto?.createHash === 'function' ? (crypto as NodeCrypto) : undefined;
  } catch {
    return undefined;
  }
})();

/** What a fingerprint is computed from. */
export interface FingerprintInput {
  readonly method: string;
  /** The route path, e.g. `/v1/charges`. The same key on another path is a mismatch. */
  readonly path: string;
  /** The raw query string, with or without the leading `?`. Pairs are sorted, so order does not matter. */
  readonly query?: string;
  /** The request's `Content-Type`. A JSON type (`application/json`, `*+json`) makes the body canonical JSON. */
  readonly contentType?: string | null;
  readonly body: Uint8Array;
  /** Headers that take part (names lower-cased by the caller's choice of list), e.g. `[['x-api-version','2']]`. */
  readonly headers?: ReadonlyArray<readonly [string, string]>;
}

/**
 * The hex SHA-256 fingerprint of a request. JSON bodies are canonicalised — keys sorted, insignificant
 * whitespace dropped, numbers in one exact form — so `{"a":1,"b":2}` and `{"b":2, "a":1.0}` match.
 * Form bodies (`application/x-www-form-urlencoded`) have their fields sorted by name, stable for a repeated name
 * (src/core/canonical-form.ts). Any other body (or JSON that does not parse) is hashed as raw bytes.
 *
 * Synchronous where the runtime has `node:crypto` (Node, Bun, Deno); on a Web runtime without it (Cloudflare
 * Workers without `nodejs_compat`) it throws `CONFIG_INVALID`: use {@link fingerprintAsync} there.
 *
 * @example
 * fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body })
 */
export function fingerprint(input: FingerprintInput): string {
  if (native === undefined)
    throw new IdempotencyError(
      'CONFIG_INVALID',
      'fingerprint() needs node:crypto, which this runtime lacks: use `await fingerprintAsync(input)`.',
    );
  return fingerprintSoon(input) as string;
}

/**
 * {@link fingerprint} on every runtime: `node:crypto` where there is one, WebCrypto elsewhere.
 *
 * @example
 * const print = await fingerprintAsync({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body })
 */
export async function fingerprintAsync(input: FingerprintInput): Promise<string> {
  return fingerprintSoon(input);
}

/**
 * The fingerprint as a string at once where `node:crypto` is, as a promise of it where only WebCrypto is: the
 * HTTP layer awaits only a promise (an await of a plain value costs every request a turn of the microtask queue).
 *
 * @example
 * const soon = fingerprintSoon(input)
 * const print = typeof soon === 'string' ? soon : await soon
 */
export function fingerprintSoon(input: FingerprintInput): string | Promise<string> {
  // Every field is `<byte length>:<bytes>`: the text fields, then the body (canonical JSON or raw bytes), then the
  // headers. The same bytes are hashed whichever way they are fed to the hash.
  const head =
    field('idem-fingerprint-v1') +
    field(input.method.toUpperCase()) +
    field(input.path) +
    field(canonicalQuery(input.query ?? ''));
  const canonical = isJsonType(input.contentType) ? canonicalBytes(input.body) : undefined;
  const body = canonical ?? (isFormType(input.contentType) ? canonicalForm(input.body) : undefined) ?? input.body;
  const kind = canonical === undefined ? RAW_FIELD : JSON_FIELD;
  let tail: string;
  if (input.headers === undefined || input.headers.length === 0) {
    tail = NO_HEADERS_FIELD;
  } else {
    const headers = input.headers.map(([n, v]) => [n.toLowerCase(), v] as const).sort(compareTuple);
    tail = field(String(headers.length));
    for (const [name, value] of headers) tail += field(name) + field(value);
  }
  if (native === undefined) return webSha256(`${head}${kind}${body.byteLength}:`, body, tail);
  // A short canonical body (the usual request): all of it as one string, hashed in one call.
  if (canonical !== undefined && canonical.byteLength <= ONE_CALL_BYTES && native.hash !== undefined)
    return native.hash('sha256', `${head}${kind}${canonical.byteLength}:${UTF8.decode(canonical)}${tail}`, 'hex');
  const hash = native.createHash('sha256');
  hash.update(`${head}${kind}${body.byteLength}:`, 'utf8');
  hash.update(body);
  hash.update(tail, 'utf8');
  return hash.digest('hex');
}

/** SHA-256 of `front`, `body`, `tail` (text as UTF-8) by WebCrypto, in hex. */
async function webSha256(front: string, body: Uint8Array, tail: string): Promise<string> {
  const subtle = (globalThis as { crypto?: { subtle?: SubtleCrypto } }).crypto?.subtle;
  if (subtle === undefined)
    throw new IdempotencyError(
      'CONFIG_INVALID',
      'The fingerprint needs node:crypto or WebCrypto; this runtime has neither.',
    );
  const start = ENCODER.encode(front);
  const end = ENCODER.encode(tail);
  const bytes = new Uint8Array(start.byteLength + body.byteLength + end.byteLength);
  bytes.set(start);
  bytes.set(body, start.byteLength);
  bytes.set(end, start.byteLength + body.byteLength);
  const digest = new Uint8Array(await subtle.digest('SHA-256', bytes));
  let hex = '';
  for (const byte of digest) hex += HEX[byte];
  return hex;
}

const ENCODER = new TextEncoder();
const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/** The body kind fields: `4:json`, `3:raw`. */
const JSON_FIELD = '4:json';
const RAW_FIELD = '3:raw';

/** Up to this many bytes, canonical JSON is decoded and hashed with the rest as one string (one call, no Hash). */
const ONE_CALL_BYTES = 4096;

/** The header count field when no header takes part: `1:0`. */
const NO_HEADERS_FIELD = '1:0';

function field(value: string): string {
  return `${utf8Length(value)}:${value}`;
}

/**
 * The UTF-8 byte length of a string, without encoding it.
 *
 * @example
 * utf8Length('café') // → 5
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) continue;
    if (code < 0x800) {
      bytes += 1;
    } else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 2; // a surrogate pair: 2 UTF-16 units, 4 bytes
        i++;
      } else {
        bytes += 2; // a lone surrogate is encoded as U+FFFD, 3 bytes
      }
    } else {
      bytes += 2;
    }
  }
  return bytes;
}

/**
 * Compares two fingerprints in time that depends only on their lengths (equal lengths: every code unit is read),
 * so timing reveals nothing of the stored one.
 */
export function fingerprintsEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * True for a JSON media type (`application/json`, `*+json`): the bodies the fingerprint canonicalises.
 *
 * @example
 * isJsonType('application/merge-patch+json; charset=utf-8') // → true
 */
export function isJsonType(contentType: string | null | undefined): boolean {
  if (!contentType) return false;
  if (contentType === 'application/json') return true;
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

function compareTuple(a: readonly [string, string], b: readonly [string, string]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;
}

function canonicalQuery(query: string): string {
  if (query === '' || query === '?') return '';
  const pairs = [...new URLSearchParams(query.startsWith('?') ? query.slice(1) : query)];
  return new URLSearchParams(pairs.sort(compareTuple)).toString();
}

const UTF8 = new TextDecoder('utf-8', { ignoreBOM: true });

/**
 * Canonical JSON text of `body`, or `undefined` if it is not valid UTF-8 JSON (or nests deeper than 256).
 * Duplicate object keys keep the last value, as `JSON.parse` does, so the fingerprint and the handler agree.
 * Numbers are rewritten exactly as `<digits>e<exponent>` (no precision is lost: 2^53+1 ≠ 2^53).
 *
 * @example
 * canonicalJson(new TextEncoder().encode('{ "b": 1.50, "a": [true] }')) // → '{"a":[true],"b":15e-1}'
 */
export function canonicalJson(body: Uint8Array): string | undefined {
  const canonical = canonicalBytes(body);
  return canonical && UTF8.decode(canonical);
}
