/**
 * @module A JSON string with escapes, written as `JSON.stringify` writes its value: its escapes decoded, then only
 * `"`, `\\`, control characters and lone surrogates escaped again (short forms where JSON has them, else `\\u` and
 * lower-case hex), everything else as UTF-8. A string without escapes is already in that form.
 */
import { REFUSED } from './canonical-number.js';

/** Strict UTF-8 (a bad byte throws). Without `stream`, `decode` keeps no state between calls, so one serves all. */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** `bytes` as UTF-8 text; not UTF-8: refused (the body is hashed raw). */
function decodeStrict(bytes: Uint8Array): string {
  try {
    return UTF8.decode(bytes);
  } catch {
    throw REFUSED;
  }
}

/**
 * Node's `buffer.isUtf8` (found as src/core/fingerprint.ts finds `node:crypto`, so that this module loads on Web
 * runtimes): the same strict UTF-8 as `UTF8`, checked without making a string — for 1 MiB of CJK text 0.06 ms
 * rather than 4 ms.
 */
const isUtf8: ((bytes: Uint8Array) => boolean) | undefined = (() => {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule;
  if (typeof get !== 'function') return undefined;
  try {
    const buffer = get('node:buffer') as { isUtf8?: (bytes: Uint8Array) => boolean } | undefined;
    return typeof buffer?.isUtf8 === 'function' ? buffer.isUtf8 : undefined;
  } catch {
    return undefined;
  }
})();

/**
 * Refuses `bytes` (the body is hashed raw) unless they are UTF-8.
 *
 * @example
 * checkUtf8(Uint8Array.of(0xc3, 0xa9)) // é: no error
 */
export function checkUtf8(bytes: Uint8Array): void {
  if (isUtf8 === undefined) decodeStrict(bytes);
  else if (!isUtf8(bytes)) throw REFUSED;
}

/** The unit each one-character escape stands for, by the character after the backslash; -1: no such escape. */
const UNESCAPE = new Int32Array(0x80).fill(-1);
/** The character after the backslash when JSON.stringify escapes a unit in short form, by unit; 0: none. */
const SHORT_FORM = new Uint8Array(0x60);
for (const [unit, char] of [
  [0x22, '"'],
  [0x5c, '\\'],
  [0x08, 'b'],
  [0x0c, 'f'],
  [0x0a, 'n'],
  [0x0d, 'r'],
  [0x09, 't'],
] as const) {
  UNESCAPE[char.charCodeAt(0)] = unit;
  SHORT_FORM[unit] = char.charCodeAt(0);
}
UNESCAPE[0x2f] = 0x2f; // `\/` is read; JSON.stringify never writes it

/** Left by {@link writeEscaped}: where the output ends, and the first non-ASCII byte of the body so far. */
export const ESCAPED_END = new Int32Array(2);

/**
 * The rest of a string from its first escape, `b[i]` (`words`: `b` as words, with zeros after the body's end), read
 * and written in one pass to `out` at `at` as JSON.stringify writes the value, with the closing quote; never longer
 * than its source. Runs without escapes are scanned and copied a word at a time (a byte at a time, and read twice,
 * 90-byte keys with escapes held the demo's event loop 2.4 times as long as the same bytes as text). The opening
 * quote and the text before the first escape are the caller's (the scanner copied them as it read them). `ascii` is
 * the first non-ASCII byte of the body so far (past `i` if none). Returns where the string ends in the body (its
 * closing quote); leaves the output's end and the first non-ASCII byte in `ESCAPED_END`. A control character, a bad
 * escape or the body's end refuses it.
 *
 * @example
 * out[0] = 0x22; writeEscaped(utf8('"\\u0041\\n"'), words, 1, out, outWords, 1, 10) // → 9, out starts with `"A\\n"`
 */
