/**
 * @module Canonical form bodies (`application/x-www-form-urlencoded`) for the fingerprint: the fields in one order,
 * so `b=2&a=1` and `a=1&b=2` are the same request. Fields are grouped by their root name — the decoded name up to
 * its first `[` or `.` — because `qs` (Express's `urlencoded({ extended: true })`) reads `a`, `a[]`, `a[0]`, `a[b]`
 * (and, with `allowDots`, `a.b`) as one field: the groups are sorted by root, and the fields of one group keep the
 * order they were sent in (`a=1&a[]=2` is `["1","2"]`, `a[]=2&a=1` is `["2","1"]`). Grouping more than a parser
 * merges only tells apart requests it would read alike (a mismatch, never a wrong replay).
 *
 * Only the order changes, never a field's bytes: names are compared decoded (`+` as a space, percent escapes,
 * UTF-8), so `%61=1&a=2` is one name sent twice and keeps its order, while `a=%41` and `a=A` stay different
 * requests. Empty fields (`a=1&&b=2`, a trailing `&`) are dropped, as a form parser drops them. A body is
 * fingerprinted as sent where parsers disagree on its names: a name with a malformed escape or escaped invalid
 * UTF-8 (`%zz`, `%FF`), or one starting with `[` or `.` (`qs` reads `[a]` as `a`).
 *
 * A body already in order is fingerprinted as sent — in this order, or in the one before fields were grouped
 * (sorted by whole name), so a fingerprint taken by an older version still matches its retry.
 */

/**
 * A body of more fields than this is fingerprinted as sent: the bound on the sort's cost for a hostile body. It is
 * the `parameterLimit` of `qs` and of Express's `urlencoded()`, which refuse larger forms by default.
 */
export const MAX_FORM_FIELDS = 1000;

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
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
 * (fields in order and none empty: the usual case, no copy), not valid UTF-8, a name parsers read differently
 * (see the module comment), or more than {@link MAX_FORM_FIELDS} fields (empty ones counted).
 *
 * Cost: one UTF-8 decode, a name per field (a slice unless it is escaped) and, for a body out of order, one stable
 * sort of at most 1,000 fields and one encode.
 *
 * @example
 * new TextDecoder().decode(canonicalForm(new TextEncoder().encode('b=2&a[]=1&a=0'))) // → 'a[]=1&a=0&b=2'
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
  const roots: string[] = [];
  let byRoot = true; // roots never decrease: the order of this module
  let byName = true; // whole names never decrease: the order before fields were grouped
  let previous = '';
  for (let start = 0, count = 1; start <= text.length; count++) {
    if (count > MAX_FORM_FIELDS) return undefined;
    let end = text.indexOf('&', start);
    if (end === -1) end = text.length;
    if (end === start) {
      byRoot = byName = false; // an empty field: dropped
    } else {
      const field = text.slice(start, end);
      const name = nameOf(field);
      if (name === undefined) return undefined;
      const root = rootOf(name);
      if (root === undefined) return undefined;
      if (fields.length > 0) {
        if (root < (roots[roots.length - 1] as string)) byRoot = false;
        if (name < previous) byName = false;
      }
      fields.push(field);
      roots.push(root);
      previous = name;
    }
    start = end + 1;
  }
  if (byRoot || byName) return undefined;
  const order = Array.from(fields, (_, i) => i);
  // Array.prototype.sort is stable: the fields of one root keep the order they came in.
  order.sort((a, b) => {
    const x = roots[a] as string;
    const y = roots[b] as string;
    return x < y ? -1 : x > y ? 1 : 0;
  });
  return ENCODER.encode(order.map((i) => fields[i]).join('&'));
}

/**
 * The root of a decoded name: up to its first `[` or `.`. Undefined for a name that starts with one (`qs` reads
 * `[a]` and, with `allowDots`, `.a` as `a`). The empty name is its own root.
 */
function rootOf(name: string): string | undefined {
  for (let i = 0; i < name.length; i++) {
    const code = name.charCodeAt(i);
    if (code === 0x5b || code === 0x2e) return i === 0 ? undefined : name.slice(0, i);
  }
  return name;
}

/**
 * A field's name as a form parser decodes it (`+` as a space, then percent escapes as UTF-8), or undefined when
 * parsers disagree on it: a malformed escape, or escapes that are not UTF-8 (`qs` keeps such a name as sent,
 * URLSearchParams decodes it leniently).
 */
function nameOf(field: string): string | undefined {
  const equals = field.indexOf('=');
  const raw = equals === -1 ? field : field.slice(0, equals);
  const spaced = raw.includes('+') ? raw.replaceAll('+', ' ') : raw;
  return spaced.includes('%') ? percentDecoded(spaced) : spaced;
}

/** `%XX` escapes decoded to bytes, then UTF-8; undefined for a malformed escape or bytes that are not UTF-8. */
function percentDecoded(text: string): string | undefined {
  const bytes = ENCODER.encode(text);
  let length = 0;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] as number;
    if (byte !== 0x25) {
      bytes[length++] = byte;
      continue;
    }
    const high = hexValue(bytes[i + 1]);
    const low = high === -1 ? -1 : hexValue(bytes[i + 2]);
    if (low === -1) return undefined;
    bytes[length++] = high * 16 + low;
    i += 2;
  }
  try {
    return UTF8.decode(bytes.subarray(0, length));
  } catch {
    return undefined;
  }
}

function hexValue(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}
