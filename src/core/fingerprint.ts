/**
 * @module The request fingerprint: SHA-256 over method, route, canonical query, canonical body and chosen headers.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

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
  const hash = createHash('sha256');
  const field = (value: string | Uint8Array): void => {
    const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    hash.update(`${bytes.byteLength}:`);
    hash.update(bytes);
  };
  field('idem-fingerprint-v1');
  field(input.method.toUpperCase());
  field(input.path);
  field(canonicalQuery(input.query ?? ''));
  const canonical = isJsonType(input.contentType) ? canonicalJson(input.body) : undefined;
  if (canonical === undefined) {
    field('raw');
    field(input.body);
  } else {
    field('json');
    field(canonical);
  }
  const headers = [...(input.headers ?? [])].map(([n, v]) => [n.toLowerCase(), v] as const).sort(compareTuple);
  field(String(headers.length));
  for (const [name, value] of headers) {
    field(name);
    field(value);
  }
  return hash.digest('hex');
}

/** Compares two fingerprints in constant time (for equal lengths), so timing reveals nothing of the stored one. */
export function fingerprintsEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  return left.byteLength === right.byteLength && timingSafeEqual(left, right);
}

function isJsonType(contentType: string | null | undefined): boolean {
  if (!contentType) return false;
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

function compareTuple(a: readonly [string, string], b: readonly [string, string]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;
}

function canonicalQuery(query: string): string {
  const pairs = [...new URLSearchParams(query.startsWith('?') ? query.slice(1) : query)];
  return new URLSearchParams(pairs.sort(compareTuple)).toString();
}

/** Deeper JSON than this is hashed as raw bytes rather than risk the stack. */
const MAX_JSON_DEPTH = 256;

/**
 * Canonical JSON text of `body`, or `undefined` if it is not valid UTF-8 JSON (or nests deeper than 256).
 * Duplicate object keys keep the last value, as `JSON.parse` does, so the fingerprint and the handler agree.
 * Numbers are rewritten exactly as `<digits>e<exponent>` (no precision is lost: 2^53+1 ≠ 2^53).
 *
 * @example
 * canonicalJson(Buffer.from('{ "b": 1.50, "a": [true] }')) // → '{"a":[true],"b":15e-1}'
 */
export function canonicalJson(body: Uint8Array): string | undefined {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(body);
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
    if (ch === '"') return JSON.stringify(this.#string());
    if (ch === '-' || (ch !== undefined && ch >= '0' && ch <= '9')) return this.#number();
    for (const literal of ['true', 'false', 'null']) {
      if (this.#text.startsWith(literal, this.#pos)) {
        this.#pos += literal.length;
        return literal;
      }
    }
    throw new SyntaxError('unexpected token');
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
    const members = new Map<string, string>();
    if (!this.#peek('}')) {
      do {
        this.skipWhitespace();
        if (this.#text[this.#pos] !== '"') throw new SyntaxError('expected a key');
        const key = this.#string();
        this.#expect(':');
        members.delete(key); // last duplicate wins, as in JSON.parse
        members.set(key, this.value(depth + 1));
      } while (this.#peek(','));
      this.#expect('}');
    }
    const keys = [...members.keys()].sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${members.get(k) as string}`).join(',')}}`;
  }

  #array(depth: number): string {
    this.#pos++;
    const items: string[] = [];
    if (!this.#peek(']')) {
      do items.push(this.value(depth + 1));
      while (this.#peek(','));
      this.#expect(']');
    }
    return `[${items.join(',')}]`;
  }

  #string(): string {
    const start = this.#pos;
    this.#pos++;
    for (;;) {
      const ch = this.#text[this.#pos];
      if (ch === undefined) throw new SyntaxError('unterminated string');
      if (ch === '\\') this.#pos += 2;
      else if (ch === '"') break;
      else if (ch < ' ') throw new SyntaxError('control character in string');
      else this.#pos++;
    }
    this.#pos++;
    return JSON.parse(this.#text.slice(start, this.#pos)) as string;
  }

  #number(): string {
    const match = /^(-?)(0|[1-9]\d*)(?:\.(\d+))?(?:[eE]([+-]?\d+))?/.exec(this.#text.slice(this.#pos, this.#pos + 4096));
    if (!match) throw new SyntaxError('bad number');
    this.#pos += match[0].length;
    const [, sign, int = '', frac = '', exp = '0'] = match;
    let digits = (int + frac).replace(/^0+/, '');
    if (digits === '') return '0';
    let exponent = BigInt(exp) - BigInt(frac.length);
    const trimmed = digits.replace(/0+$/, '');
    exponent += BigInt(digits.length - trimmed.length);
    digits = trimmed;
    return `${sign}${digits}e${exponent}`;
  }
}
