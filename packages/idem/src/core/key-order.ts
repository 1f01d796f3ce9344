/**
 * @module The order of an object's members in canonical JSON (src/core/canonical-json.ts): by key, as JavaScript
 * compares strings (UTF-16 code units), equal keys in source order and the last of them kept. On the keys' UTF-8
 * bytes in the body, without making a string of any (`orderMembers`), but for objects whose keys have escapes
 * (`orderByStrings`); and an object with the keys of the last one sorted takes its order (`LastShape`).
 */

/** A member's fields in canonical-json.ts's member table: one row of `MEMBER` numbers per member. */
export const MEMBER = 8;
/** Where the key's contents (between the quotes) start and end in the body. */
export const KEY_START = 0;
export const KEY_END = 1;
/** Whether the key has escapes. */
export const FLAGS = 2;
/** Where the member starts in the output (at its comma, if any), and the output piece open then. */
export const AT = 3;
export const PIECE = 4;
/** Its first and last piece, once its object is relinked (canonical-pieces.ts). */
export const HEAD = 5;
export const LAST = 6;

/**
 * A byte's weight in UTF-16 order. UTF-8 orders code points; UTF-16 puts U+10000 and above (4-byte sequences, lead
 * F0–F4, surrogates D800–DBFF) before U+E000–U+FFFF (3-byte, lead EE–EF). Two keys are only compared at a byte
 * where both start a character (their common prefix is whole characters) or both continue one with the same lead,
 * so moving these leads is the whole difference.
 */
export const RANK = new Uint8Array(256).map((_, byte) =>
  byte === 0xee || byte === 0xef ? byte + 5 : byte >= 0xf0 && byte <= 0xf4 ? byte - 2 : byte,
);

/**
 * Compares two keys' bytes, `body[aStart, aEnd)` and `body[bStart, bEnd)`, in UTF-16 order.
 *
 * @example
 * compareKeyBytes(utf8('"b","a"'), 1, 2, 5, 6) // → 1
 */
export function compareKeyBytes(body: Uint8Array, aStart: number, aEnd: number, bStart: number, bEnd: number): number {
  const length = Math.min(aEnd - aStart, bEnd - bStart);
  for (let i = 0; i < length; i++) {
    const x = body[aStart + i] as number;
    const y = body[bStart + i] as number;
    if (x !== y) return (RANK[x] as number) - (RANK[y] as number);
  }
  return aEnd - aStart - (bEnd - bStart);
}

/** Past this many members, the radix sort below; up to it, an insertion sort. */
const SMALL = 8;
/** The member's number within its object, below the packed key bytes; at most 2^20 members take this sort. */
const SCALE = 2 ** 20;
/** The largest object this sort takes (the caller sorts larger ones by strings). */
export const MAX_SORTED_MEMBERS = SCALE;

/** The packed keys being sorted (a larger object's are made for it). */
const keptValues = new Float64Array(4096);

/**
 * Puts the members `base + order[i]` (`order` holds 0…count-1) in key order, the last of equal keys kept: returns
 * how many are kept, at the start of `order`.
 *
 * Past 8 members, a most-significant-digit radix sort whose digit is 4 bytes: each group of members is first
 * advanced past the bytes all its keys share (a scan, never a comparison sort over them), then sorted by its next
 * 4 bytes packed with the member's number into one double, with the runtime's native typed-array sort. Linear in
 * the keys' bytes plus n log n native compares: no key, however long its shared prefix, is compared twice.
 */
export function orderMembers(
  body: Uint8Array,
  members: Int32Array,
  base: number,
  count: number,
  order: Int32Array,
): number {
  const keys: Keys = { body, members, base, order };
  if (count <= SMALL) insertionSort(keys, 0, count, 0);
  else radixSort(keys, count);
  // Equal keys are next to each other, in source order: keep the last of each run.
  let kept = 0;
  for (let i = 0; i < count; i++) {
    if (i + 1 < count && compareAt(keys, i, i + 1, 0) === 0) continue;
    order[kept++] = order[i] as number;
  }
  return kept;
}

/**
 * Sorts `order[0, count)` (a few members, by number) with `compare` by insertion, equal keys in source order, then
 * keeps the last of each run of equal keys: returns how many are kept.
 *
 * @example
 * orderFew(3, Int32Array.of(0, 1, 2), (x, y) => keys[x].localeCompare(keys[y])) // keys ['b', 'a', 'b'] → 2, [1, 2]
 */
export function orderFew(count: number, order: Int32Array, compare: (x: number, y: number) => number): number {
  for (let i = 1; i < count; i++) {
    const moving = order[i] as number;
    let j = i;
    for (; j > 0 && compare(order[j - 1] as number, moving) > 0; j--) order[j] = order[j - 1] as number;
    order[j] = moving;
  }
  let kept = 0;
  for (let i = 0; i < count; i++)
    if (i + 1 === count || compare(order[i] as number, order[i + 1] as number) !== 0)
      order[kept++] = order[i] as number;
  return kept;
}

/**
 * The order for keys given as strings (those with escapes, compared as the strings they stand for): `order[0, n)`
 * becomes the indexes of `keys` in sorted order, the last of equal keys kept; returns how many are kept.
 *
 * @example
 * orderByStrings(['b', 'a', 'b'], order) // → 2, order starts [1, 2]
 */
export function orderByStrings(keys: readonly string[], order: Int32Array): number {
  const lastOf = new Map<string, number>();
  for (let i = 0; i < keys.length; i++) lastOf.set(keys[i] as string, i);
  const sorted = [...lastOf.keys()].sort();
  for (let j = 0; j < sorted.length; j++) order[j] = lastOf.get(sorted[j] as string) as number;
  return sorted.length;
}

