/**
 * @module The keys of an object to sort (src/core/canonical-json.ts), for key-order.ts: read where they are, the
 * body's UTF-8 bytes, through the member table; or, when any key has escapes, every key written again as UTF-16
 * code units (canonical-string.ts `utf16Key`) — so a key with escapes is never turned into a string to be compared.
 */
import { orderKeys, RANK, SAME } from './key-order.js';
import * as keyOrder from './key-order.js';
import { utf16Key } from './canonical-string.js';

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
  let room = 4; // key-order.ts reads a word past a key
  for (let i = 0; i < count; i++)
    room +=
      2 * ((members[(base + i) * MEMBER + KEY_END] as number) - (members[(base + i) * MEMBER + KEY_START] as number));
  if (keptUnits.length < room) {
    keptUnits = new Uint8Array(Math.max(room, 2 * keptUnits.length));
    keptUnitWords = new DataView(keptUnits.buffer);
  }
  const pairs = keptPairs;
  let at = 0;
  for (let i = 0; i < count; i++) {
    const row = (base + i) * MEMBER;
    pairs[2 * i] = at;
    at = utf16Key(
      body,
      members[row + KEY_START] as number,
      members[row + KEY_END] as number,
      members[row + FLAGS] !== 0,
      keptUnits,
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
