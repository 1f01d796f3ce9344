/**
 * @module Canonical JSON as UTF-8 bytes, written in one pass over the body's bytes: keys sorted as JavaScript sorts
 * strings (UTF-16 code units; the last duplicate wins, as in `JSON.parse`), insignificant whitespace dropped,
 * numbers exactly as `<digits>e<exponent>`, strings as `JSON.stringify` writes their value. The form is the
 * fingerprint's since its first version (fingerprint-corpus.test.ts pins it); only the way it is built changed.
 *
 * Cost: no string or object per node, no recursion. The output is one byte buffer. An object whose keys come out
 * of order is not copied into place: its members are byte ranges ("pieces") of that buffer, linked in sorted order,
 * so an object nested 255 deep is reordered by relinking 255 times, never by copying its subtree 255 times. The
 * pieces are gathered into one run once, at the end, and only when some object was out of order.
 */
import { AT, compareKeys, FLAGS, KEY_END, KEY_START, LastShape, MEMBER, PIECE, RANK } from './key-order.js';
import { MAX_NUMBER_OUTPUT, numberEnd, REFUSED, writeNumber } from './canonical-number.js';
import { Pieces, relink, reorderInPlace } from './canonical-pieces.js';
import { decodeStrict, plainRun, writeEscaped } from './canonical-string.js';
import { sortKeys } from './canonical-keys.js';

/** Deeper JSON than this is hashed as raw bytes: a value inside more than 256 arrays and objects. */
const MAX_JSON_DEPTH = 256;

const ESCAPED = 1; // in a member's FLAGS

// The open containers (shared: a call runs to its end before another starts): kind, and for an object its first
// member, whether its keys came in order and had no escape so far, and whether its first two keys were equal.
const ARRAY = 0;
const OBJECT = 1;
const kinds = new Uint8Array(MAX_JSON_DEPTH + 2);
const bases = new Int32Array(MAX_JSON_DEPTH + 2);
const inOrder = new Uint8Array(MAX_JSON_DEPTH + 2);
const escapedKeys = new Uint8Array(MAX_JSON_DEPTH + 2);
const twoEqual = new Uint8Array(MAX_JSON_DEPTH + 2);
/**
 * Kept between calls (a call runs to its end before another starts, and its result is read before the next): the
 * output buffer, grown to fit bodies up to 1 MiB (the default `maxBodyBytes`), and the member table at its first
 * size. A 2 MiB buffer made per request had the collector run every few requests: in the demo a 1 MiB body cost a
 * quarter more (bench/worst-case.ts). Larger bodies allocate for their call alone.
 */
const KEEP_OUTPUT_BYTES = 2 * 1_048_576 + 16;
let keptOut = new Uint8Array(16_384);
/** The output gathered from its pieces (canonical-pieces.ts), when an object was relinked: kept likewise. */
let keptGathered = new Uint8Array(0);
const keptMembers = new Int32Array(64 * 8);
/** The members of the object being reordered, in their new order (a larger object's is made for it). */
const keptOrder = new Int32Array(4096);
/**
 * Objects up to this many bytes are reordered by copying (reorderInPlace), larger ones by relinking pieces. So is
 * an object inside one copied, again: the bytes copied in a call are counted, and past twice the body's length
 * every reorder relinks, so that no nesting makes copying cost more than a few passes over the body.
 */
const IN_PLACE_BYTES = 16_384;

/**
 * The canonical JSON of `body` as UTF-8 bytes, or `undefined` if it is not valid UTF-8 JSON (or nests deeper than
 * 256, or holds a number longer than 4096 characters). The bytes may be a view of a buffer the next call reuses:
 * read them before calling again.
 *
 * @example
 * new TextDecoder().decode(canonicalBytes(new TextEncoder().encode('{ "b": 1.50, "a": [true] }'))) // → '{"a":[true],"b":15e-1}'
 */
export function canonicalBytes(body: Uint8Array): Uint8Array | undefined {
  const canonical = new Canonical(body);
  try {
    return canonical.run();
  } catch (error) {
    if (error === REFUSED || error instanceof SyntaxError) return undefined;
    throw error;
  } finally {
    copied = canonical.copied;
  }
}

