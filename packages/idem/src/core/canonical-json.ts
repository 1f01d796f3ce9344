/**
 * @module Canonical JSON as UTF-8 bytes, written in one pass over the body's bytes: keys sorted as JavaScript sorts
 * strings (UTF-16 code units; the last duplicate wins, as in `JSON.parse`), insignificant whitespace dropped,
 * numbers exactly as `<digits>e<exponent>`, strings as `JSON.stringify` writes their value. The form is the
 * fingerprint's since its first version (fingerprint-corpus.test.ts pins it); only the way it is built changed.
 *
 * Cost: no string or object per node, no recursion. The output is one byte buffer. An object whose keys come out
 * of order is copied into key order (canonical-objects.ts), up to twice the body's bytes in all; past that, its
 * members become byte ranges ("pieces") of the buffer linked in key order, so that an object nested 255 deep is
 * never copied 255 times. The pieces are gathered into one run once, at the end.
 *
 * The scanner is one loop over local variables: every token, key and short string is read and written there, and
 * only longer strings, numbers other than short integers, and objects out of order call out (a call in the loop
 * makes the runtime reload what the loop keeps in registers).
 */
import { compareKeys, RANK, takeSortWork } from './key-order.js';
import * as keyOrder from './key-order.js';
import { MAX_NUMBER_OUTPUT, numberEnd, REFUSED, writeNumber } from './canonical-number.js';
import { ObjectOrder, REORDER_ROOM } from './canonical-objects.js';
import { spare } from './canonical-pieces.js';
import { checkUtf8, ESCAPED_END, writeEscaped } from './canonical-string.js';

/**
 * The member table's fields (key-order.ts) as this module's own constants, which the runtime folds into its code
 * (an imported one is loaded at each use: 6% of the instructions for 1 MiB of records).
 */
const { AT, FLAGS, KEY_END, KEY_START, MEMBER, PIECE } = keyOrder;

/** Deeper JSON than this is hashed as raw bytes: a value inside more than 256 arrays and objects. */
const MAX_JSON_DEPTH = 256;

// The open containers but the innermost (shared: a call runs to its end before another starts), `FRAME` numbers
// each: the byte that closes it, and for an object its first member, its state and where its last key is.
const FRAME = 5;
const STACK = new Int32Array((MAX_JSON_DEPTH + 1) * FRAME);
/** An object's state: its keys came in order so far, some key has escapes, its first two keys were equal. */
const ORDERED = 1;
const ESCAPED = 2;
const TWO_EQUAL = 4;

/**
 * The room the scanner keeps past the output's end, checked once per value: a number's canonical form, the closing
 * brackets that follow it, and an object reordered in place.
 */
const SLACK = MAX_NUMBER_OUTPUT + MAX_JSON_DEPTH + 16;
const ROOM = SLACK + REORDER_ROOM;
/**
 * Kept between calls (a call runs to its end before another starts, and its result is read before the next): the
 * output buffer, grown to fit bodies up to 1 MiB (the default `maxBodyBytes`), and the member table at its first
 * size (and canonical-pieces.ts keeps a spare buffer for large reorders and the output gathered from its pieces). A 2 MiB buffer made per request had the collector run every few requests:
 * in the demo a 1 MiB body cost a quarter more (bench/worst-case.ts). Larger bodies allocate for their call alone.
 */
const KEEP_OUTPUT_BYTES = 2 * 1_048_576 + 16 + ROOM;
let keptOut = new Uint8Array(16_384);
/**
 * The body is read from a copy with `PAD` zero bytes after it (kept likewise): a read past its end finds a byte that
 * ends every token rather than `undefined`, which once seen would make every read of that kind slower.
 */
let keptIn = new Uint8Array(16_384);
const PAD = 8;
const keptMembers = new Int32Array(64 * MEMBER);

/**
 * The canonical JSON of `body` as UTF-8 bytes, or `undefined` if it is not valid UTF-8 JSON (or nests deeper than
 * 256, or holds a number longer than 4096 characters). The bytes may be a view of a buffer the next call reuses:
 * read them before calling again.
 *
 * @example
 * new TextDecoder().decode(canonicalBytes(new TextEncoder().encode('{ "b": 1.50, "a": [true] }'))) // → '{"a":[true],"b":15e-1}'
 */
export function canonicalBytes(body: Uint8Array): Uint8Array | undefined {
  return canonicalBytesFrom(body, enough(body));
}

/** The output buffer a body needs: canonical JSON is never more than twice the body and a few bytes (`1,` → `1e0,`). */
const enough = (body: Uint8Array): number => 2 * body.byteLength + 16 + ROOM;

/**
 * For tests: `canonicalBytes` with an output buffer of `bytes` to start with. When it is full (never when sized as
 * canonicalBytes sizes it), the body is read again into one that is.
 *
 * @example
 * canonicalBytesFrom(body, 1) // → what canonicalBytes(body) gives
 */
