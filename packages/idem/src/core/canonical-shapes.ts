/**
 * @module The orders of objects sorted earlier in one canonicalisation (src/core/canonical-objects.ts), by their
 * keys: an array of records repeats a few shapes, and a record of a shape seen takes its order by comparing its keys
 * with those kept, a word at a time, rather than sorting them again. JSON.parse keeps the shapes it meets too (the
 * runtime's hidden classes): an array of up to a thousand shapes repeated costs it no more than one shape.
 */
import * as keyOrder from './key-order.js';

/**
 * The member table's fields (key-order.ts) as this module's own constants, which the runtime folds into its code
 * (an imported one is loaded at each use: 6% of the instructions for 1 MiB of records).
 */
const { KEY_END, KEY_START, MEMBER } = keyOrder;

/** The hashes' seed, drawn once per process. */
const SEED = (Math.random() * 0x1_0000_0000) | 0;
/** Shapes kept at once: an object finds its shape in the slot its keys hash to, where a newer one replaces it. */
const SLOTS = 2048;
/** {@link Shapes} `lookup`: the slot holds another shape of the same hash. */
const OTHER_KEYS = -2;

/**
 * The shapes kept, one after another: per shape its hash, member count, how many it keeps, then (start, end) of
 * each key in the body and the order kept. Kept between calls (each starts it again), up to `KEEP_POOL` numbers.
 */
const KEEP_POOL = 1 << 18;
let keptPool = new Int32Array(16_384);

/**
 * Per slot, the call that kept its shape (`generation`) and where the shape is in the pool: kept between calls, so
 * that a call need not clear them (a slot of another call is empty).
 */
const slots = new Int32Array(2 * SLOTS);
let generation = 0;

export class Shapes {
  readonly #generation: number;
  #pool = keptPool;
  #used = 0;
  /** The hash of the object last looked up (`find`), for `keep`. */
  #hash = 0;
  /** Where the shape last found or kept is in the pool (-1: none yet). */
  #last = -1;

  constructor() {
    generation = (generation + 1) | 0;
    if (generation === 0) {
      slots.fill(0);
      generation = 1;
    }
    this.#generation = generation;
  }

