/**
 * @module Objects out of order in canonical JSON (src/core/canonical-json.ts): the order of their members
 * (key-order.ts, canonical-keys.ts), then the members moved into it in the output — copied when the object is
 * small, relinked as byte ranges when it is large (canonical-pieces.ts).
 */
import * as keyOrder from './key-order.js';
import { Shapes } from './canonical-shapes.js';
import * as scan from './canonical-scan.js';
import { sortKeys } from './canonical-keys.js';
import { Pieces, relink, reorderInPlace, reorderThrough } from './canonical-pieces.js';

/**
 * The member table's fields (key-order.ts) as this module's own constants, which the runtime folds into its code
 * (an imported one is loaded at each use: 6% of the instructions for 1 MiB of records).
 */
const { AT, MEMBER, PIECE } = keyOrder;
const { ESCAPED, TWO_EQUAL } = scan;

/**
 * Objects up to this many bytes are reordered by copying them past the output's end (reorderInPlace), larger ones
 * through a spare buffer (reorderThrough). An object inside one copied is copied again: the bytes copied in a call
 * are counted, and past twice the body's length every reorder relinks pieces instead, so that no nesting makes
 * copying cost more than a few passes over the body.
 */
export const IN_PLACE_BYTES = 16_384;
/** The room a reorder may use past the output's end: an object copied in place, and a few bytes. */
export const REORDER_ROOM = IN_PLACE_BYTES + 64;

/** The members of the object being reordered, in their new order (a larger object's is made for it). */
const keptOrder = new Int32Array(4096);

/** What objects were reordered with in one canonicalisation (canonical-json.ts makes one per call). */
export class ObjectOrder {
  /** The output's pieces, once an object is relinked. */
  readonly pieces = new Pieces();
  /** The objects sorted, whose order the next of the same keys takes (canonical-shapes.ts). */
  readonly #shapes = new Shapes();
  /** How many more bytes objects may be reordered by copying (IN_PLACE_BYTES), and how many were. */
  #copyBudget: number;
  copied = 0;

  constructor(bodyLength: number) {
    this.#copyBudget = 2 * bodyLength + IN_PLACE_BYTES;
  }

  /**
   * Puts members `base` to `base + count` of the object that ends at `at` in `out` (`outWords` as words) in key
   * order, the last duplicate winning, and returns where the output ends now. `out` has room for `REORDER_ROOM`
   * bytes past `at`. `state` is the scanner's for the object (canonical-scan.ts): ESCAPED, some key has escapes;
   * TWO_EQUAL, of two members (without escapes), the keys are equal (else out of order).
   *
   * @example
   * at = order.reorder(body, words, out, outWords, at, members, base, count, 0)
   */
  reorder(
    body: Uint8Array,
    words: DataView,
    out: Uint8Array,
    outWords: DataView,
    at: number,
    members: Int32Array,
    base: number,
    count: number,
    state: number,
  ): number {
    const escaped = (state & ESCAPED) !== 0;
    const twoEqual = (state & TWO_EQUAL) !== 0;
    if (count === 2 && !escaped) {
      const swapped = this.#swapTwo(out, outWords, at, members, base, twoEqual);
      if (swapped >= 0) return swapped;
    }
    const order = count <= keptOrder.length ? keptOrder : new Int32Array(count);
    let kept: number;
    let sorted = true;
    if (count === 2 && !escaped) {
      // Out of order (swapped) or equal (the second kept), as the scanner found.
      kept = twoEqual ? 1 : 2;
      order[0] = 1;
      order[1] = 0;
    } else if ((kept = this.#shapes.find(words, members, base, count, order)) >= 0) {
      sorted = false; // the order of an object with these keys, kept
    } else {
      kept = sortKeys(body, words, members, base, count, escaped, order);
    }
    // (Of two keys without escapes, the scanner's comparison is the sort: no shape is kept for them.)
    if ((count > 2 || escaped) && sorted) this.#shapes.keep(members, base, count, order, kept);
    if (kept === count && escaped && inSourceOrder(order, count)) return at; // keys with escapes, in order after all

    const from = members[base * MEMBER + AT] as number;
    const span = at - from;
    const reordering = { members, base, count, order, kept };
    if (members[base * MEMBER + PIECE] === this.pieces.tail && span <= this.#copyBudget) {
      this.#copyBudget -= span;
      this.copied += span;
      return span <= IN_PLACE_BYTES
        ? reorderInPlace(out, outWords, reordering, at)
        : reorderThrough(out, outWords, reordering, at);
    }
    relink(this.pieces, reordering, at);
    return at;
  }

  /**
   * The usual reorder, two members in a few bytes (`{"b":1,"a":2}`): the second to the front without its comma, then
   * a comma and the first (unless the keys are equal). Returns the output's end, or -1 unless small and in the
   * open piece (see reorder).
   */
  #swapTwo(out: Uint8Array, words: DataView, end: number, members: Int32Array, base: number, equal: boolean): number {
    const from = members[base * MEMBER + AT] as number;
    if (members[base * MEMBER + PIECE] !== this.pieces.tail || end - from > 64 || end - from > this.#copyBudget)
      return -1;
    this.#copyBudget -= end - from;
    this.copied += end - from;
    const middle = members[(base + 1) * MEMBER + AT] as number;
    // 4 bytes at a time, the last word whole: what each writes past its member is written over next, or lies past
    // the end; and it reads each word before it writes over any byte still to be read.
    copyWords(words, end, from, middle - from); // the first member, held past the end
    copyWords(words, from, middle + 1, end - middle - 1); // the second, without its comma
    let at = from + end - middle - 1;
    if (!equal) {
      out[at++] = 0x2c;
      copyWords(words, at, end, middle - from);
      at += middle - from;
    }
    return at;
  }
}

/** Copies `length` bytes at `from` to `to` in words (DataView), 4 at a time, the last word whole. */
function copyWords(words: DataView, to: number, from: number, length: number): void {
  for (let k = 0; k < length; k += 4) words.setInt32(to + k, words.getInt32(from + k, true), true);
}

function inSourceOrder(order: Int32Array, count: number): boolean {
  for (let i = 0; i < count; i++) if (order[i] !== i) return false;
  return true;
}
