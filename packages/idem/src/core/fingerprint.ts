/**
 * @module The request fingerprint: SHA-256 over method, route, canonical query, canonical body and chosen headers.
 */
import { constantTimeEqual, sha256 } from './sha256.js';

type OneShot = (algorithm: 'sha256', data: string, encoding: 'hex') => string;

/**
 * Node's one-shot `crypto.hash` (Node ≥ 20.12), found as src/core/sha256.ts finds `createHash`: no Hash object and no
 * digest lookup by name per request, about twice as fast for the short text of a JSON request's fingerprint.
 * The same SHA-256, the same hex. Elsewhere the running hash of src/core/sha256.ts.
 */
const oneShot: OneShot | undefined = (() => {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule;
  if (typeof get !== 'function') return undefined;
  try {
    const crypto = get('node:crypto') as { hash?: OneShot } | undefined;
    return typeof crypto?.hash === 'function' ? crypto.hash : undefined;
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
 * Any other body (or JSON that does not parse) is hashed as raw bytes.
 *
 * @example
 * fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body })
 */
export function fingerprint(input: FingerprintInput): string {
  // Every field is `<byte length>:<bytes>`. The text fields are joined into one string and hashed in one call;
  // the bytes hashed are the same as field-by-field updates would give.
  let text =
    field('idem-fingerprint-v1') +
    field(input.method.toUpperCase()) +
    field(input.path) +
    field(canonicalQuery(input.query ?? ''));
  const canonical = isJsonType(input.contentType) ? canonicalJson(input.body) : undefined;
  let hash: ReturnType<typeof sha256> | undefined;
  if (canonical === undefined) {
    hash = sha256();
    hash.update(text + field('raw') + `${input.body.byteLength}:`);
    hash.update(input.body);
    text = '';
  } else {
    text += field('json') + field(canonical);
  }
  if (input.headers === undefined || input.headers.length === 0) {
    text += NO_HEADERS_FIELD;
  } else {
    const headers = input.headers.map(([n, v]) => [n.toLowerCase(), v] as const).sort(compareTuple);
    text += field(String(headers.length));
    for (const [name, value] of headers) text += field(name) + field(value);
  }
  // All text (a JSON body's usual case): one call. Bytes too (a raw body): the running hash.
  if (hash === undefined && oneShot !== undefined) return oneShot('sha256', text, 'hex');
  hash ??= sha256();
  hash.update(text);
  return hash.digest();
}

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

/** Compares two fingerprints in constant time (for equal lengths), so timing reveals nothing of the stored one. */
export function fingerprintsEqual(a: string, b: string): boolean {
  return constantTimeEqual(a, b);
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

/** Strict UTF-8 (a bad byte throws). Without `stream`, `decode` keeps no state between calls, so one serves all. */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const MAX_NUMBER_LENGTH = 4096;

/** Deeper JSON than this is hashed as raw bytes rather than risk the stack. */
const MAX_JSON_DEPTH = 256;

/**
 * Canonical JSON text of `body`, or `undefined` if it is not valid UTF-8 JSON (or nests deeper than 256).
 * Duplicate object keys keep the last value, as `JSON.parse` does, so the fingerprint and the handler agree.
 * Numbers are rewritten exactly as `<digits>e<exponent>` (no precision is lost: 2^53+1 ≠ 2^53).
 *
 * @example
 * canonicalJson(new TextEncoder().encode('{ "b": 1.50, "a": [true] }')) // → '{"a":[true],"b":15e-1}'
 */
export function canonicalJson(body: Uint8Array): string | undefined {
  let text: string;
  try {
    text = UTF8.decode(body);
  } catch {
    return undefined;
  }
  const parser = new CanonicalParser(text);
  try {
    const out = parser.value(0);
    parser.skipWhitespace();
    return parser.atEnd() ? out : undefined;
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
}

class CanonicalParser {
  #pos = 0;
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }

  atEnd(): boolean {
    return this.#pos === this.#text.length;
  }

  skipWhitespace(): void {
    for (;;) {
      const ch = this.#text[this.#pos];
      if (ch !== ' ' && ch !== '\t' && ch !== '\n' && ch !== '\r') return;
      this.#pos++;
    }
  }

  value(depth: number): string {
    if (depth > MAX_JSON_DEPTH) throw new SyntaxError('too deep');
    this.skipWhitespace();
    const ch = this.#text[this.#pos];
    if (ch === '{') return this.#object(depth);
    if (ch === '[') return this.#array(depth);
    if (ch === '"') return this.#canonicalString();
    if (ch === '-' || (ch !== undefined && ch >= '0' && ch <= '9')) return this.#number();
    if (ch === 't') return this.#literal('true');
    if (ch === 'f') return this.#literal('false');
    if (ch === 'n') return this.#literal('null');
    throw new SyntaxError('unexpected token');
  }

  #literal(literal: string): string {
    if (!this.#text.startsWith(literal, this.#pos)) throw new SyntaxError('unexpected token');
    this.#pos += literal.length;
    return literal;
  }

  #expect(ch: string): void {
    this.skipWhitespace();
    if (this.#text[this.#pos] !== ch) throw new SyntaxError(`expected ${ch}`);
    this.#pos++;
  }

  #peek(ch: string): boolean {
    this.skipWhitespace();
    if (this.#text[this.#pos] !== ch) return false;
    this.#pos++;
    return true;
  }

  #object(depth: number): string {
    this.#pos++;
    if (this.#peek('}')) return '{}';
    // Members as they come: each key, and its member text (`"key":value`). Keys usually come in order (many
    // encoders sort them, or write them in a fixed order that happens to be sorted): then the members are
    // already canonical, and no map or sort is needed.
    const keys: string[] = [];
    const members: string[] = [];
    let ordered = true;
    do {
      this.skipWhitespace();
      if (this.#text[this.#pos] !== '"') throw new SyntaxError('expected a key');
      // A key without escapes is its own source text between the quotes (what JSON.parse would give), and its
      // source text with the quotes is what JSON.stringify writes for it.
      const start = this.#pos;
      let key: string;
      let name: string;
      if (this.#scanString()) {
        name = this.#text.slice(start, this.#pos);
        key = name.slice(1, -1);
      } else {
        key = JSON.parse(this.#text.slice(start, this.#pos)) as string;
        name = JSON.stringify(key);
      }
      this.#expect(':');
      if (ordered && keys.length > 0 && !(key > (keys[keys.length - 1] as string))) ordered = false;
      keys.push(key);
      members.push(`${name}:${this.value(depth + 1)}`);
    } while (this.#peek(','));
    this.#expect('}');
    // Built with `+=`, not `join`: V8 keeps concatenations as ropes and flattens once, at the hash; a join copies
    // the whole subtree at every level, which made a deeply nested 1 MiB body cost depth × size (548× JSON.parse).
    let out = '{';
    if (ordered) {
      for (let i = 0; i < members.length; i++) out += i === 0 ? members[i] : `,${members[i] as string}`;
      return `${out}}`;
    }
    // Out of order, or a duplicate key: sorted, the last duplicate winning (as in JSON.parse).
    const last = new Map<string, number>();
    for (let i = 0; i < keys.length; i++) last.set(keys[i] as string, i);
    const sorted = [...last.keys()].sort();
    for (let i = 0; i < sorted.length; i++) {
      const member = members[last.get(sorted[i] as string) as number] as string;
      out += i === 0 ? member : `,${member}`;
    }
    return `${out}}`;
  }

  #array(depth: number): string {
    this.#pos++;
    if (this.#peek(']')) return '[]';
    let out = `[${this.value(depth + 1)}`;
    while (this.#peek(',')) out += `,${this.value(depth + 1)}`;
    this.#expect(']');
    return `${out}]`;
  }

  /**
   * The string as `JSON.stringify` writes its value. Without escapes or surrogates (the usual case) that is the
   * source text itself; otherwise it is parsed and written again.
   */
  #canonicalString(): string {
    const start = this.#pos;
    const plain = this.#scanString();
    const source = this.#text.slice(start, this.#pos);
    return plain ? source : JSON.stringify(JSON.parse(source) as string);
  }

  /** Moves past a string; true when it holds no escape and no UTF-16 surrogate. */
  #scanString(): boolean {
    let plain = true;
    this.#pos++;
    for (;;) {
      const code = this.#text.charCodeAt(this.#pos);
      if (Number.isNaN(code)) throw new SyntaxError('unterminated string');
      if (code === 0x5c) {
        plain = false;
        this.#pos += 2;
      } else if (code === 0x22) {
        break;
      } else if (code < 0x20) {
        throw new SyntaxError('control character in string');
      } else {
        if (code >= 0xd800 && code <= 0xdfff) plain = false;
        this.#pos++;
      }
    }
    this.#pos++;
    return plain;
  }

  /**
   * A JSON number as `<digits>e<exponent>`: `digits` without leading or trailing zeros, the exponent moved to
   * match. One pass over the characters, no regular expression: a number's cost is its length, whatever its digits.
   */
  #number(): string {
    const text = this.#text;
    const start = this.#pos;
    let at = start;
    const negative = text.charCodeAt(at) === 0x2d; // -
    if (negative) at++;
    // The integer part: `0`, or a non-zero digit and any digits (a second leading zero ends the number there).
    const intStart = at;
    const lead = text.charCodeAt(at);
    if (lead === 0x30) at++;
    else if (lead >= 0x31 && lead <= 0x39) at = skipDigits(text, at + 1);
    else throw new SyntaxError('bad number');
    const intEnd = at;
    // A fraction or an exponent counts only when complete (`1.` and `1e+` end the number before the `.`/`e`).
    let fracEnd = at;
    if (text.charCodeAt(at) === 0x2e && isDigit(text.charCodeAt(at + 1))) at = fracEnd = skipDigits(text, at + 2);
    let exp: string | undefined;
    const e = text.charCodeAt(at);
    if (e === 0x65 || e === 0x45) {
      const sign = text.charCodeAt(at + 1);
      const first = sign === 0x2b || sign === 0x2d ? at + 2 : at + 1;
      if (isDigit(text.charCodeAt(first))) {
        const end = skipDigits(text, first + 1);
        exp = text.slice(at + 1, end);
        at = end;
      }
    }
    // Longer numbers were never canonicalised (the body is hashed raw); kept so stored fingerprints still match.
    if (at - start > MAX_NUMBER_LENGTH) throw new SyntaxError('number too long');
    this.#pos = at;
    // The usual case, an integer that ends in 1–9, is already canonical but for its exponent.
    if (exp === undefined && fracEnd === intEnd && text.charCodeAt(at - 1) !== 0x30)
      return `${text.slice(start, at)}e0`;

    const fracLength = fracEnd === intEnd ? 0 : fracEnd - intEnd - 1;
    const digits =
      fracLength === 0 ? text.slice(intStart, intEnd) : text.slice(intStart, intEnd) + text.slice(intEnd + 1, fracEnd);
    let first = 0;
    while (digits.charCodeAt(first) === 0x30) first++;
    if (first === digits.length) return '0';
    let last = digits.length;
    while (digits.charCodeAt(last - 1) === 0x30) last--;
    const shift = digits.length - last - fracLength;
    return `${negative ? '-' : ''}${digits.slice(first, last)}e${addToExponent(exp ?? '0', shift)}`;
  }
}

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

/** The index of the first non-digit at or after `at`. */
function skipDigits(text: string, at: number): number {
  while (isDigit(text.charCodeAt(at))) at++;
  return at;
}

/**
 * `exp + shift` in decimal, exactly: `exp` is a JSON exponent (`[+-]?\d+`, any length), `shift` a small integer
 * (|shift| ≤ 4096). Linear in `exp`'s length: a short exponent is a double's exact integer; a long one changes
 * only in its last 15 digits and a carry or borrow.
 */
function addToExponent(exp: string, shift: number): string {
  const negative = exp.charCodeAt(0) === 0x2d;
  let from = negative || exp.charCodeAt(0) === 0x2b ? 1 : 0;
  while (from < exp.length - 1 && exp.charCodeAt(from) === 0x30) from++;
  const magnitude = exp.slice(from);
  if (magnitude.length <= 15) return String((negative ? -Number(magnitude) : Number(magnitude)) + shift);
  // |exp| ≥ 10^15 ≫ |shift|: the sign stays, and the magnitude moves by -shift (negative) or +shift.
  const TAIL = 1e15;
  let head = magnitude.slice(0, -15);
  let tail = Number(magnitude.slice(-15)) + (negative ? -shift : shift);
  if (tail >= TAIL) {
    tail -= TAIL;
    head = stepDecimal(head, 1);
  } else if (tail < 0) {
    tail += TAIL;
    head = stepDecimal(head, -1);
  }
  return `${negative ? '-' : ''}${head === '0' ? String(tail) : head + String(tail).padStart(15, '0')}`;
}

/** `digits` (a positive decimal without leading zeros) plus or minus one, without leading zeros. */
function stepDecimal(digits: string, step: 1 | -1): string {
  const [from, to] = step === 1 ? ['9', '0'] : ['0', '9'];
  let at = digits.length - 1;
  while (at >= 0 && digits[at] === from) at--;
  const changed = at < 0 ? '1' : String.fromCharCode(digits.charCodeAt(at) + step);
  const result = (at < 0 ? '' : digits.slice(0, at)) + changed + to.repeat(digits.length - 1 - at);
  return result.length > 1 && result.charCodeAt(0) === 0x30 ? result.slice(1) : result;
}
