/**
 * @module A small seeded PRNG (sfc32, seeded through splitmix32). The simulator draws every decision from one of
 * these, never from `Math.random`, so a seed replays exactly.
 */

/**
 * A seeded stream of numbers. `stream` separates independent concerns of one seed (the scenario, the
 * scheduler's picks, the faults, the ids) so that changing how often one is drawn leaves the others alone.
 *
 * @example
 * const rng = new Rng(42, 'faults')
 * if (rng.chance(0.1)) crash()
 */
export class Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number, stream = '') {
    let state = (Math.floor(seed) >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32) >>> 0, 0x85ebca6b);
    for (let i = 0; i < stream.length; i++) state = Math.imul(state ^ stream.charCodeAt(i), 0x01000193) >>> 0;
    const splitmix = (): number => {
      state = (state + 0x9e3779b9) >>> 0;
      let z = state;
      z = Math.imul(z ^ (z >>> 16), 0x21f0aaad);
      z = Math.imul(z ^ (z >>> 15), 0x735a2d97);
      return (z ^ (z >>> 15)) >>> 0;
    };
    this.#a = splitmix();
    this.#b = splitmix();
    this.#c = splitmix();
    this.#d = splitmix();
    for (let i = 0; i < 12; i++) this.next();
  }

  /** A float in [0, 1). */
  next(): number {
    const t = (((this.#a + this.#b) >>> 0) + this.#d) >>> 0;
    this.#d = (this.#d + 1) >>> 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) >>> 0;
    this.#c = ((this.#c << 21) | (this.#c >>> 11)) >>> 0;
    this.#c = (this.#c + t) >>> 0;
    return t / 2 ** 32;
  }

  /** An integer in [lo, hi], both included. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('Rng.pick: no items');
    return items[this.int(0, items.length - 1)] as T;
  }

  /** `digits` lower-case hex digits. */
  hex(digits: number): string {
    let out = '';
    while (out.length < digits)
      out += Math.floor(this.next() * 2 ** 32)
        .toString(16)
        .padStart(8, '0');
    return out.slice(0, digits);
  }
}
