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
 * The scanner is one loop over local variables. What is not the loop's own — a string's word scan, a member's row,
 * the colon after a key, a frame pushed, a short integer — is a small function in canonical-scan.ts that the
 * optimizing compiler copies into it; the key comparison, escapes, other numbers and objects out of order are calls
 * (a call in the loop makes the runtime reload what the loop keeps in registers). Cut out of one 262-line loop to
 * stay under 120 lines, it counts 3.7 % more instructions over the 41 bench/fingerprint.ts bodies (42 MB, callgrind)
 * and 1.5 % fewer per request from the 100th to the 400th (`new/null`: less for the compiler to optimize).
 */
import { MEMBER, takeSortWork } from './key-order.js';
import { MAX_NUMBER_OUTPUT, numberEnd, REFUSED, writeNumber } from './canonical-number.js';
import { ObjectOrder, REORDER_ROOM } from './canonical-objects.js';
import { spare } from './canonical-pieces.js';
import { checkUtf8, ESCAPED_END, writeEscaped } from './canonical-string.js';
import * as scan from './canonical-scan.js';
import { colon, keyState, openMember, pushFrame, scanWords, writeInteger } from './canonical-scan.js';

/**
 * An object's states (canonical-scan.ts) as this module's own constants, which the runtime folds into its code (an
 * imported one is loaded at each use: 6% of the instructions for 1 MiB of records, for the member table's fields).
 */
const { ESCAPED, FRAME, ORDERED } = scan;
/** `true`, `null` and `false` from its second byte, as little-endian words. */
const TRUE = 0x65757274;
const NULL = 0x6c6c756e;
const ALSE = 0x65736c61;

/** Deeper JSON than this is hashed as raw bytes: a value inside more than 256 arrays and objects. */
const MAX_JSON_DEPTH = 256;

// The open containers but the innermost (shared: a call runs to its end before another starts), `FRAME` numbers
// each: the byte that closes it (0: none open), and for an object its first member and its state (ORDERED, ESCAPED,
// TWO_EQUAL). The scanner keeps the innermost's in `close`, `base` and `state`.
const STACK = new Int32Array((MAX_JSON_DEPTH + 1) * FRAME);

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
  /** The body and the output as words, for scanning strings and writing words. */
  readonly #words: DataView;
  readonly #outWords: DataView;
  /** The members of the open objects, a stack of `MEMBER` fields each. */
  #members: Int32Array = keptMembers;
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
    this.#words = new DataView(this.#in.buffer, this.#in.byteOffset, n + PAD);
    this.#outWords = new DataView(this.#out.buffer, this.#out.byteOffset, this.#out.byteLength);
  }

  run(): Uint8Array {
    const b = this.#in;
    const n = this.#length;
    const out = this.#out;
    const size = this.#size; // what the output may use of `out` (canonicalBytesFrom)
    const limit = size - ROOM; // the room past it is enough for any value, and an object reordered in place
    const words = this.#words;
    const outWords = this.#outWords;
    let members: Int32Array = this.#members;
    let count = 0; // members on the stack
    let tail = this.objects.pieces.tail; // the open piece
    let ascii = n; // the first non-ASCII byte (only strings hold any; checked as UTF-8 at the end)
    let pos = 0;
    let at = 1;
    let depth = 0;
    let key = 0; // the next value is a member's key: 1 its object's first, 2 after a comma
    let close = 0; // the innermost open container's frame (STACK)
    let base = 0;
    let state = 0;
    value: for (;;) {
      let c = b[pos] as number;
      while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
      if (at > limit) throw FULL;
      if (c === 0x22) {
        if (at + n - pos + 8 > size) throw FULL;
        const start = pos + 1;
        const shift = at - pos; // output index = body index + shift
        out[at] = 0x22;
        let i = start;
        let d = 0;
        for (let high = ascii === n ? -1 : 0; ; high = 0) {
          i = scanWords(words, outWords, i, shift, high) | 0;
          d = b[i] as number;
          if (d === 0x22 || d === 0x5c) break;
          if (d < 0x20) throw REFUSED;
          ascii = i++; // the first non-ASCII byte
        }
        // Without escapes, closed; else the rest, from its first escape, written again as its value.
        if (d === 0x5c) i = writeEscaped(b, words, i, out, outWords, i + shift, ascii) | 0;
        else out[i + shift] = 0x22;
        at = d === 0x5c ? (ESCAPED_END[0] as number) : i + shift + 1;
        if (d === 0x5c) ascii = ESCAPED_END[1] as number;
        pos = i + 1;
        if (key !== 0) {
          // A key: its member starts at its comma, if any (moved with it), and `i` ends it.
          members = openMember(members, count++, start + shift - key, tail, start, i, d === 0x5c ? 1 : 0);
          key = 0;
          if ((state & ORDERED) !== 0 && count - 1 > base) state = keyState(b, words, members, count - 1, state);
          if (d === 0x5c) state |= ESCAPED;
          pos = colon(b, pos);
          out[at++] = 0x3a;
          continue value;
        }
      } else if (key !== 0) {
        throw REFUSED;
      } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
        // A positive integer of up to 15 digits here, any other number by canonical-number.ts.
        const read = c === 0x2d || c === 0x30 ? 0 : writeInteger(b, words, out, outWords, pos, at);
        at = read === 0 ? writeNumber(b, pos, out, at) | 0 : at + (read >> 8);
        pos = read === 0 ? numberEnd() | 0 : pos + (read & 0xff);
      } else if (c === 0x7b || c === 0x5b) {
        out[at++] = c;
        const closer = c + 2; // `}` or `]`
        c = b[++pos] as number;
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos] as number;
        if (c !== closer) {
          if (depth === MAX_JSON_DEPTH) throw REFUSED;
          pushFrame(STACK, depth++, close, base, state);
          close = closer;
          if (close === 0x7d) {
            base = count;
            state = ORDERED;
            key = 1;
          }
          continue value;
        }
        out[at++] = closer;
        pos++;
      } else {
        // `true`, `null` or `false` (`f` and a word)
        const f = c === 0x66 ? 1 : 0;
        const word = words.getInt32(pos + f, true);
        const expected = c === 0x74 ? TRUE : c === 0x6e ? NULL : ALSE;
        if (word !== expected || (f === 0 && expected === ALSE)) throw REFUSED;
        out[at] = c;
        outWords.setInt32(at + f, word, true);
        at += 4 + f;
        pos += 4 + f;
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
          if (close === 0x7d) key = 2;
          out[at++] = 0x2c;
          continue value;
        }
        if (c !== close) throw REFUSED;
        pos++;
        if (close === 0x7d) {
          if ((state & ORDERED) === 0) {
            at = this.objects.reorder(b, words, out, outWords, at, members, base, count - base, state) | 0;
            tail = this.objects.pieces.tail;
          }
          count = base;
        }
        out[at++] = close;
        const saved = --depth * FRAME;
        close = STACK[saved] as number;
        base = STACK[saved + 1] as number;
        state = STACK[saved + 2] as number;
      }
    }
  }

  /** The output, in one run; and the body checked as UTF-8 if it had any non-ASCII byte. */
  #result(out: Uint8Array, at: number, ascii: number): Uint8Array {
    if (ascii < this.#length) checkUtf8(this.#in.subarray(ascii, this.#length));
    const pieces = this.objects.pieces;
    if (!pieces.used) return out.subarray(1, at);
    pieces.close(at);
    const { bytes, words } = spare(pieces.total() + 8);
    return bytes.subarray(0, pieces.gather(out, this.#outWords, bytes, words));
  }
}