export function writeEscaped(
  b: Uint8Array,
  words: DataView,
  i: number,
  out: Uint8Array,
  outWords: DataView,
  at: number,
  ascii: number,
): number {
  let high = -1; // a high surrogate from a `\u` escape, waiting for its low half
  let highBits = ascii > i ? -1 : 0; // until a non-ASCII byte is found, a run stops at one
  for (;;) {
    let c = b[i] as number;
    if (c !== 0x5c) {
      if (high !== -1) at = escapeUnit(out, at, high);
      high = -1;
      if (c === 0x22) break;
      if (c < 0x20) throw REFUSED; // the zeros past the body's end too: an unterminated string
      if (c >= 0x80 && highBits !== 0) {
        ascii = i;
        highBits = 0;
      }
      // A run up to the next byte to look at, a word at a time: each word copied, then tested at once for `"`, `\`,
      // a control character and (until the first is found) a non-ASCII byte; the lowest flag is the byte to look at
      // (scanner: canonical-json.ts). What a word writes past that byte is written over next.
      out[at++] = c;
      i++;
      for (;;) {
        const word = words.getInt32(i, true);
        outWords.setInt32(at, word, true);
        const flags = stops(word, highBits);
        if (flags !== 0) {
          const skip = (31 - Math.clz32(flags & -flags)) >> 3;
          i += skip;
          at += skip;
          break;
        }
        i += 4;
        at += 4;
      }
      continue;
    }
    c = b[i + 1] as number;
    let unit: number;
    if (c === 0x75) {
      unit = (hex(b[i + 2]) << 12) | (hex(b[i + 3]) << 8) | (hex(b[i + 4]) << 4) | hex(b[i + 5]);
      if (unit < 0) throw REFUSED;
      i += 6;
    } else {
      unit = c < 0x80 ? (UNESCAPE[c] as number) : -1;
      if (unit < 0) throw REFUSED;
      i += 2;
    }
    if (high !== -1) {
      if (unit >= 0xdc00 && unit <= 0xdfff) {
        const point = 0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00);
        out[at++] = 0xf0 | (point >> 18);
        out[at++] = 0x80 | ((point >> 12) & 0x3f);
        out[at++] = 0x80 | ((point >> 6) & 0x3f);
        out[at++] = 0x80 | (point & 0x3f);
        high = -1;
        continue;
      }
      at = escapeUnit(out, at, high);
      high = -1;
    }
    if (unit >= 0xd800 && unit <= 0xdbff) high = unit;
    else if (unit >= 0xdc00 && unit <= 0xdfff) at = escapeUnit(out, at, unit);
    else at = writeUnit(out, at, unit);
  }
  out[at++] = 0x22;
  ESCAPED_END[0] = at;
  ESCAPED_END[1] = ascii;
  return i;
}

/**
 * The bytes of `word` (4 bytes of a string, little-endian) that a scan must look at, each as its high bit: `"`, `\\`,
 * a control character and, with `highBits` -1, a non-ASCII byte. A byte is only set falsely above one set rightly (by
 * a borrow), so the lowest set is the first to look at.
 */
function stops(word: number, highBits: number): number {
  const quote = word ^ 0x22222222;
  const slash = word ^ 0x5c5c5c5c;
  return (
    (((quote - 0x01010101) & ~quote) |
      ((slash - 0x01010101) & ~slash) |
      ((word - 0x20202020) & ~word) |
      (word & highBits)) &
    0x80808080
  );
}

/** A hex digit's value, or a large negative number (so that any combination of four is negative). */
function hex(c: number | undefined): number {
  if (c === undefined) return -0x10000;
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const lower = c | 0x20;
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x57;
  return -0x10000;
}

const HEX = '0123456789abcdef';

/** `\uxxxx` (lower-case hex), as JSON.stringify writes a control character or a lone surrogate. */
function escapeUnit(out: Uint8Array, at: number, unit: number): number {
  out[at++] = 0x5c;
  out[at++] = 0x75;
  for (let shift = 12; shift >= 0; shift -= 4) out[at++] = HEX.charCodeAt((unit >> shift) & 0xf);
  return at;
}