/** The members being ordered: `order[i]` is member `base + order[i]` of the member table. */
interface Keys {
  readonly body: Uint8Array;
  readonly members: Int32Array;
  readonly base: number;
  readonly order: Int32Array;
}

function keyStart(keys: Keys, i: number): number {
  return keys.members[(keys.base + (keys.order[i] as number)) * MEMBER + KEY_START] as number;
}

function keyEnd(keys: Keys, i: number): number {
  return keys.members[(keys.base + (keys.order[i] as number)) * MEMBER + KEY_END] as number;
}

/** Compares the keys at `order[i]` and `order[j]`, which share their first `depth` bytes. */
function compareAt(keys: Keys, i: number, j: number, depth: number): number {
  return compareKeyBytes(
    keys.body,
    keyStart(keys, i) + depth,
    keyEnd(keys, i),
    keyStart(keys, j) + depth,
    keyEnd(keys, j),
  );
}

/** Sorts `order[from, to)`, whose keys share their first `depth` bytes. Equal keys keep their source order. */
function insertionSort(keys: Keys, from: number, to: number, depth: number): void {
  const order = keys.order;
  for (let i = from + 1; i < to; i++) {
    const moving = order[i] as number;
    let j = i;
    // Compared with the moving key, which stays at `order[j]` until it is placed.
    while (j > from && compareAt(keys, j - 1, j, depth) > 0) {
      order[j] = order[j - 1] as number;
      order[j - 1] = moving;
      j--;
    }
  }
}

function radixSort(keys: Keys, count: number): void {
  const { body, order } = keys;
  const values = count <= keptValues.length ? keptValues : new Float64Array(count);
  const groups = [0, count, 0]; // (from, to, depth) triples still to sort
  while (groups.length > 0) {
    let depth = groups.pop() as number;
    const to = groups.pop() as number;
    const from = groups.pop() as number;
    if (to - from <= SMALL) {
      insertionSort(keys, from, to, depth);
      continue;
    }
    // Past the bytes every key of the group shares.
    const s0 = keyStart(keys, from);
    const length0 = keyEnd(keys, from) - s0;
    let common = length0;
    let sameLength = true;
    for (let i = from + 1; i < to; i++) {
      const s = keyStart(keys, i);
      const length = keyEnd(keys, i) - s;
      if (length !== length0) sameLength = false;
      const limit = Math.min(common, length);
      let j = depth;
      while (j < limit && body[s + j] === body[s0 + j]) j++;
      common = j;
    }
    if (common === length0 && sameLength) continue; // all equal: source order stands
    depth = common;
    // The next 4 bytes (0 past a key's end, so a prefix sorts first), then the member's number.
    for (let i = from; i < to; i++) {
      const s = keyStart(keys, i);
      const length = keyEnd(keys, i) - s;
      let packed = 0;
      for (let k = depth; k < depth + 4; k++)
        packed = packed * 257 + (k < length ? (RANK[body[s + k] as number] as number) + 1 : 0);
      values[i] = packed * SCALE + (order[i] as number);
    }
    values.subarray(from, to).sort();
    let run = from;
    for (let i = from; i <= to; i++) {
      if (i < to) order[i] = (values[i] as number) % SCALE;
      if (i < to && Math.floor((values[i] as number) / SCALE) === Math.floor((values[run] as number) / SCALE)) continue;
      // A run of keys equal in these 4 bytes: sorted further, unless they all ended (then they are equal).
      if (i - run > 1 && keyEnd(keys, run) - keyStart(keys, run) >= depth + 4) groups.push(run, i, depth + 4);
      run = i;
    }
  }
}

/** True when `b[x, x + length)` and `b[y, y + length)` hold the same bytes (`view` is `b` as words). */
function sameBytes(b: Uint8Array, view: DataView, x: number, y: number, length: number): boolean {
  let k = 0;
  for (; k + 4 <= length; k += 4) if (view.getInt32(x + k, true) !== view.getInt32(y + k, true)) return false;
  for (; k < length; k++) if (b[x + k] !== b[y + k]) return false;
  return true;
}

/**
 * The keys and the order of the last object of more than two members sorted. An array of records repeats one
 * shape: each record after the first takes the order by comparing its keys with these, a word at a time.
 */
export class LastShape {
  #keys = new Int32Array(0); // (start, end) in the body, per member
  #order = new Int32Array(0);
  #count = 0;
  #kept = 0;

  /**
   * When the members `base` to `base + count` have this shape's keys, byte for byte and in order: its order in
   * `order` and how many it keeps. Otherwise -1.
   */
  reuse(
    body: Uint8Array,
    words: DataView,
    members: Int32Array,
    base: number,
    count: number,
    order: Int32Array,
  ): number {
    if (count !== this.#count) return -1;
    for (let i = 0; i < count; i++) {
      const start = members[(base + i) * MEMBER + KEY_START] as number;
      const length = (members[(base + i) * MEMBER + KEY_END] as number) - start;
      const kept = this.#keys[2 * i] as number;
      if ((this.#keys[2 * i + 1] as number) - kept !== length) return -1;
      if (!sameBytes(body, words, start, kept, length)) return -1;
    }
    order.set(this.#order.subarray(0, this.#kept));
    return this.#kept;
  }

  keep(members: Int32Array, base: number, count: number, order: Int32Array, kept: number): void {
    if (this.#keys.length < 2 * count) {
      this.#keys = new Int32Array(2 * count);
      this.#order = new Int32Array(count);
    }
    for (let i = 0; i < count; i++) {
      this.#keys[2 * i] = members[(base + i) * MEMBER + KEY_START] as number;
      this.#keys[2 * i + 1] = members[(base + i) * MEMBER + KEY_END] as number;
    }
    this.#order.set(order.subarray(0, kept));
    this.#count = count;
    this.#kept = kept;
  }
}