export function canonicalBytesFrom(body: Uint8Array, bytes: number): Uint8Array | undefined {
  for (let size = bytes; ; size = enough(body)) {
    const canonical = new Canonical(body, size);
    try {
      return canonical.run();
    } catch (error) {
      if (error === FULL && size < enough(body)) continue;
      if (error === REFUSED || error instanceof SyntaxError) return undefined;
      throw error;
    } finally {
      copied = canonical.objects.copied;
      sorted = takeSortWork();
    }
  }
}

/** Thrown when the output buffer is full (never, when it was sized for the body: see canonicalBytesFrom). */
const FULL = new Error('canonical JSON: the output buffer is full');

let copied = 0;
let sorted = 0;

/**
 * For tests: the bytes the last call copied to reorder objects in place (at most twice the body and
 * IN_PLACE_BYTES), the work it did sorting keys (key-order.ts `takeSortWork`), the size of the output buffer kept
 * between calls (at most twice 1 MiB, 16 bytes and `room`) and that room.
 *
 * @example
 * canonicalBytes(body); canonicalCosts() // → { copied: 0, sorted: 0, kept: 16384, room: 20840 }
 */
export function canonicalCosts(): { copied: number; sorted: number; kept: number; room: number } {
  return { copied, sorted, kept: keptOut.length, room: ROOM };
}

class Canonical {
  /** The body, from a copy with `PAD` zero bytes after its `#length` bytes. */
  readonly #in: Uint8Array;
  readonly #length: number;
  /** The output; `out[0]` is a comma that a member moved to the front of its object lends to the one it displaced. */
  readonly #out: Uint8Array;
  /** How much of `#out` the output may use (it may be larger: kept between calls). */
  readonly #size: number;
  /** The body and the output as words, for scanning and copying long strings (made at the first). */
  #words: DataView | undefined;
  #outWords: DataView | undefined;
  /** The members of the open objects, a stack of `MEMBER` fields each. */
  #members = keptMembers;
  /** The objects reordered, and the output's pieces (canonical-objects.ts). */
  readonly objects: ObjectOrder;

  constructor(body: Uint8Array, size: number) {
    const n = body.byteLength;
    if (n + PAD > keptIn.length && n + PAD <= KEEP_OUTPUT_BYTES / 2) keptIn = new Uint8Array(n + PAD);
    this.#in = n + PAD <= keptIn.length ? keptIn : new Uint8Array(n + PAD);
    this.#in.set(body);
    this.#in.fill(0, n, n + PAD);
    this.#length = n;
    this.objects = new ObjectOrder(n);
    if (size > keptOut.length && size <= KEEP_OUTPUT_BYTES) keptOut = new Uint8Array(size);
    this.#out = size <= keptOut.length ? keptOut : new Uint8Array(size);
    this.#out[0] = 0x2c;
    this.#size = size;
  }

