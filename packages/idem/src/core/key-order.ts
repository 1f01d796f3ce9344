/**
 * @module The order of an object's members in canonical JSON (src/core/canonical-json.ts): by key, as JavaScript
 * compares strings (UTF-16 code units), equal keys in source order and the last of them kept. The keys are sorted
 * as bytes, never as strings: UTF-8 from the body (with `RANK`), or UTF-16 code units written big-endian for an
 * object whose keys have escapes (canonical-string.ts `utf16Key`). An object with the keys of the last one sorted
 * takes its order (`LastShape`).
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

/** Each byte its own weight: the order of UTF-16 code units written big-endian. */
export const SAME = new Uint8Array(256).map((_, byte) => byte);

/**
 * Compares `bytes[aStart, aEnd)` and `bytes[bStart, bEnd)` (`words` is `bytes` as words) in the order `rank`
 * gives, from their `depth`th byte (the bytes before it are the same in both): negative, zero or positive. Four
 * bytes at a time while they agree.
 *
 * @example
 * compareKeys(utf8('"b","a"'), words, RANK, 1, 2, 5, 6, 0) // → 1
 */
export function compareKeys(
  bytes: Uint8Array,
  words: DataView,
  rank: Uint8Array,
  aStart: number,
  aEnd: number,
  bStart: number,
  bEnd: number,
  depth: number,
): number {
  const length = Math.min(aEnd - aStart, bEnd - bStart);
  let i = depth;
  for (; i + 4 <= length; i += 4) if (words.getInt32(aStart + i, true) !== words.getInt32(bStart + i, true)) break;
  for (; i < length; i++) {
    const x = bytes[aStart + i] as number;
    const y = bytes[bStart + i] as number;
    if (x !== y) return (rank[x] as number) - (rank[y] as number);
  }
  return aEnd - aStart - (bEnd - bStart);
}

/** The keys being ordered: key `i` is `bytes[starts[i], ends[i])`, compared by `rank`. */
export interface SortKeys {
  readonly bytes: Uint8Array;
  readonly words: DataView;
  readonly rank: Uint8Array;
  readonly starts: Int32Array;
  readonly ends: Int32Array;
}

/** Groups of at most this many keys are sorted by insertion; larger ones by a three-way radix quicksort. */
const SMALL = 24;

/** The work done sorting since the last `takeSortWork`: bytes and words read, compares (for tests). */
let work = 0;

/**
 * For tests: the work done sorting keys since the last call — key bytes scanned for a shared prefix, keys packed or
 * partitioned, and compares — which no key set makes more than a few times the keys' bytes and n log n.
 *
 * @example
 * canonicalBytes(body); takeSortWork() // → 0 (no object out of order)
 */
export function takeSortWork(): number {
  const taken = work;
  work = 0;
  return taken;
}

/** Each key's next 4 bytes, packed (a larger object's are made for it). */
let keptWords = new Float64Array(4096);

/**
 * Puts the keys in order: `order[0, count)` becomes their indexes sorted, then the last of each run of equal keys
 * is kept at the start of `order`; returns how many are kept.
 *
 * Cost: one scan for the prefix all keys share, then an insertion sort of a few keys, or a multikey quicksort of
 * more (three-way partitions on 4 bytes at a time, random pivots): about n log n compares of packed words plus
 * one look at each byte that tells a key from the rest — never the quadratic work of keys that share long
 * prefixes, or of keys each a prefix of the next.
 *
 * @example
 * orderKeys(keys, 3, order) // keys 'b', 'a', 'b' → 2, order starts [1, 2]
 */