let copied = 0;

/**
 * For tests: the bytes the last call copied to reorder objects in place (at most twice the body and
 * IN_PLACE_BYTES), and the size of the output buffer kept between calls (at most 2 MiB and 16 bytes).
 *
 * @example
 * canonicalBytes(body); canonicalCosts() // → { copied: 0, kept: 16384 }
 */
export function canonicalCosts(): { copied: number; kept: number } {
  return { copied, kept: keptOut.length };
}

class Canonical {
  readonly #in: Uint8Array;
  #pos = 0;
  /** The output; `out[0]` is a comma that a member moved to the front of its object lends to the one it displaced. */
  #out: Uint8Array;
  #at = 1;
  /** Below this index, every byte of the body is ASCII (non-ASCII bytes can only be inside strings). */
  #ascii: number;
  /** The body and the output as words, for scanning and copying long strings (made at the first). */
  #view: DataView | undefined;
  #outView: DataView | undefined;
  /** How many more bytes objects may be reordered by copying (IN_PLACE_BYTES), and how many were. */
  #copyBudget: number;
  copied = 0;

  /** The members of the open objects, a stack of `MEMBER` fields each. */
  #members = keptMembers;
  #memberCount = 0;

  /** The output's pieces, once an object is relinked (canonical-pieces.ts). */
  readonly #pieces = new Pieces();

  /** The last object sorted, whose order the next of the same keys takes (key-order.ts). */
  readonly #shape = new LastShape();

  // Set by #string: where the string's contents (between the quotes) start and end in the body.
  #stringStart = 0;
  #stringEnd = 0;

  constructor(body: Uint8Array) {
    this.#in = body;
    this.#ascii = body.byteLength;
    this.#copyBudget = 2 * body.byteLength + IN_PLACE_BYTES;
    // Canonical JSON is at most twice the body and a few bytes (`1` → `1e0`); `#ensure` grows it otherwise.
    const size = 2 * body.byteLength + 16;
    if (size > keptOut.length && size <= KEEP_OUTPUT_BYTES) keptOut = new Uint8Array(size);
    this.#out = size <= keptOut.length ? keptOut : new Uint8Array(size);
    this.#out[0] = 0x2c;
  }

