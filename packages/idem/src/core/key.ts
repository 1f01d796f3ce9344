/**
 * @module Parsing and validating `Idempotency-Key` values, and building a record's `pk`.
 */
import { IdempotencyError } from './errors.js';

/** The longest key accepted, in characters. */
export const MAX_KEY_LENGTH = 255;

/**
 * Parses a raw `Idempotency-Key` header value. Accepts a bare token or an RFC 8941 sf-string (`"..."`, with
 * `\"` and `\\` escapes), which is unquoted; a bare key may not contain `"`. The key must be 1–255 visible ASCII characters (0x21–0x7E).
 * Throws `KEY_INVALID` otherwise; a header folded from duplicates (`a, b`) is invalid because of its space.
 *
 * @example
 * parseKey('"8e03978e-40d5-43e8-bc93-6894a57f9324"') // → '8e03978e-40d5-43e8-bc93-6894a57f9324'
 */
export function parseKey(raw: string): string {
  let key = raw;
  const quoted = raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"');
  if (!quoted && raw.includes('"')) throw invalid('a quote outside the sf-string form ("...")');
  if (quoted) {
    key = '';
    for (let i = 1; i < raw.length - 1; i++) {
      let ch = raw[i] as string;
      if (ch === '\\') {
        const next = raw[++i];
        if ((next !== '"' && next !== '\\') || i >= raw.length - 1) throw invalid('a bad escape in its quoted form');
        ch = next;
      } else if (ch === '"') {
        throw invalid('an unescaped quote inside its quoted form');
      }
      key += ch;
    }
  }
  if (key.length === 0) throw invalid('is empty');
  if (key.length > MAX_KEY_LENGTH) throw invalid(`is ${key.length} characters long (at most ${MAX_KEY_LENGTH})`);
  for (let i = 0; i < key.length; i++) {
    const code = key.charCodeAt(i);
    if (code < 0x21 || code > 0x7e) throw invalid('contains a character outside visible ASCII (0x21–0x7E)');
  }
  return key;
}

function invalid(why: string): IdempotencyError {
  const text = why.startsWith('is ') || why.startsWith('contains') ? why : `has ${why}`;
  return new IdempotencyError('KEY_INVALID', `The Idempotency-Key ${text}.`);
}

/**
 * The record's partition key, `IDEMPOTENCY#<scope>#<key>`. `%` and `#` in the scope are percent-encoded so two
 * different (scope, key) pairs can never produce the same pk.
 *
 * @example
 * recordPk('acct_alice', 'k1') // → 'IDEMPOTENCY#acct_alice#k1'
 */
export function recordPk(scope: string, key: string): string {
  return `IDEMPOTENCY#${scope.replaceAll('%', '%25').replaceAll('#', '%23')}#${key}`;
}