export function orderKeys(keys: SortKeys, count: number, order: Int32Array): number {
  for (let i = 0; i < count; i++) order[i] = i;
  const depth = commonPrefix(keys, order, 0, count, 0);
  if (keptWords.length < count) keptWords = new Float64Array(Math.max(count, 2 * keptWords.length));
  const words = keptWords;
  if (count <= SMALL) insertionSort(keys, order, words, 0, count, depth, false);
  else multikeySort(keys, order, words, count, depth);
  // Equal keys are next to each other, in source order: keep the last of each run. After the insertion sort,
  // `words` still holds each key's 4 bytes from `depth`: different words, different keys.
  let kept = 0;
  const { bytes, words: view, rank, starts, ends } = keys;
  for (let i = 0; i < count; i++) {
    const m = order[i] as number;
    if (i + 1 < count) {
      const next = order[i + 1] as number;
      const word = words[i] as number;
      const same =
        count <= SMALL && word !== words[i + 1]
          ? false
          : count <= SMALL && ended(word)
            ? true
            : (ends[m] as number) - (starts[m] as number) === (ends[next] as number) - (starts[next] as number) &&
              compareKeys(
                bytes,
                view,
                rank,
                starts[m] as number,
                ends[m] as number,
                starts[next] as number,
                ends[next] as number,
                depth,
              ) === 0;
      if (same) continue;
    }
    order[kept++] = m;
  }
  return kept;
}

/**
 * How many leading bytes all the keys share (`order` is 0…count-1 here): each is compared with the first, a word at
 * a time, up to the shortest common run so far — at most the keys' bytes read once.
 */
function commonPrefix(
  { bytes, words, starts, ends }: SortKeys,
  order: Int32Array,
  from: number,
  to: number,
  depth: number,
): number {
  const first = starts[order[from] as number] as number;
  let common = (ends[order[from] as number] as number) - first;
  for (let i = from + 1; i < to && common > depth; i++) {
    const m = order[i] as number;
    const start = starts[m] as number;
    const limit = Math.min(common, (ends[m] as number) - start);
    let j = depth;
    while (j + 4 <= limit && words.getInt32(start + j, true) === words.getInt32(first + j, true)) j += 4;
    while (j < limit && bytes[start + j] === bytes[first + j]) j++;
    common = j;
    work += j - depth + 1;
  }
  return Math.max(common, depth);
}

/**
 * Sorts `order[from, to)`, whose keys share their first `depth` bytes, equal keys by index (source order): by
 * insertion, on their next 4 bytes packed (`words`, filled here unless `known`), comparing further bytes only
 * when those are the same.
 */
function insertionSort(
  keys: SortKeys,
  order: Int32Array,
  words: Float64Array,
  from: number,
  to: number,
  depth: number,
  known: boolean,
): void {
  if (!known) for (let i = from; i < to; i++) words[i] = wordAt(keys, order[i] as number, depth);
  work += to - from;
  const { bytes, words: view, rank, starts, ends } = keys;
  for (let i = from + 1; i < to; i++) {
    const moving = order[i] as number;
    const word = words[i] as number;
    let j = i;
    for (; j > from; j--) {
      const other = order[j - 1] as number;
      const w = words[j - 1] as number;
      if (w < word) break;
      if (w === word) {
        // The same 4 bytes: the keys ended there (the same key) or go on.
        work++;
        const c = ended(word)
          ? 0
          : compareKeys(
              bytes,
              view,
              rank,
              starts[other] as number,
              ends[other] as number,
              starts[moving] as number,
              ends[moving] as number,
              depth + 4,
            );
        if (c < 0 || (c === 0 && other < moving)) break;
      }
      order[j] = other;
      words[j] = w;
    }
    order[j] = moving;
    words[j] = word;
  }
}

/**
 * Key `m`'s bytes `depth` to `depth + 4` (0 past its end), weighed by `rank`, as a big-endian number, times 8 plus
 * how many of the 4 it has: the order of two keys' next 4 bytes, a key that ends first coming first. A key that
 * ends within them has less than 4 (`ended`). Reads up to 4 bytes past a key (room the caller keeps).
 */
function wordAt({ words, rank, starts, ends }: SortKeys, m: number, depth: number): number {
  const start = (starts[m] as number) + depth;
  const left = (ends[m] as number) - start;
  if (left <= 0) return 0;
  let word = words.getUint32(start);
  if (left < 4) word &= -1 << (8 * (4 - left));
  // Only bytes from 0xEE up weigh other than themselves (RANK); never in UTF-16 units (SAME).
  if ((word & 0x80808080) !== 0 && rank !== SAME)
    word =
      ((rank[word >>> 24] as number) << 24) |
      ((rank[(word >>> 16) & 0xff] as number) << 16) |
      ((rank[(word >>> 8) & 0xff] as number) << 8) |
      (rank[word & 0xff] as number);
  return (word >>> 0) * 8 + Math.min(left, 4);
}