  run(): Uint8Array {
    const b = this.#in;
    const n = this.#length;
    const stack = STACK;
    const rank = RANK;
    const pieces = this.objects.pieces;
    const out = this.#out;
    const size = this.#size; // what the output may use of `out` (canonicalBytesFrom)
    const limit = size - ROOM; // the room past it is enough for any value, and an object reordered in place
    const words = this.#wordsOf();
    const outWords = this.#outWordsOf();
    let members = this.#members;
    let count = 0; // members on the stack
    let tail = pieces.tail; // the open piece
    let ascii = n; // the first non-ASCII byte (only strings hold any; checked as UTF-8 at the end)
    let pos = 0;
    let at = 1;
    let depth = 0;
    let key = 0; // 1: the next value is a member's key
    // The innermost open container (the outer ones are on `stack`): the byte that closes it (0: none open), and for
    // an object its first member, its state (ORDERED, ESCAPED, TWO_EQUAL) and where its last key is in the body.
    let close = 0;
    let base = 0;
    let state = 0;
    let lastStart = 0;
    let lastEnd = 0;
    value: for (;;) {
      let c = b[pos] as number;
      while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
      if (at > limit) throw FULL;
      if (c === 0x22) {
        // A string. Without escapes, its source bytes (quotes included) are its canonical form: copied as scanned,
        // a word at a time, each tested at once for `"`, `\`, a control character and (until the first is found) a
        // non-ASCII byte. Raw text needs no escape: control characters are refused, and `"` and `\` only come
        // escaped. Past the body's end its padding (zeros) is a control character: an unterminated string.
        if (at + n - pos + 8 > size) throw FULL;
        const start = pos + 1;
        const shift = at - pos; // output index = body index + shift
        out[at] = 0x22;
        let i = start;
        let high = ascii === n ? -1 : 0;
        let escaped = false;
        for (;;) {
          const word = words.getInt32(i, true);
          const quote = word ^ 0x22222222;
          const slash = word ^ 0x5c5c5c5c;
          // A byte that is 0 in `quote` or `slash`, or below 0x20 in `word` (or any non-ASCII byte, with `high`),
          // sets its high bit in `flags`; a byte is only set falsely above one set rightly (by a borrow), so the
          // lowest set is the first byte to look at.
          const flags =
            (((quote - 0x01010101) & ~quote) |
              ((slash - 0x01010101) & ~slash) |
              ((word - 0x20202020) & ~word) |
              (word & high)) &
            0x80808080;
          outWords.setInt32(i + shift, word, true);
          if (flags === 0) {
            i += 4;
            continue;
          }
          i += (31 - Math.clz32(flags & -flags)) >> 3;
          const d = b[i] as number;
          if (d === 0x22) break;
          if (d === 0x5c) {
            escaped = true;
            break;
          }
          if (d < 0x20) throw REFUSED;
          ascii = i; // the first non-ASCII byte
          high = 0;
          i++;
        }
        if (escaped) {
          // The rest, from its first escape, written again as its value (the text before it is in place).
          i = writeEscaped(b, words, i, out, outWords, i + shift, ascii) | 0;
          at = ESCAPED_END[0] as number;
          ascii = ESCAPED_END[1] as number;
        } else {
          out[i + shift] = 0x22;
          at = i + shift + 1;
        }
        pos = i + 1;
        if (key === 1) {
          // `i` ends the key. Whether the keys are still in order: compared with the last one, unless either has
          // escapes (their object is sorted whatever their order: canonical-objects.ts).
          key = 0;
          const row = (count - 1) * MEMBER;
          members[row + KEY_START] = start;
          members[row + KEY_END] = i;
          members[row + FLAGS] = escaped ? 1 : 0;
          if ((state & ORDERED) !== 0 && count - 1 > base) {
            let order = 1;
            if (!escaped && (state & ESCAPED) === 0) {
              // Their first 4 bytes (0 past a key's end: no key holds a 0 byte) as big-endian numbers, which order
              // them as their bytes do (but non-ASCII bytes, weighed by RANK: compareKeys).
              const lastLength = lastEnd - lastStart;
              const length = i - start;
              let x = lastLength === 0 ? 0 : words.getUint32(lastStart);
              let y = length === 0 ? 0 : words.getUint32(start);
              if (lastLength < 4) x &= -1 << (32 - 8 * lastLength);
              if (length < 4) y &= -1 << (32 - 8 * length);
              if (x !== y && ((x | y) & 0x80808080) === 0) order = x >>> 0 > y >>> 0 ? 1 : -1;
              else if (x === y && (lastLength <= 4 || length <= 4)) order = lastLength - length;
              else order = compareKeys(b, words, rank, lastStart, lastEnd, start, i, 0);
            }
            // Out of order: sorted when it closes. Of two members, this comparison is the whole sort
            // (canonical-objects.ts takes it from here).
            if (order >= 0) state = (state & ESCAPED) | (order === 0 ? TWO_EQUAL : 0);
          }
          if (escaped) state |= ESCAPED;
          lastStart = start;
          lastEnd = i;
          c = b[pos] as number;
          while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
          if (c !== 0x3a) throw REFUSED;
          pos++;
          out[at++] = 0x3a;
          continue value;
        }
      } else if (key === 1) {
        throw REFUSED;
      } else if (c >= 0x31 && c <= 0x39) {
        // A positive integer of up to 15 digits (`1`, `42`, `1000`): its digits but the trailing zeros, then `e`
        // and how many zeros trailed (`1e0`, `42e0`, `1e3`).
        let end = pos + 1;
        let d = b[end] as number;
        while (d >= 0x30 && d <= 0x39 && end - pos < 16) d = b[++end] as number;
        if (end - pos < 16 && d !== 0x2e && d !== 0x65 && d !== 0x45) {
          let last = end;
          while (b[last - 1] === 0x30) last--;
          // The digits: one, or 4 at a time (bytes written past them are written over next).
          if (last - pos === 1) {
            out[at++] = c;
          } else {
            for (; pos < last; pos += 4, at += 4) outWords.setInt32(at, words.getInt32(pos, true), true);
            at -= pos - last;
          }
          out[at++] = 0x65;
          const zeros = end - last;
          if (zeros >= 10) out[at++] = 0x31;
          out[at++] = 0x30 + (zeros % 10);
          pos = end;
        } else {
          at = writeNumber(b, pos, out, at) | 0;
          pos = numberEnd() | 0;
        }
      } else if (c === 0x2d || c === 0x30) {
        at = writeNumber(b, pos, out, at) | 0;
        pos = numberEnd() | 0;
      } else if (c === 0x7b || c === 0x5b) {
        // `{` or `[`: empty, or a container opened
        out[at++] = c;
        const closer = c + 2; // `}` or `]`
        c = b[++pos] as number;
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
        if (c === closer) {
          out[at++] = closer;
          pos++;
        } else {
          if (depth === MAX_JSON_DEPTH) throw REFUSED;
          const saved = depth * FRAME;
          stack[saved] = close;
          stack[saved + 1] = base;
          stack[saved + 2] = state;
          stack[saved + 3] = lastStart;
          stack[saved + 4] = lastEnd;
          depth++;
          close = closer;
          if (close === 0x7d) {
            base = count;
            state = ORDERED;
            // The first member: it starts here.
            if ((count + 1) * MEMBER > members.length) members = this.#members = grow(members);
            members[count * MEMBER + AT] = at;
            members[count * MEMBER + PIECE] = tail;
            count++;
            key = 1;
          }
          continue value;
        }
      } else if (c === 0x74) {
        if (b[pos + 1] !== 0x72 || b[pos + 2] !== 0x75 || b[pos + 3] !== 0x65) throw REFUSED;
        out[at] = 0x74;
        out[at + 1] = 0x72;
        out[at + 2] = 0x75;
        out[at + 3] = 0x65;
        at += 4;
        pos += 4;
      } else if (c === 0x66) {
        if (b[pos + 1] !== 0x61 || b[pos + 2] !== 0x6c || b[pos + 3] !== 0x73 || b[pos + 4] !== 0x65) throw REFUSED;
        out[at] = 0x66;
        out[at + 1] = 0x61;
        out[at + 2] = 0x6c;
        out[at + 3] = 0x73;
        out[at + 4] = 0x65;
        at += 5;
        pos += 5;
      } else if (c === 0x6e) {
        if (b[pos + 1] !== 0x75 || b[pos + 2] !== 0x6c || b[pos + 3] !== 0x6c) throw REFUSED;
        out[at] = 0x6e;
        out[at + 1] = 0x75;
        out[at + 2] = 0x6c;
        out[at + 3] = 0x6c;
        at += 4;
        pos += 4;
      } else {
        throw REFUSED;
      }
      // After a value: a separator, the end of its containers, or the end of the body.
      for (;;) {
        c = b[pos] as number;
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
        if (close === 0) {
          if (pos !== n) throw REFUSED;
          return this.#result(out, at, ascii);
        }
        if (c === 0x2c) {
          pos++;
          if (close === 0x7d) {
            // The next member: it starts at its comma, so that moving it moves the comma too (the reorder mends
            // the first and the one displaced).
            if ((count + 1) * MEMBER > members.length) members = this.#members = grow(members);
            members[count * MEMBER + AT] = at;
            members[count * MEMBER + PIECE] = tail;
            count++;
            key = 1;
          }
          out[at++] = 0x2c;
          continue value;
        }
        if (c !== close) throw REFUSED;
        pos++;
        if (close === 0x7d) {
          if ((state & ORDERED) === 0) {
            at =
              this.objects.reorder(
                b,
                words,
                out,
                outWords,
                at,
                members,
                base,
                count - base,
                (state & ESCAPED) !== 0,
                (state & TWO_EQUAL) !== 0,
              ) | 0;
            tail = pieces.tail;
          }
          count = base;
        }
        out[at++] = close;
        depth--;
        const saved = depth * FRAME;
        close = stack[saved] as number;
        base = stack[saved + 1] as number;
        state = stack[saved + 2] as number;
        lastStart = stack[saved + 3] as number;
        lastEnd = stack[saved + 4] as number;
      }
    }
  }

  /** The body and the output as words (made at the first use). */
  #wordsOf(): DataView {
    return (this.#words ??= new DataView(this.#in.buffer, this.#in.byteOffset, this.#length + PAD));
  }

  #outWordsOf(): DataView {
    return (this.#outWords ??= new DataView(this.#out.buffer, this.#out.byteOffset, this.#out.byteLength));
  }

  /** The output, in one run; and the body checked as UTF-8 if it had any non-ASCII byte. */
  #result(out: Uint8Array, at: number, ascii: number): Uint8Array {
    if (ascii < this.#length) checkUtf8(this.#in.subarray(ascii, this.#length));
    const pieces = this.objects.pieces;
    if (!pieces.used) return out.subarray(1, at);
    pieces.close(at);
    const { bytes, words } = spare(pieces.total() + 8);
    return bytes.subarray(0, pieces.gather(out, this.#outWordsOf(), bytes, words));
  }
}

function grow(array: Int32Array): Int32Array<ArrayBuffer> {
  const grown = new Int32Array(2 * array.length);
  grown.set(array);
  return grown;
}