  run(): Uint8Array {
    const b = this.#in;
    const n = b.byteLength;
    // The read and write positions and the output live in locals here; the helpers that move them take them from
    // and leave them in `#pos`, `#at` and `#out` (which they may grow).
    let pos = 0;
    let out = this.#out;
    let at = this.#at;
    let depth = 0;
    value: for (;;) {
      let c = b[pos];
      while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos];
      if (depth > MAX_JSON_DEPTH) throw REFUSED;
      if (at + MAX_NUMBER_OUTPUT > out.length) {
        this.#at = at;
        this.#ensure(MAX_NUMBER_OUTPUT);
        out = this.#out;
      }
      if (c !== undefined && c >= 0x31 && c <= 0x39) {
        // A positive integer of up to 15 digits (`1`, `42`, `1000`): its digits but the trailing zeros, then `e`
        // and how many zeros trailed (`1e0`, `42e0`, `1e3`).
        let end = pos + 1;
        let d = b[end];
        while (d !== undefined && d >= 0x30 && d <= 0x39 && end - pos < 16) d = b[++end];
        if (end - pos < 16 && d !== 0x2e && d !== 0x65 && d !== 0x45) {
          let last = end;
          while (b[last - 1] === 0x30) last--;
          while (pos < last) out[at++] = b[pos++] as number;
          out[at++] = 0x65;
          const zeros = end - last;
          if (zeros >= 10) out[at++] = 0x31;
          out[at++] = 0x30 + (zeros % 10);
          pos = end;
        } else {
          at = writeNumber(b, pos, out, at);
          pos = numberEnd();
        }
      } else if (c === 0x2d || c === 0x30) {
        at = writeNumber(b, pos, out, at);
        pos = numberEnd();
      } else if (c === 0x22) {
        this.#pos = pos;
        this.#at = at;
        this.#string();
        pos = this.#pos;
        at = this.#at;
        out = this.#out;
      } else if (c === 0x7b || c === 0x5b) {
        // `{` or `[`: empty, or a container opened
        out[at++] = c;
        const close = c + 2; // `}` or `]`
        c = b[++pos];
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos];
        if (c === close) {
          out[at++] = close;
          pos++;
        } else if (close === 0x7d) {
          kinds[depth] = OBJECT;
          bases[depth] = this.#memberCount;
          inOrder[depth] = 1;
          escapedKeys[depth] = 0;
          this.#pos = pos;
          this.#at = at;
          this.#member(depth++, true);
          pos = this.#pos;
          at = this.#at;
          out = this.#out;
          continue value;
        } else {
          kinds[depth++] = ARRAY;
          continue value;
        }
      } else if (c === 0x74 || c === 0x66 || c === 0x6e) {
        const literal = c === 0x74 ? TRUE : c === 0x66 ? FALSE : NULL;
        for (let i = 1; i < literal.length; i++) if (b[pos + i] !== literal[i]) throw REFUSED;
        for (let i = 0; i < literal.length; i++) out[at++] = literal[i] as number;
        pos += literal.length;
      } else {
        throw REFUSED;
      }
      // After a value: a separator, the end of its containers, or the end of the body.
      for (;;) {
        c = b[pos];
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++pos];
        if (depth === 0) {
          if (pos !== n) throw REFUSED;
          this.#at = at;
          return this.#result();
        }
        const frame = depth - 1;
        const kind = kinds[frame];
        if (at === out.length) {
          this.#at = at;
          this.#ensure(1);
          out = this.#out;
        }
        if (c === 0x2c) {
          pos++;
          if (kind === ARRAY) {
            out[at++] = 0x2c;
          } else {
            this.#pos = pos;
            this.#at = at;
            this.#member(frame, false);
            pos = this.#pos;
            at = this.#at;
            out = this.#out;
          }
          continue value;
        }
        if (c !== (kind === ARRAY ? 0x5d : 0x7d)) throw REFUSED;
        pos++;
        if (kind === OBJECT) {
          if (inOrder[frame] === 0) {
            this.#at = at;
            this.#reorder(frame);
            at = this.#at;
            out = this.#out;
          }
          this.#memberCount = bases[frame] as number;
        }
        out[at++] = c;
        depth--;
      }
    }
  }

  /** The body as words (made at the first use). */
  #wordsOf(): DataView {
    return (this.#view ??= new DataView(this.#in.buffer, this.#in.byteOffset, this.#in.byteLength));
  }

  /** The index of the first byte at or after `at` that is not JSON whitespace. */
  #skip(at: number): number {
    const b = this.#in;
    let c = b[at];
    while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++at];
    return at;
  }

  #ensure(bytes: number): void {
    if (this.#at + bytes <= this.#out.length) return;
    const grown = new Uint8Array(Math.max(2 * this.#out.length, this.#at + bytes));
    grown.set(this.#out.subarray(0, this.#at));
    this.#out = grown;
    this.#outView = undefined;
  }

  /**
   * A member's key and its colon; its value follows. The member starts at its comma in the output, so that moving
   * it moves the comma too (the reorder mends the first and the displaced one).
   */
  #member(frame: number, first: boolean): void {
    const m = this.#memberCount++;
    if ((m + 1) * MEMBER > this.#members.length) this.#members = grow(this.#members, (m + 1) * MEMBER);
    const row = m * MEMBER;
    const members = this.#members;
    members[row + AT] = this.#at;
    members[row + PIECE] = this.#pieces.tail;
    this.#ensure(1); // its comma (#string leaves room for the rest of the body: its colon too)
    if (!first) this.#out[this.#at++] = 0x2c;
    const b = this.#in;
    this.#pos = this.#skip(this.#pos);
    if (b[this.#pos] !== 0x22) throw REFUSED;
    const escaped = this.#string();
    members[row + KEY_START] = this.#stringStart;
    members[row + KEY_END] = this.#stringEnd;
    members[row + FLAGS] = escaped ? ESCAPED : 0;
    if (escaped) escapedKeys[frame] = 1;
    if (!first && inOrder[frame] === 1) {
      // Keys with escapes are not compared here: their object is sorted (#reorder).
      const order = escapedKeys[frame] === 1 ? 1 : this.#compareKeys(m - 1, m);
      if (order >= 0) {
        inOrder[frame] = 0;
        // Of two members, this comparison is the whole sort: `#reorder` takes it from here.
        twoEqual[frame] = order === 0 ? 1 : 0;
      }
    }
    this.#pos = this.#skip(this.#pos);
    if (b[this.#pos] !== 0x3a) throw REFUSED;
    this.#pos++;
    this.#out[this.#at++] = 0x3a;
  }

  /** Compares two members' keys (without escapes) as JavaScript compares the strings (UTF-16 code units). */
  #compareKeys(a: number, b: number): number {
    const members = this.#members;
    return compareKeys(
      this.#in,
      this.#wordsOf(),
      RANK,
      members[a * MEMBER + KEY_START] as number,
      members[a * MEMBER + KEY_END] as number,
      members[b * MEMBER + KEY_START] as number,
      members[b * MEMBER + KEY_END] as number,
      0,
    );
  }

  /** Puts the members of the object open at `frame` in key order, the last duplicate winning. */
  #reorder(frame: number): void {
    const base = bases[frame] as number;
    const count = this.#memberCount - base;
    const members = this.#members;
    const escaped = escapedKeys[frame] === 1;
    if (count === 2 && !escaped && this.#swapTwo(base, twoEqual[frame] === 1)) return;
    const order = count <= keptOrder.length ? keptOrder : new Int32Array(count);
    let kept: number;
    let sorted = true;
    if (count === 2 && !escaped) {
      // Out of order (swapped) or equal (the second kept), as #member found.
      kept = twoEqual[frame] === 1 ? 1 : 2;
      order[0] = 1;
      order[1] = 0;
    } else if ((kept = this.#shape.reuse(this.#in, this.#wordsOf(), members, base, count, order)) >= 0) {
      sorted = false; // the order of the last object with these keys
    } else {
      kept = sortKeys(this.#in, this.#wordsOf(), members, base, count, escaped, order);
    }
    if (count > 2 && sorted) this.#shape.keep(members, base, count, order, kept);
    if (kept === count && escaped && inSourceOrder(order, count)) return; // keys with escapes, in order after all

    const from = members[base * MEMBER + AT] as number;
    const span = this.#at - from;
    if (members[base * MEMBER + PIECE] === this.#pieces.tail && span <= IN_PLACE_BYTES && span <= this.#copyBudget) {
      this.#copyBudget -= span;
      this.copied += span;
      this.#ensure(span);
      this.#at = reorderInPlace(this.#out, { members, base, count, order, kept }, this.#at);
    } else {
      relink(this.#pieces, { members, base, count, order, kept }, this.#at);
    }
  }

  /**
   * The usual reorder, two members in a few bytes (`{"b":1,"a":2}`): the second to the front without its comma, then
   * a comma and the first (unless the keys are equal). False unless small and in the open piece (see #reorder).
   */
  #swapTwo(base: number, equal: boolean): boolean {
    const members = this.#members;
    const from = members[base * MEMBER + AT] as number;
    const end = this.#at;
    if (members[base * MEMBER + PIECE] !== this.#pieces.tail || end - from > 64 || end - from > this.#copyBudget)
      return false;
    this.#copyBudget -= end - from;
    this.copied += end - from;
    this.#ensure(end - from);
    const out = this.#out;
    const middle = members[(base + 1) * MEMBER + AT] as number;
    let held = end;
    for (let i = from; i < middle; i++) out[held++] = out[i] as number;
    let at = from;
    for (let i = middle + 1; i < end; i++) out[at++] = out[i] as number;
    if (!equal) {
      out[at++] = 0x2c;
      for (let i = end; i < held; i++) out[at++] = out[i] as number;
    }
    this.#at = at;
    return true;
  }

  /** The output, in one run; and the body checked as UTF-8 if it had any non-ASCII byte. */
  #result(): Uint8Array {
    if (this.#ascii < this.#in.byteLength) decodeStrict(this.#in.subarray(this.#ascii));
    if (!this.#pieces.used) return this.#out.subarray(1, this.#at);
    this.#pieces.close(this.#at);
    const total = this.#pieces.total();
    if (total > keptGathered.length && total <= KEEP_OUTPUT_BYTES)
      keptGathered = new Uint8Array(Math.min(KEEP_OUTPUT_BYTES, Math.max(total, 2 * keptGathered.length)));
    const to = total <= keptGathered.length ? keptGathered : new Uint8Array(total);
    return to.subarray(0, this.#pieces.gather(this.#out, to));
  }

  /**
   * A string, written as `JSON.stringify` writes its value; true when it had escapes. Without one, that is its
   * source bytes (raw text needs no escape: control characters are refused, and `"` and `\` only come escaped).
   */
  #string(): boolean {
    const b = this.#in;
    const n = b.byteLength;
    const start = this.#pos + 1;
    // Its source bytes, quotes included, are its canonical form (when it has no escape): copied as they are
    // scanned, into room for the rest of the body. A byte at a time for the first four (short keys), then a word
    // at a time, and a byte at a time through each word that holds something to look at.
    this.#ensure(n - start + 2);
    const out = this.#out;
    const shift = this.#at - start + 1; // output index = body index + shift
    out[start - 1 + shift] = 0x22;
    let i = start;
    let limit = Math.min(n, start + 4);
    scan: for (;;) {
      for (; i < limit; i++) {
        const c = b[i] as number;
        if (c === 0x22) break scan;
        if (c === 0x5c) return this.#escapedString(start, i);
        if (c < 0x20) throw REFUSED;
        if (c >= 0x80 && i < this.#ascii) this.#ascii = i;
        out[i + shift] = c;
      }
      if (i >= n) throw REFUSED;
      this.#outView ??= new DataView(out.buffer, out.byteOffset, out.byteLength);
      i = plainRun(this.#wordsOf(), i, this.#outView, shift);
      limit = Math.min(n, i + 4);
    }
    out[i + shift] = 0x22;
    this.#stringStart = start;
    this.#stringEnd = i;
    this.#pos = i + 1;
    this.#at = i + shift + 1;
    return false;
  }

  /** The rest of a string from its first escape at `i`: scanned to its end, then written again from `start`. */
  #escapedString(start: number, i: number): true {
    const b = this.#in;
    const n = b.byteLength;
    for (;;) {
      if (i >= n) throw REFUSED;
      const c = b[i] as number;
      if (c === 0x22) break;
      if (c === 0x5c) {
        i += 2;
        continue;
      }
      if (c < 0x20) throw REFUSED;
      if (c >= 0x80 && i < this.#ascii) this.#ascii = i;
      i++;
    }
    this.#stringStart = start;
    this.#stringEnd = i;
    this.#pos = i + 1;
    this.#ensure(i - start + 2); // never longer than its source
    this.#at = writeEscaped(b, start, i, this.#out, this.#at);
    return true;
  }
}

function inSourceOrder(order: Int32Array, count: number): boolean {
  for (let i = 0; i < count; i++) if (order[i] !== i) return false;
  return true;
}

function grow(array: Int32Array, atLeast: number): Int32Array<ArrayBuffer> {
  const grown = new Int32Array(Math.max(atLeast, 2 * array.length, 64));
  grown.set(array);
  return grown;
}

const TRUE = new Uint8Array([0x74, 0x72, 0x75, 0x65]);
const FALSE = new Uint8Array([0x66, 0x61, 0x6c, 0x73, 0x65]);
const NULL = new Uint8Array([0x6e, 0x75, 0x6c, 0x6c]);
