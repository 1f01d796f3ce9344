/**
 * @module The order of an object's members in canonical JSON (src/core/canonical-json.ts): by key, as JavaScript
 * compares strings (UTF-16 code units), equal keys in source order and the last of them kept. The keys are sorted
 * as bytes, never as strings: UTF-8 from the body (with `RANK`), or for an object whose keys have escapes each UTF-16
 * code unit as UTF-8 writes a code point of its value (canonical-string.ts `unitKey`). An object with the keys of one
 * sorted before takes its order (canonical-shapes.ts).
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

/** Each byte its own weight: the order of UTF-16 code units each written as UTF-8 (canonical-string.ts `unitKey`). */
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

/**
 * The keys being ordered, compared by `rank`: key `i` is `bytes[start, end)` where `start` and `end` are
 * `table[(base + i) * stride]` and the number after it (the member table's KEY_START and KEY_END, or pairs).
 */
export interface SortKeys {
  readonly bytes: Uint8Array;
  readonly words: DataView;
  readonly rank: Uint8Array;
  readonly table: Int32Array;
  readonly base: number;
  readonly stride: number;
}

/** Groups of at most this many keys are sorted by insertion (sortFew); larger ones by a multikey quicksort. */
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

/** The groups multikeySort has left to sort (empty between calls). */
const keptGroups: number[] = [];

/** Each key's next 4 bytes, packed (a larger object's are made for it). */
let keptWords = new Float64Array(4096);
const KEEP_WORDS = 65_536;

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
  let words = keptWords;
  if (words.length < count) {
    words = new Float64Array(Math.max(count, 2 * words.length));
    if (words.length <= KEEP_WORDS) keptWords = words;
  }
  // A few keys start from their first bytes (the bytes all share are then passed 4 at a time); more, past them.
  multikeySort(keys, order, words, count, count <= SMALL ? 0 : commonPrefix(keys, order, 0, count, 0));
  // Equal keys are next to each other, in source order, all but the last marked by the sort: keep the last.
  let kept = 0;
  for (let i = 0; i < count; i++) {
    const m = order[i] as number;
    if (m >= 0) order[kept++] = m;
  }
  return kept;
}

/**
 * How many leading bytes all the keys share (`order` is 0…count-1 here): each is compared with the first, a word at
 * a time, up to the shortest common run so far — at most the keys' bytes read once.
 */
function commonPrefix(
  { bytes, words, table, base, stride }: SortKeys,
  order: Int32Array,
  from: number,
  to: number,
  depth: number,
): number {
  const first = table[(base + (order[from] as number)) * stride] as number;
  let common = (table[(base + (order[from] as number)) * stride + 1] as number) - first;
  for (let i = from + 1; i < to && common > depth; i++) {
    const m = order[i] as number;
    const start = table[(base + m) * stride] as number;
    const limit = Math.min(common, (table[(base + m) * stride + 1] as number) - start);
    let j = depth;
    while (j + 4 <= limit && words.getInt32(start + j, true) === words.getInt32(first + j, true)) j += 4;
    while (j < limit && bytes[start + j] === bytes[first + j]) j++;
    common = j;
    work += j - depth + 1;
  }
  return Math.max(common, depth);
}

/**
 * Past `depth`, how far the keys `order[from, to)` share whole words: compared 4 bytes at a time, all keys at each
 * offset before the next, so a key is read no further than the first offset where any differs or ends.
 */
function sharedWords(
  { words, table, base, stride }: SortKeys,
  order: Int32Array,
  from: number,
  to: number,
  depth: number,
): number {
  const first = table[(base + (order[from] as number)) * stride] as number;
  const length = (table[(base + (order[from] as number)) * stride + 1] as number) - first;
  for (let k = depth; ; k += 4) {
    if (k + 4 > length) return k;
    const word = words.getInt32(first + k, true);
    for (let i = from + 1; i < to; i++) {
      const m = order[i] as number;
      const start = table[(base + m) * stride] as number;
      work++;
      if ((table[(base + m) * stride + 1] as number) - start < k + 4 || words.getInt32(start + k, true) !== word)
        return k;
    }
  }
}