/** True when the key of this word (wordAt) ends within its 4 bytes: two such keys of the same word are the same. */
const ended = (word: number): boolean => word % 8 !== 4;

/**
 * A multikey quicksort (Bentley and Sedgewick) of `order[0, count)` from byte `depth`, on 4 bytes at a time: a
 * group is split into the keys whose next 4 bytes are below, equal to and above a random pivot's; the equal ones
 * go on 4 bytes further; small groups are sorted by insertion. A group of equal keys that ended is put in source
 * order.
 */
function multikeySort(keys: SortKeys, order: Int32Array, words: Float64Array, count: number, depth: number): void {
  // (from, to, depth, whether words[from, to) already hold the keys' words at that depth) per group left
  const groups: number[] = [0, count, depth, 0];
  while (groups.length > 0) {
    const known = groups.pop() as number;
    const at = groups.pop() as number;
    const to = groups.pop() as number;
    const from = groups.pop() as number;
    if (to - from <= SMALL) {
      insertionSort(keys, order, words, from, to, at, known === 1);
      continue;
    }
    if (known === 0) for (let i = from; i < to; i++) words[i] = wordAt(keys, order[i] as number, at);
    work += to - from;
    const pivot = words[from + Math.floor(Math.random() * (to - from))] as number;
    // Three-way partition: [from, lt) below, [lt, i) equal, [gt, to) above.
    let lt = from;
    let gt = to;
    for (let i = from; i < gt;) {
      const w = words[i] as number;
      if (w < pivot) {
        swap(order, words, lt++, i++);
      } else if (w > pivot) {
        swap(order, words, i, --gt);
      } else {
        i++;
      }
    }
    if (lt - from > 1) groups.push(from, lt, at, 1);
    if (to - gt > 1) groups.push(gt, to, at, 1);
    if (gt - lt > 1) {
      // Keys that end within these 4 bytes, all the same.
      if (ended(pivot)) order.subarray(lt, gt).sort();
      else groups.push(lt, gt, at + 4, 0);
    }
  }
}

function swap(order: Int32Array, words: Float64Array, i: number, j: number): void {
  const m = order[i] as number;
  order[i] = order[j] as number;
  order[j] = m;
  const w = words[i] as number;
  words[i] = words[j] as number;
  words[j] = w;
}

/**
 * True when `x` and `y` start the same `length` bytes of `view`, a word at a time; the last word is masked, so up to 3
 * bytes past either may be read (the body has room after its end: canonical-json.ts).
 */
function sameBytes(view: DataView, x: number, y: number, length: number): boolean {
  let k = 0;
  for (; k + 4 <= length; k += 4) if (view.getInt32(x + k, true) !== view.getInt32(y + k, true)) return false;
  if (k === length) return true;
  const mask = (1 << (8 * (length - k))) - 1;
  return ((view.getInt32(x + k, true) ^ view.getInt32(y + k, true)) & mask) === 0;
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
  reuse(words: DataView, members: Int32Array, base: number, count: number, order: Int32Array): number {
    if (count !== this.#count) return -1;
    for (let i = 0; i < count; i++) {
      const start = members[(base + i) * MEMBER + KEY_START] as number;
      const length = (members[(base + i) * MEMBER + KEY_END] as number) - start;
      const kept = this.#keys[2 * i] as number;
      if ((this.#keys[2 * i + 1] as number) - kept !== length) return -1;
      if (!sameBytes(words, start, kept, length)) return -1;
    }
    for (let i = 0; i < this.#kept; i++) order[i] = this.#order[i] as number;
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
    for (let i = 0; i < kept; i++) this.#order[i] = order[i] as number;
    this.#count = count;
    this.#kept = kept;
  }
}
