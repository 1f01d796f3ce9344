/**
 * @module One signal for several, that keeps them alive: `AbortSignal.any` holds its sources weakly (Node 20), so
 * a timeout signal nothing else holds (`AbortSignal.any([signal, AbortSignal.timeout(ms)])`) can be collected by
 * the garbage collector before it fires, and the timeout never comes: a request waits for ever.
 */

/** Each combined signal → its sources: held as long as the combined signal is (a WeakMap holds a value so). */
const SOURCES = new WeakMap<AbortSignal, readonly AbortSignal[]>();

/**
 * `AbortSignal.any(signals)`, with its sources held for as long as the combined signal lives: whoever waits on it
 * (fetch, while the request and its body are read) keeps them, and so their timers' targets, from being collected.
 *
 * @example
 * const signal = anySignal([abort.signal, AbortSignal.timeout(30_000)]) // fires at 30 s, whatever the GC does
 */
export function anySignal(signals: readonly AbortSignal[]): AbortSignal {
  const combined = AbortSignal.any([...signals]);
  SOURCES.set(combined, signals);
  return combined;
}