/** The members of the group sortFew sorts, in their order before (its words carry their place in it). */
const held = new Int32Array(SMALL);

/**
 * Sorts `order[from, to)`, at most SMALL keys sharing their first `depth` bytes, on their next 4 bytes (`words`,
 * filled here unless `known`): by insertion, each word packed with the key's place so that one number moves per
 * step. A run of keys whose words tie goes on to `groups`, 4 bytes further; one whose keys end there is a run of
 * the same key, put in source order.
 */
function sortFew(
  keys: SortKeys,
  order: Int32Array,
  words: Float64Array,
  from: number,
  to: number,
  depth: number,
  known: boolean,
  groups: number[],
): void {
  if (!known) depth = sharedWords(keys, order, from, to, depth);
  for (let i = from; i < to; i++) {
    held[i - from] = order[i] as number;
    words[i] = (known ? (words[i] as number) : wordAt(keys, order[i] as number, depth)) * 32 + (i - from);
  }
  for (let i = from + 1; i < to; i++) {
    const moving = words[i] as number;
    let j = i;
    for (; j > from; j--) {
      const w = words[j - 1] as number;
      if (w < moving) break;
      words[j] = w;
    }
    words[j] = moving;
    work += i - j + 1;
  }
  let run = from;
  for (let i = from; i < to; i++) {
    const packed = words[i] as number;
    const place = packed % 32;
    order[i] = held[place] as number;
    words[i] = (packed - place) / 32;
    if (words[i] !== words[run]) {
      endRun(order, words, run, i, depth, groups);
      run = i;
    }
  }
  endRun(order, words, run, to, depth, groups);
}

/** A run `[from, to)` of keys whose words at `depth` tie (sortFew). */
function endRun(
  order: Int32Array,
  words: Float64Array,
  from: number,
  to: number,
  depth: number,
  groups: number[],
): void {
  if (to - from < 2) return;
  if (!ended(words[from] as number)) {
    groups.push(from, to, depth + 4, 0);
    return;
  }
  for (let i = from + 1; i < to; i++) {
    const moving = order[i] as number;
    let j = i;
    for (; j > from && (order[j - 1] as number) > moving; j--) order[j] = order[j - 1] as number;
    order[j] = moving;
  }
  markSame(order, from, to);
}

/** Marks `order[from, to)`, one key in source order, as such: each but the last as its complement (negative). */
function markSame(order: Int32Array, from: number, to: number): void {
  for (let i = from; i < to - 1; i++) order[i] = ~(order[i] as number);
}

/**
 * Key `m`'s bytes `depth` to `depth + 4` (0 past its end), weighed by `rank`, as a big-endian number, times 8 plus
 * how many of the 4 it has: the order of two keys' next 4 bytes, a key that ends first coming first. A key that
 * ends within them has less than 4 (`ended`). Reads up to 4 bytes past a key (room the caller keeps).
 */
function wordAt({ words, rank, table, base, stride }: SortKeys, m: number, depth: number): number {
  const start = (table[(base + m) * stride] as number) + depth;
  const left = (table[(base + m) * stride + 1] as number) - start;
  if (left <= 0) return 0;
  let word = words.getUint32(start);
  if (left < 4) word &= -1 << (8 * (4 - left));
  // Only bytes from 0xEE up weigh other than themselves (RANK); never in `unitKey`'s form (SAME).
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
  const groups = keptGroups;
  groups.push(0, count, depth, 0);
  while (groups.length > 0) {
    const known = groups.pop() as number;
    let at = groups.pop() as number;
    const to = groups.pop() as number;
    const from = groups.pop() as number;
    if (to - from <= SMALL) {
      sortFew(keys, order, words, from, to, at, known === 1, groups);
      continue;
    }
    if (known === 0) {
      at = sharedWords(keys, order, from, to, at);
      for (let i = from; i < to; i++) words[i] = wordAt(keys, order[i] as number, at);
    }
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
      if (ended(pivot)) {
        order.subarray(lt, gt).sort();
        markSame(order, lt, gt);
      } else {
        groups.push(lt, gt, at + 4, 0);
      }
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
