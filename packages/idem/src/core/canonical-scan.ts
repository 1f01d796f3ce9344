/**
 * @module The pieces of canonical-json.ts's scanner that are not its loop: plain functions of integers (a string's
 * word scan, a member's row, the colon after a key, a frame pushed, a short integer), small enough that the
 * optimizing compiler copies them into the loop — but for `keyState`, the key comparison, which stays a call (the
 * loop's inlining budget is spent by then). A second result comes back packed into the one returned integer.
 */
import { compareKeys, RANK } from './key-order.js';
import * as keyOrder from './key-order.js';
import { REFUSED } from './canonical-number.js';

/** The member table's fields as this module's own constants (see canonical-json.ts). */
const { AT, FLAGS, KEY_END, KEY_START, MEMBER, PIECE } = keyOrder;

/** An object's state: its keys came in order so far, some key has escapes, its first two keys were equal. */
export const ORDERED = 1;
export const ESCAPED = 2;
export const TWO_EQUAL = 4;

/**
 * Copies a string's bytes from `i` (in `words`) to `i + shift` (in `outWords`) a word at a time, each tested at once
 * for `"`, `\`, a control character and (with `high` -1) a non-ASCII byte, and returns the index of the first such
 * byte. Bytes copied past it are written over next.
 */
export function scanWords(words: DataView, outWords: DataView, i: number, shift: number, high: number): number {
  for (;;) {
    const word = words.getInt32(i, true);
    const quote = word ^ 0x22222222;
    const slash = word ^ 0x5c5c5c5c;
    // A byte that is 0 in `quote` or `slash`, or below 0x20 in `word` (or any non-ASCII byte, with `high`), sets
    // its high bit in `flags`; a byte is only set falsely above one set rightly (by a borrow), so the lowest set is
    // the first byte to look at.
    const flags =
      (((quote - 0x01010101) & ~quote) |
        ((slash - 0x01010101) & ~slash) |
        ((word - 0x20202020) & ~word) |
        (word & high)) &
      0x80808080;
    outWords.setInt32(i + shift, word, true);
    if (flags !== 0) return i + ((31 - Math.clz32(flags & -flags)) >> 3);
    i += 4;
  }
}

/**
 * The state of an object whose keys were in order up to the last member's, `members[row]`, which has no escapes:
 * whether its key (`b[start, end)`) still is, compared with the one before it, unless that one has escapes (their
 * object is sorted whatever their order: canonical-objects.ts).
 */
export function keyState(b: Uint8Array, words: DataView, members: Int32Array, member: number, state: number): number {
  const row = member * MEMBER;
  const lastStart = members[row - MEMBER + KEY_START] as number;
  const lastEnd = members[row - MEMBER + KEY_END] as number;
  const start = members[row + KEY_START] as number;
  const end = members[row + KEY_END] as number;
  let order = 1;
  if (members[row + FLAGS] === 0 && (state & ESCAPED) === 0) {
    // Their first 4 bytes (0 past a key's end: no key holds a 0 byte) as big-endian numbers, which order them as
    // their bytes do (but non-ASCII bytes, weighed by RANK: compareKeys).
    const lastLength = lastEnd - lastStart;
    const length = end - start;
    let x = lastLength === 0 ? 0 : words.getUint32(lastStart);
    let y = length === 0 ? 0 : words.getUint32(start);
    if (lastLength < 4) x &= -1 << (32 - 8 * lastLength);
    if (length < 4) y &= -1 << (32 - 8 * length);
    if (x !== y && ((x | y) & 0x80808080) === 0) order = x >>> 0 > y >>> 0 ? 1 : -1;
    else if (x === y && (lastLength <= 4 || length <= 4)) order = lastLength - length;
    else order = compareKeys(b, words, RANK, lastStart, lastEnd, start, end, 0);
  }
  // Out of order: sorted when it closes. Of two members, this comparison is the whole sort (canonical-objects.ts
  // takes it from here).
  return order >= 0 ? (state & ESCAPED) | (order === 0 ? TWO_EQUAL : 0) : state;
}

/**
 * Notes a member at `at` in the output (`tail` the piece open then) as the `count`th on `members`, its key
 * `b[start, end)` (`escaped` 1 if it has escapes): the table, grown if it was full.
 */
export function openMember(
  members: Int32Array,
  count: number,
  at: number,
  tail: number,
  start: number,
  end: number,
  escaped: number,
): Int32Array {
  if ((count + 1) * MEMBER > members.length) members = grow(members);
  const row = count * MEMBER;
  members[row + AT] = at;
  members[row + PIECE] = tail;
  members[row + KEY_START] = start;
  members[row + KEY_END] = end;
  members[row + FLAGS] = escaped;
  return members;
}

/** Where a member's value starts: past the colon at `b[pos]` (and whitespace around it); refused if none. */
export function colon(b: Uint8Array, pos: number): number {
  let c = b[pos] as number;
  while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
  if (c !== 0x3a) throw REFUSED;
  return pos + 1;
}

/** The fields of an open container's frame on canonical-json.ts's `STACK`: its closing byte, first member, state. */
export const FRAME = 3;

/** Saves an open container's frame as the `depth`th on `stack`. */
export function pushFrame(stack: Int32Array, depth: number, close: number, base: number, state: number): void {
  const saved = depth * FRAME;
  stack[saved] = close;
  stack[saved + 1] = base;
  stack[saved + 2] = state;
}

function grow(array: Int32Array): Int32Array {
  const grown = new Int32Array(2 * array.length);
  grown.set(array);
  return grown;
}

/**
 * Writes the positive integer of up to 15 digits (`1`, `42`, `1000`) at `b[pos]` to `out` at `at`: its digits but
 * the trailing zeros, then `e` and how many zeros trailed (`1e0`, `42e0`, `1e3`). Returns the bytes read plus 256
 * times the bytes written; or 0 for any other number.
 */
export function writeInteger(
  b: Uint8Array,
  words: DataView,
  out: Uint8Array,
  outWords: DataView,
  pos: number,
  at: number,
): number {
  let end = pos + 1;
  let d = b[end] as number;
  while (d >= 0x30 && d <= 0x39 && end - pos < 16) d = b[++end] as number;
  if (end - pos >= 16 || d === 0x2e || d === 0x65 || d === 0x45) return 0;
  let last = end;
  while (b[last - 1] === 0x30) last--;
  // The digits: one, or 4 at a time (bytes written past them are written over next).
  let i = at;
  if (last - pos === 1) {
    out[i++] = b[pos] as number;
  } else {
    for (let j = pos; j < last; j += 4) outWords.setInt32(i + j - pos, words.getInt32(j, true), true);
    i += last - pos;
  }
  out[i++] = 0x65;
  const zeros = end - last;
  if (zeros >= 10) out[i++] = 0x31;
  out[i++] = 0x30 + (zeros % 10);
  return (end - pos) | ((i - at) << 8);
}