  /**
   * When members `base` to `base + count` have the keys of a shape kept, byte for byte and in order: its order in
   * `order`, and how many it keeps. Otherwise -1.
   *
   * @example
   * shapes.find(words, members, base, count, order) // → -1, or 3 with order [2, 0, 1]
   */
  find(words: DataView, members: Int32Array, base: number, count: number, order: Int32Array): number {
    // The shape last found or kept first (an array of one shape needs no hash), then the one in the keys' slot.
    if (this.#last >= 0 && this.#matches(this.#last, words, members, base, count))
      return this.#orderOf(this.#last, order);
    const kept = this.#lookup(hashOf(words, members, base, count, false), words, members, base, count, order);
    if (kept !== OTHER_KEYS) return kept;
    // Keys alike in all the bytes hashed but for the middle of a long one: hashed whole, into another slot.
    return Math.max(-1, this.#lookup(hashOf(words, members, base, count, true), words, members, base, count, order));
  }

  /** The order of the shape in `hash`'s slot (noting `hash` for `keep`): -1 none, OTHER_KEYS another shape's. */
  #lookup(hash: number, words: DataView, members: Int32Array, base: number, count: number, order: Int32Array): number {
    this.#hash = hash;
    const slot = 2 * ((hash ^ (hash >>> 16)) & (SLOTS - 1));
    if (slots[slot] !== this.#generation) return -1;
    const at = slots[slot + 1] as number;
    if (this.#pool[at] !== hash) return -1;
    if (!this.#matches(at, words, members, base, count)) return OTHER_KEYS;
    this.#last = at;
    return this.#orderOf(at, order);
  }

  /** True when the shape at `at` in the pool has the keys of members `base` to `base + count`, byte for byte. */
  #matches(at: number, words: DataView, members: Int32Array, base: number, count: number): boolean {
    const pool = this.#pool;
    if (pool[at + 1] !== count) return false;
    for (let i = 0; i < count; i++) {
      const start = members[(base + i) * MEMBER + KEY_START] as number;
      const length = (members[(base + i) * MEMBER + KEY_END] as number) - start;
      const kept = pool[at + 3 + 2 * i] as number;
      if ((pool[at + 4 + 2 * i] as number) - kept !== length || !sameBytes(words, start, kept, length)) return false;
    }
    return true;
  }

  /** The order of the shape at `at` in the pool, copied to `order`; returns how many it keeps. */
  #orderOf(at: number, order: Int32Array): number {
    const pool = this.#pool;
    const kept = pool[at + 2] as number;
    const from = at + 3 + 2 * (pool[at + 1] as number);
    for (let i = 0; i < kept; i++) order[i] = pool[from + i] as number;
    return kept;
  }

  /** Keeps the keys of members `base` to `base + count` (last looked up with `find`) and their order `order[0, kept)`. */
  keep(members: Int32Array, base: number, count: number, order: Int32Array, kept: number): void {
    const size = 3 + 2 * count + kept;
    if (this.#used + size > this.#pool.length) {
      const grown = new Int32Array(Math.max(2 * this.#pool.length, this.#used + size));
      grown.set(this.#pool.subarray(0, this.#used));
      this.#pool = grown;
      if (grown.length <= KEEP_POOL) keptPool = grown;
    }
    const pool = this.#pool;
    const at = this.#used;
    pool[at] = this.#hash;
    pool[at + 1] = count;
    pool[at + 2] = kept;
    for (let i = 0; i < count; i++) {
      pool[at + 3 + 2 * i] = members[(base + i) * MEMBER + KEY_START] as number;
      pool[at + 4 + 2 * i] = members[(base + i) * MEMBER + KEY_END] as number;
    }
    for (let i = 0; i < kept; i++) pool[at + 3 + 2 * count + i] = order[i] as number;
    const slot = 2 * ((this.#hash ^ (this.#hash >>> 16)) & (SLOTS - 1));
    slots[slot] = this.#generation;
    slots[slot + 1] = at;
    this.#last = at;
    this.#used += size;
  }
}

/**
 * A hash of the keys of members `base` to `base + count`, from this process's seed. `whole`: every byte; else of a
 * key over 64 bytes its first and last 32 only. A hash of fewer bytes (the first and last 4 of each key) let two
 * shapes differing elsewhere share a slot, so that records alternating between them, with escaped keys, were sorted
 * every time (reviews rev30, rev31: 3.2–5.2× JSON.parse). Shapes alike in the bytes hashed but for the middle of a
 * long key find each other in the slot ({@link Shapes} `find`), and are hashed whole: an object whose keys are each
 * its own (1,000 bytes each, differing at the end) is never hashed whole.
 */
function hashOf(words: DataView, members: Int32Array, base: number, count: number, whole: boolean): number {
  let hash = Math.imul(count ^ SEED ^ (whole ? 0x5bd1e995 : 0), 0x9e3779b1);
  for (let i = 0; i < count; i++) {
    const start = members[(base + i) * MEMBER + KEY_START] as number;
    const end = members[(base + i) * MEMBER + KEY_END] as number;
    hash = Math.imul(hash ^ (end - start), 0x85ebca6b);
    let k = start;
    let stop = whole || end - start <= 64 ? end : start + 32; // a long key: its first 32 bytes, then its last 32
    for (;;) {
      for (; k + 4 <= stop; k += 4) {
        hash = Math.imul(hash ^ words.getInt32(k, true), 0xcc9e2d51);
        hash ^= hash >>> 15;
      }
      // The last 1 to 3 bytes, masked (the body has room after its end: canonical-json.ts).
      if (k < stop) hash = Math.imul(hash ^ (words.getInt32(k, true) & ((1 << (8 * (stop - k))) - 1)), 0x1b873593);
      if (stop === end) break;
      k = end - 32;
      stop = end;
    }
    hash = Math.imul(hash ^ (hash >>> 13), 0xc2b2ae35);
  }
  return hash;
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
