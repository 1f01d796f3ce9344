/**
 * @module The keys of an object to sort (src/core/canonical-json.ts), for key-order.ts: read where they are, the
 * body's UTF-8 bytes, through the member table; or, when any key has escapes, every key past the bytes all share
 * (sharedStart) written again, each UTF-16 code unit as UTF-8 writes a code point of its value (canonical-string.ts
 * `unitKey`) — so a key with escapes is never turned into a string to be compared, and a prefix that every key
 * repeats is read once per object, not decoded once per key.
 */
import { orderKeys, RANK, SAME } from './key-order.js';
import * as keyOrder from './key-order.js';
import { unitKey } from './canonical-string.js';

/**
 * The member table's fields (key-order.ts) as this module's own constants, which the runtime folds into its code
 * (an imported one is loaded at each use: 6% of the instructions for 1 MiB of records).
 */
const { FLAGS, KEY_END, KEY_START, MEMBER } = keyOrder;

// Kept between calls while they fit (a sort runs to its end before another starts); larger ones are made for it.
let keptPairs = new Int32Array(2 * 1024);
let keptUnits = new Uint8Array(16_384);
let keptUnitWords = new DataView(keptUnits.buffer);

/**
 * Sorts the keys of members `base` to `base + count` (`order` as key-order.ts `orderKeys` leaves it); `escaped`:
 * some key has escapes. Returns how many members are kept.
 *
 * @example
 * sortKeys(body, words, members, base, 3, false, order) // keys 'b', 'a', 'b' → 2, order starts [1, 2]
 */
export function sortKeys(
  body: Uint8Array,
  words: DataView,
  members: Int32Array,
  base: number,
  count: number,
  escaped: boolean,
  order: Int32Array,
): number {
  if (!escaped)
    return orderKeys({ bytes: body, words, rank: RANK, table: members, base, stride: MEMBER }, count, order);
  if (keptPairs.length < 2 * count) keptPairs = new Int32Array(Math.max(2 * count, 2 * keptPairs.length));
  let room = 4; // key-order.ts reads a word past a key; unitKey writes at most 1.5 bytes a byte (and 2 past a bad end)
  for (let i = 0; i < count; i++)
    room +=
      2 * ((members[(base + i) * MEMBER + KEY_END] as number) - (members[(base + i) * MEMBER + KEY_START] as number));
  if (keptUnits.length < room) {
    keptUnits = new Uint8Array(Math.max(room, 2 * keptUnits.length));
    keptUnitWords = new DataView(keptUnits.buffer);
  }
  const pairs = keptPairs;
  // The bytes all the keys start with decode the same in all: only what follows them is written and sorted.
  const skip = sharedStart(body, words, members, base, count);
  let at = 0;
  for (let i = 0; i < count; i++) {
    const row = (base + i) * MEMBER;
    pairs[2 * i] = at;
    at = unitKey(
      body,
      words,
      (members[row + KEY_START] as number) + skip,
      members[row + KEY_END] as number,
      members[row + FLAGS] !== 0,
      keptUnits,
      keptUnitWords,
      at,
    );
    pairs[2 * i + 1] = at;
  }
  return orderKeys(
    { bytes: keptUnits, words: keptUnitWords, rank: SAME, table: pairs, base: 0, stride: 2 },
    count,
    order,
  );
}

/**
 * How many leading bytes of the keys of members `base` to `base + count` decode to the same UTF-16 code units in
 * all: the bytes they share, cut back to where a character or an escape starts in the first key — and so in all,
 * the same bytes before it being read the same way (as unitKey reads them: an escape, or a UTF-8 lead byte and
 * those it implies). Each key's shared bytes are read once, 4 at a time where they are ASCII without a backslash.
 * For keys `\u0061xa` and `\u0061xb`: 7 (`\u0061x`); for `\u0061` and `\u0062`: 0 (not within `\u006`).
 */
function sharedStart(body: Uint8Array, words: DataView, members: Int32Array, base: number, count: number): number {
  const first = members[base * MEMBER + KEY_START] as number;
  let common = (members[base * MEMBER + KEY_END] as number) - first;
  for (let i = 1; i < count && common > 0; i++) {
    const start = members[(base + i) * MEMBER + KEY_START] as number;
    const limit = Math.min(common, (members[(base + i) * MEMBER + KEY_END] as number) - start);
    let j = 0;
    while (j + 4 <= limit && words.getInt32(start + j, true) === words.getInt32(first + j, true)) j += 4;
    while (j < limit && body[start + j] === body[first + j]) j++;
    common = j;
  }
  let at = 0;
  while (at < common) {
    if (at + 4 <= common) {
      const word = words.getInt32(first + at, true);
      const x = word ^ 0x5c5c5c5c; // a zero byte where a backslash is (a false one only above a true one)
      if (((word | ((x - 0x01010101) & ~x)) & 0x80808080) === 0) {
        at += 4;
        continue;
      }
    }
    const c = body[first + at] as number;
    const length =
      c === 0x5c ? (body[first + at + 1] === 0x75 ? 6 : 2) : c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (at + length > common) break;
    at += length;
  }
  return at;
}
