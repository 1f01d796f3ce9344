/**
 * @module The pieces of canonical JSON output (src/core/canonical-json.ts): byte ranges of one output buffer in a
 * linked list, so that an object's members are put in key order by relinking their ranges, never by copying their
 * bytes. Piece 0 starts at byte 1 of the output. The last piece, `tail`, is open: the writer's position ends it.
 */

import * as keyOrder from './key-order.js';

/**
 * The member table's fields (key-order.ts) as this module's own constants, which the runtime folds into its code
 * (an imported one is loaded at each use: 6% of the instructions for 1 MiB of records).
 */
const { AT, HEAD, LAST, MEMBER, PIECE } = keyOrder;

// A piece is `out[start, end)`, and the next piece's number (-1: none).
const FIELDS = 3;
const START = 0;
const END = 1;
const NEXT = 2;

/** Kept between calls (a call runs to its end before another starts) while it fits. */
const kept = new Int32Array(64 * FIELDS);

export class Pieces {
  #table = kept;
  #count = 0;
  /** The open piece. */
  tail = 0;

  /** True once any object was relinked: the output is then the list, not one run. */
  get used(): boolean {
    return this.#count > 0;
  }

  /** Starts the list (piece 0, from byte 1) if it is not yet, and ends the open piece at `at`. */
  close(at: number): void {
    if (this.#count === 0) {
      this.#table[START] = 1;
      this.#table[NEXT] = -1;
      this.#count = 1;
    }
    this.#table[this.tail * FIELDS + END] = at;
  }

