/**
 * @module What makes a stored record unprintable: a row written past the store (a compromised writer, a bad
 * migration, a hand edit) may hold anything. `idem records` shows such a row as one escaped line and goes on.
 */
import type { IdempotencyRecord } from '../core/record.js';

/** The largest time a `Date` can print (±100,000,000 days from the epoch, ECMA-262 §21.4.1.22). */
const MAX_TIME_MS = 8.64e15;

/**
 * Why `record` cannot be printed as a record, or undefined when every field has the shape the contract gives it:
 * strings where strings go, times a date can show, a response with an integer status, `[name, value]` string
 * pairs and a byte body. The reason names the field and what it held, not the stored text.
 *
 * @example
 * unreadable({ ...record, claimedAt: 9e18 }) // → 'claimedAt is not a time (9000000000000000000)'
 */
export function unreadable(record: IdempotencyRecord): string | undefined {
  for (const name of ['pk', 'scope', 'key', 'status', 'fingerprint', 'id'] as const) {
    if (typeof record[name] !== 'string') return `${name} is not a string (${kind(record[name])})`;
  }
  for (const name of ['claimedAt', 'leaseExpiresAt', 'expiresAt'] as const) {
    const value: unknown = record[name];
    if (typeof value !== 'number' || !Number.isFinite(value) || Math.abs(value) > MAX_TIME_MS)
      return `${name} is not a time (${typeof value === 'number' ? String(value) : kind(value)})`;
  }
  if (record.resultId !== null && typeof record.resultId !== 'string')
    return `resultId is not a string (${kind(record.resultId)})`;
  const response: unknown = record.response;
  if (response === null) return undefined;
  if (typeof response !== 'object') return `response is not an object (${kind(response)})`;
  const { status, headers, body } = response as Record<string, unknown>;
  if (typeof status !== 'number' || !Number.isInteger(status))
    return `response status is not an integer (${typeof status === 'number' ? String(status) : kind(status)})`;
  if (!Array.isArray(headers)) return `response headers are not a list (${kind(headers)})`;
  const bad = headers.findIndex(
    (pair: unknown) =>
      !Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string',
  );
  if (bad !== -1) return `response header ${bad} is not a [name, value] pair of strings`;
  if (!(body instanceof Uint8Array)) return `response body is not bytes (${kind(body)})`;
  return undefined;
}

/** The type of a value, for a reason: never the value itself (it may be long, or carry anything). */
function kind(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'missing';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