/** One UTF-16 unit that is not a surrogate, as JSON.stringify writes it, in UTF-8. */
function writeUnit(out: Uint8Array, at: number, unit: number): number {
  const short = unit < 0x60 ? (SHORT_FORM[unit] as number) : 0;
  if (short !== 0) {
    out[at++] = 0x5c;
    out[at++] = short;
  } else if (unit < 0x20) {
    at = escapeUnit(out, at, unit);
  } else {
    at = unitBytes(out, at, unit);
  }
  return at;
}

/**
 * A key, `b[from, to)` (a string's contents, escapes decoded when `escaped`; `words` is `b` as words), written to
 * `out` (`outWords`) at `at` with each UTF-16 code unit as UTF-8 writes a code point of its value (CESU-8: a
 * character from U+10000 as its two surrogates, 3 bytes each, a lone surrogate ED A0 80–ED BF BF). UTF-8 keeps the
 * order of values and no unit's bytes start another's, so in that form byte order is JavaScript's string order,
 * lone surrogates included. ASCII without a backslash is copied 4 bytes at a time; no key grows by more than half.
 * Returns where it ends. The escapes are valid (the key was written first) and bad UTF-8 is refused after
 * (canonical-json.ts), so neither is checked here.
 *
 * @example
 * unitKey(utf8('"a\\u00e9"'), words, 1, 8, true, out, outWords, 0) // → 3, out starts with 61 c3 a9
 */
export function unitKey(
  b: Uint8Array,
  words: DataView,
  from: number,
  to: number,
  escaped: boolean,
  out: Uint8Array,
  outWords: DataView,
  at: number,
): number {
  let i = from;
  while (i < to) {
    if (i + 4 <= to) {
      const word = words.getInt32(i, true);
      const x = word ^ 0x5c5c5c5c; // a zero byte where a backslash is (a false one only above a true one)
      if (((word | ((x - 0x01010101) & ~x)) & 0x80808080) === 0) {
        outWords.setInt32(at, word, true);
        i += 4;
        at += 4;
        continue;
      }
    }
    const c = b[i] as number;
    if (c === 0x5c && escaped) {
      const next = b[i + 1] as number;
      let unit: number;
      if (next === 0x75) {
        unit = (hex(b[i + 2]) << 12) | (hex(b[i + 3]) << 8) | (hex(b[i + 4]) << 4) | hex(b[i + 5]);
        i += 6;
      } else {
        unit = UNESCAPE[next & 0x7f] as number;
        i += 2;
      }
      at = unitBytes(out, at, unit);
    } else if (c < 0xf0) {
      // ASCII or a character below U+10000: its UTF-8 is its form here
      const end = i + (c < 0x80 ? 1 : c < 0xe0 ? 2 : 3);
      while (i < end) out[at++] = b[i++] as number;
    } else {
      const point =
        (((c & 0x07) << 18) |
          (((b[i + 1] as number) & 0x3f) << 12) |
          (((b[i + 2] as number) & 0x3f) << 6) |
          ((b[i + 3] as number) & 0x3f)) -
        0x10000;
      at = unitBytes(out, at, 0xd800 + ((point >> 10) & 0x3ff));
      at = unitBytes(out, at, 0xdc00 + (point & 0x3ff));
      i += 4;
    }
  }
  return at;
}

/** One UTF-16 code unit, surrogates too, as UTF-8 writes a code point of its value (writeUnit, unitKey). */
function unitBytes(out: Uint8Array, at: number, unit: number): number {
  if (unit < 0x80) {
    out[at++] = unit;
  } else if (unit < 0x800) {
    out[at++] = 0xc0 | (unit >> 6);
    out[at++] = 0x80 | (unit & 0x3f);
  } else {
    out[at++] = 0xe0 | (unit >> 12);
    out[at++] = 0x80 | ((unit >> 6) & 0x3f);
    out[at++] = 0x80 | (unit & 0x3f);
  }
  return at;
}