  /** A new piece, `out[start, end)`, linked to nothing. */
  add(start: number, end: number): number {
    const p = this.#count++;
    if ((p + 1) * FIELDS > this.#table.length) {
      const grown = new Int32Array(2 * this.#table.length);
      grown.set(this.#table);
      this.#table = grown;
    }
    this.#table[p * FIELDS + START] = start;
    this.#table[p * FIELDS + END] = end;
    this.#table[p * FIELDS + NEXT] = -1;
    return p;
  }

  /** Cuts `piece` at `at`: it ends there, and the new piece (returned) holds the rest and its link. */
  split(piece: number, at: number): number {
    const rest = this.add(at, this.#table[piece * FIELDS + END] as number);
    this.#table[rest * FIELDS + NEXT] = this.#table[piece * FIELDS + NEXT] as number;
    this.#table[piece * FIELDS + END] = at;
    this.#table[piece * FIELDS + NEXT] = rest;
    if (piece === this.tail) this.tail = rest;
    return rest;
  }

  link(from: number, to: number): void {
    this.#table[from * FIELDS + NEXT] = to;
  }

  /** Drops the first byte of `piece` (a member's comma, when it moves to the front of its object). */
  dropFirstByte(piece: number): void {
    this.#table[piece * FIELDS + START] = (this.#table[piece * FIELDS + START] as number) + 1;
  }

  /** The bytes in the list, from piece 0. */
  total(): number {
    let total = 0;
    for (let p = 0; p !== -1; p = this.#table[p * FIELDS + NEXT] as number)
      total += (this.#table[p * FIELDS + END] as number) - (this.#table[p * FIELDS + START] as number);
    return total;
  }

  /** Copies the list's bytes of `out`, in order, to `to` (room for `total()`); returns where they end. */
  gather(out: Uint8Array, outWords: DataView, to: Uint8Array, toWords: DataView): number {
    const table = this.#table;
    let at = 0;
    for (let p = 0; p !== -1; p = table[p * FIELDS + NEXT] as number) {
      const start = table[p * FIELDS + START] as number;
      const end = table[p * FIELDS + END] as number;
      copyAcross(out, outWords, start, to, toWords, at, end - start);
      at += end - start;
    }
    return at;
  }
}

/**
 * An object to put in key order (canonical-json.ts): its members, `base` to `base + count` of the member table,
 * and their new order, `order[0, kept)`.
 */
export interface Reordering {
  readonly members: Int32Array;
  readonly base: number;
  readonly count: number;
  readonly order: Int32Array;
  readonly kept: number;
}

/**
 * Reorders an object by pieces: splits them at each member's start, links the members' pieces in the new order,
 * and opens a new piece at `at`, the output's end.
 */
export function relink(pieces: Pieces, { members, base, count, order, kept }: Reordering, at: number): void {
  pieces.close(at);
  for (let i = 0; i < count; i++) {
    const row = (base + i) * MEMBER;
    const piece = members[row + PIECE] as number;
    // The piece open when this member started; if it was also the previous member's, that member's split has
    // since cut it: this member starts in the second half.
    const holder = i > 0 && piece === members[row - MEMBER + PIECE] ? (members[row - MEMBER + HEAD] as number) : piece;
    members[row + HEAD] = pieces.split(holder, members[row + AT] as number);
    if (i > 0) members[row - MEMBER + LAST] = holder;
  }
  members[(base + count - 1) * MEMBER + LAST] = pieces.tail;

  let previous = members[base * MEMBER + PIECE] as number; // now ends just after the `{`
  for (let j = 0; j < kept; j++) {
    const row = (base + (order[j] as number)) * MEMBER;
    const head = members[row + HEAD] as number;
    if (j === 0 && order[j] !== 0) {
      pieces.dropFirstByte(head); // its comma
    } else if (j > 0 && order[j] === 0) {
      const comma = pieces.add(0, 1); // `out[0]`
      pieces.link(previous, comma);
      previous = comma;
    }
    pieces.link(previous, head);
    previous = members[row + LAST] as number;
  }
  pieces.tail = pieces.add(at, at);
  pieces.link(previous, pieces.tail);
}

/**
 * The reorder of a small object that lies in one piece, nothing in it relinked: its members are copied in the order
 * `order[0, kept)` past `at` (the output's end; room made for IN_PLACE_BYTES and a word), then back over it at once.
 * Returns the output's new end.
 */
export function reorderInPlace(
  out: Uint8Array,
  words: DataView,
  { members, base, count, order, kept }: Reordering,
  at: number,
): number {
  const from = members[base * MEMBER + AT] as number;
  let to = at;
  for (let j = 0; j < kept; j++) {
    const m = order[j] as number;
    let start = members[(base + m) * MEMBER + AT] as number;
    const end = m + 1 < count ? (members[(base + m + 1) * MEMBER + AT] as number) : at;
    if (j === 0 && m !== 0)
      start++; // past its comma
    else if (j > 0 && m === 0) out[to++] = 0x2c;
    // 4 bytes at a time, the last word whole: what it writes past the member is written over next, or past the end.
    const length = end - start;
    if (length > 64) out.copyWithin(to, start, end);
    else for (let k = 0; k < length; k += 4) words.setInt32(to + k, words.getInt32(start + k, true), true);
    to += length;
  }
  out.copyWithin(from, at, to);
  return from + to - at;
}

/**
 * Reorders an object too large to copy past the output's end (IN_PLACE_BYTES): its members are copied in their new
 * order to the spare buffer, then back. Returns the output's new end.
 */
export function reorderThrough(
  out: Uint8Array,
  words: DataView,
  { members, base, count, order, kept }: Reordering,
  at: number,
): number {
  const from = members[base * MEMBER + AT] as number;
  const { bytes, words: spareWords } = spare(at - from + 8);
  let written = 0;
  for (let j = 0; j < kept; j++) {
    const m = order[j] as number;
    let start = members[(base + m) * MEMBER + AT] as number;
    const end = m + 1 < count ? (members[(base + m + 1) * MEMBER + AT] as number) : at;
    if (j === 0 && m !== 0)
      start++; // past its comma
    else if (j > 0 && m === 0) bytes[written++] = 0x2c;
    copyAcross(out, words, start, bytes, spareWords, written, end - start);
    written += end - start;
  }
  out.set(bytes.subarray(0, written), from);
  return from + written;
}

/** The spare buffer kept between calls (for one reorder, or the output gathered at the end), up to this size. */
const KEEP_SPARE_BYTES = 2 * 1_048_576 + 65_536;
let keptSpare = new Uint8Array(0);
let keptSpareWords = new DataView(keptSpare.buffer);

/**
 * A spare buffer of at least `size` bytes, and it as words: the kept one (which the next use overwrites), or one
 * made for a larger size.
 *
 * @example
 * const { bytes, words } = spare(1024)
 */
export function spare(size: number): { bytes: Uint8Array; words: DataView } {
  if (size > keptSpare.length && size <= KEEP_SPARE_BYTES) {
    keptSpare = new Uint8Array(Math.min(KEEP_SPARE_BYTES, Math.max(size, 2 * keptSpare.length)));
    keptSpareWords = new DataView(keptSpare.buffer);
  }
  if (size <= keptSpare.length) return { bytes: keptSpare, words: keptSpareWords };
  const bytes = new Uint8Array(size);
  return { bytes, words: new DataView(bytes.buffer) };
}

/**
 * Copies `from[start, start + length)` to `to` at `at` (each with its words): at once when long, else 4 bytes at a
 * time. `to` has room for 3 bytes past the copy, which may be overwritten.
 */
function copyAcross(
  from: Uint8Array,
  fromWords: DataView,
  start: number,
  to: Uint8Array,
  toWords: DataView,
  at: number,
  length: number,
): void {
  if (length > 64) {
    to.set(from.subarray(start, start + length), at);
    return;
  }
  for (let k = 0; k < length; k += 4) toWords.setInt32(at + k, fromWords.getInt32(start + k, true), true);
}
