/**
 * @module Choosing which JSON body fields take part in the fingerprint (`fingerprintFields`), without parsing
 * numbers: members are kept or dropped as raw text, so `12345678901234567891` stays itself and the canonical
 * fingerprint still sees every digit. One pass over the text, linear in its length.
 */

/** Dotted paths into a JSON object body: `['amount', 'currency']`, or `['metadata.trace_id']`. */
export type FieldRule = { readonly include: readonly string[] } | { readonly exclude: readonly string[] };

/**
 * The JSON text of `text` with only the chosen members of its objects (by dotted path), or `undefined` when
 * `text` is not JSON this scanner can split (the caller then fingerprints the body as it is). A body that is
 * not an object is returned unchanged.
 *
 * @example
 * selectFields('{"amount":500,"trace":"t-1"}', { exclude: ['trace'] }) // → '{"amount":500}'
 */
export function selectFields(text: string, rule: FieldRule): string | undefined {
  const include = 'include' in rule;
  const paths = new Set(include ? rule.include : rule.exclude);
  const prefixes = new Set<string>();
  for (const path of paths) {
    const parts = path.split('.');
    for (let i = 1; i < parts.length; i++) prefixes.add(parts.slice(0, i).join('.'));
  }
  const scanner = new Scanner(text);
  try {
    scanner.skipWhitespace();
    if (scanner.peek() !== '{') return text;
    const out = scanner.object(
      '',
      (path) => (paths.has(path) ? 'match' : prefixes.has(path) ? 'descend' : 'other'),
      include,
    );
    scanner.skipWhitespace();
    return scanner.atEnd() ? out : undefined;
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
}

type Verdict = 'match' | 'descend' | 'other';

class Scanner {
  #pos = 0;
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }

  atEnd(): boolean {
    return this.#pos === this.#text.length;
  }

  peek(): string | undefined {
    return this.#text[this.#pos];
  }

  skipWhitespace(): void {
    for (;;) {
      const ch = this.#text[this.#pos];
      if (ch !== ' ' && ch !== '\t' && ch !== '\n' && ch !== '\r') return;
      this.#pos++;
    }
  }

  /** An object at the cursor, with its members filtered by path; keeps raw member text. */
  object(prefix: string, verdict: (path: string) => Verdict, include: boolean): string {
    this.#expect('{');
    const kept: string[] = [];
    this.skipWhitespace();
    if (this.peek() === '}') {
      this.#pos++;
      return '{}';
    }
    for (;;) {
      this.skipWhitespace();
      const keyStart = this.#pos;
      this.#skipString();
      const rawKey = this.#text.slice(keyStart, this.#pos);
      const name = JSON.parse(rawKey) as string;
      this.skipWhitespace();
      this.#expect(':');
      this.skipWhitespace();
      const path = prefix === '' ? name : `${prefix}.${name}`;
      const seen = verdict(path);
      if (seen === 'descend' && this.peek() === '{') {
        const inner = this.object(path, verdict, include);
        // Excluding `a.b` keeps `a` without `b`; including `a.b` keeps `a` with only `b`.
        if (!include || inner !== '{}') kept.push(`${rawKey}:${inner}`);
      } else {
        const start = this.#pos;
        this.#skipValue();
        // A member on the way to an included path that is not an object is kept as it is: a duplicate of `meta`
        // that is a string must still override an earlier object `meta`, as it does for the handler (last wins).
        const keep = include ? seen !== 'other' : seen !== 'match';
        if (keep) kept.push(`${rawKey}:${this.#text.slice(start, this.#pos)}`);
      }
      this.skipWhitespace();
      const next = this.#text[this.#pos++];
      if (next === '}') return `{${kept.join(',')}}`;
      if (next !== ',') throw new SyntaxError('expected , or }');
    }
  }

  #expect(ch: string): void {
    if (this.#text[this.#pos] !== ch) throw new SyntaxError(`expected ${ch}`);
    this.#pos++;
  }

  #skipString(): void {
    this.#expect('"');
    for (;;) {
      const ch = this.#text[this.#pos++];
      if (ch === undefined) throw new SyntaxError('unterminated string');
      if (ch === '"') return;
      if (ch === '\\') this.#pos++;
    }
  }

  /** Skips one value of any kind: nested containers by depth counting, strings by their escapes. */
  #skipValue(): void {
    let depth = 0;
    for (;;) {
      const ch = this.#text[this.#pos];
      if (ch === undefined) throw new SyntaxError('unexpected end');
      if (ch === '"') this.#skipString();
      else if (ch === '{' || ch === '[') {
        depth++;
        this.#pos++;
      } else if (ch === '}' || ch === ']') {
        if (depth === 0) return;
        depth--;
        this.#pos++;
      } else if (ch === ',' && depth === 0) return;
      else this.#pos++;
      if (depth === 0 && (ch === '"' || ch === '}' || ch === ']')) return;
    }
  }
}
