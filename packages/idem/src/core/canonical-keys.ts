/**
 * @module The keys of an object to sort (src/core/canonical-json.ts), gathered from its rows of the member table
 * for key-order.ts: as the body's UTF-8 bytes, or, when any key has escapes, every key written again as UTF-16
 * code units (canonical-string.ts `utf16Key`) — so a key with escapes is never turned into a string to be compared.
 */
import { FLAGS, KEY_END, KEY_START, MEMBER, orderKeys, RANK, SAME } from './key-order.js';
import { utf16Key } from './canonical-string.js';

// Kept between calls while they fit (a sort runs to its end before another starts); larger ones are made for it.
let keptStarts = new Int32Array(4096);
let keptEnds = new Int32Array(4096);
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
  if (keptStarts.length < count) {
    keptStarts = new Int32Array(Math.max(count, 2 * keptStarts.length));
    keptEnds = new Int32Array(keptStarts.length);
  }
  const starts = keptStarts;
  const ends = keptEnds;
  if (!escaped) {
    for (let i = 0; i < count; i++) {
      starts[i] = members[(base + i) * MEMBER + KEY_START] as number;
      ends[i] = members[(base + i) * MEMBER + KEY_END] as number;
    }
    return orderKeys({ bytes: body, words, rank: RANK, starts, ends }, count, order);
  }
  let room = 4; // key-order.ts reads a word past a key
  for (let i = 0; i < count; i++)
    room +=
      2 * ((members[(base + i) * MEMBER + KEY_END] as number) - (members[(base + i) * MEMBER + KEY_START] as number));
  if (keptUnits.length < room) {
    keptUnits = new Uint8Array(Math.max(room, 2 * keptUnits.length));
    keptUnitWords = new DataView(keptUnits.buffer);
  }
  let at = 0;
  for (let i = 0; i < count; i++) {
    const row = (base + i) * MEMBER;
    starts[i] = at;
    at = utf16Key(
      body,
      members[row + KEY_START] as number,
      members[row + KEY_END] as number,
      members[row + FLAGS] !== 0,
      keptUnits,
      at,
    );
    ends[i] = at;
  }
  return orderKeys({ bytes: keptUnits, words: keptUnitWords, rank: SAME, starts, ends }, count, order);
}
