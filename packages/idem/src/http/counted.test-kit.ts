/**
 * @module For the time tests of the Web layer and the adapters (not part of the library): a promise resolved from
 * outside, and work that counts its runs, the most that ran at once, and what each saw of `reclaimed`.
 */

/** A promise and its resolve, to order a test's events by signals rather than by sleeping. */
export function signal<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * The work of a charge: counted, and the first run held until `hold` settles (a promise that never settles holds it
 * for good). `started` resolves when the first run has begun.
 *
 * @example
 * const { seen, started, run } = countedWork(release.promise)
 */
export function countedWork(hold: Promise<void>) {
  const seen = { runs: 0, running: 0, most: 0, reclaimed: [] as boolean[] };
  const started = signal();
  const run = async (reclaimed: boolean): Promise<{ id: string }> => {
    const n = ++seen.runs;
    seen.running++;
    seen.most = Math.max(seen.most, seen.running);
    seen.reclaimed.push(reclaimed);
    started.resolve();
    try {
      if (n === 1) await hold;
    } finally {
      seen.running--;
    }
    return { id: `ch_${n}` };
  };
  return { seen, started: started.promise, run };
}
