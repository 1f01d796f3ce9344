/**
 * @module Canonical form bodies (`application/x-www-form-urlencoded`) for the fingerprint: the fields in one order,
 * sorted by name, so `b=2&a=1` and `a=1&b=2` are the same request. The sort is stable: a repeated name keeps its
 * values in the order sent, since a handler may read them as a list (`a=1&a=2` and `a=2&a=1` stay different).
 *
 * Only the order changes, never a field's bytes: names are compared as a form parser decodes them (`+` as a space,
 * percent escapes, UTF-8), so `%61=1&a=2` is one name sent twice and keeps its order, while `a=%41` and `a=A` stay
 * different requests. Empty fields (`a=1&&b=2`, a trailing `&`) are dropped, as a form parser drops them.
 */

/**
 * A body of more fields than this is fingerprinted as sent: the bound on the sort's cost for a hostile body. It is
 * the `parameterLimit` of `qs` and of Express's `urlencoded()`, which refuse larger forms by default.
 */
export const MAX_FORM_FIELDS = 1000;

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/** WHATWG form decoding: invalid UTF-8 in a percent-decoded name becomes U+FFFD, as URLSearchParams does. */
const LENIENT = new TextDecoder('utf-8', { ignoreBOM: true });
const ENCODER = new TextEncoder();

/**
 * True for `application/x-www-form-urlencoded` (any case, any parameters): the bodies {@link canonicalForm} orders.
 *
 * @example
 * isFormType('application/x-www-form-urlencoded; charset=utf-8') // → true
 */
export function isFormType(contentType: string | null | undefined): boolean {
  if (!contentType) return false;
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  return type === 'application/x-www-form-urlencoded';
}

/**
 * The canonical bytes of a form body, or `undefined` when the body is fingerprinted as sent: already canonical
 * (fields in order and none empty: the usual case, no copy), not valid UTF-8, or more than
 * {@link MAX_FORM_FIELDS} fields (empty ones counted).
 *
 * Cost: one UTF-8 decode, a name per field (a slice unless it is escaped) and, for a body out of order, one stable
 * sort of at most 1,000 fields and one encode.
 *
 * @example
 * new TextDecoder().decode(canonicalForm(new TextEncoder().encode('b=2&a=1&a=0'))) // → 'a=1&a=0&b=2'
 */
export function canonicalForm(body: Uint8Array): Uint8Array | undefined {
  let text: string;
  try {
    text = UTF8.decode(body);
  } catch {
    return undefined;
  }
  if (text === '') return undefined;
  const fields: string[] = [];
  const names: string[] = [];
  let inOrder = true;
  for (let start = 0, count = 1; start <= text.length; count++) {
    if (count > MAX_FORM_FIELDS) return undefined;
    let end = text.indexOf('&', start);
    if (end === -1) end = text.length;
    if (end === start) {
      inOrder = false; // an empty field: dropped
    } else {
      const field = text.slice(start, end);
      const name = nameOf(field);
      if (inOrder && names.length > 0 && name < (names[names.length - 1] as string)) inOrder = false;
      fields.push(field);
      names.push(name);
    }
    start = end + 1;
  }
  if (inOrder) return undefined;
  const order = Array.from(fields, (_, i) => i);
  // Array.prototype.sort is stable: the fields of one name keep the order they came in.
  order.sort((a, b) => {
    const x = names[a] as string;
    const y = names[b] as string;
    return x < y ? -1 : x > y ? 1 : 0;
  });
  return ENCODER.encode(order.map((i) => fields[i]).join('&'));
}

/** A field's name as a form parser decodes it (WHATWG `application/x-www-form-urlencoded` parsing). */
function nameOf(field: string): string {
  const equals = field.indexOf('=');
  const raw = equals === -1 ? field : field.slice(0, equals);
  const spaced = raw.includes('+') ? raw.replaceAll('+', ' ') : raw;
  return spaced.includes('%') ? percentDecoded(spaced) : spaced;
}

/** `%XX` escapes decoded to bytes, then UTF-8 (a malformed escape stays as it is). */
function percentDecoded(text: string): string {
  const bytes = ENCODER.encode(text);
  let length = 0;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] as number;
    const high = byte === 0x25 ? hexValue(bytes[i + 1]) : -1;
    const low = high === -1 ? -1 : hexValue(bytes[i + 2]);
    if (low === -1) {
      bytes[length++] = byte;
    } else {
      bytes[length++] = high * 16 + low;
      i += 2;
    }
  }
  return LENIENT.decode(bytes.subarray(0, length));
}

function hexValue(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}
