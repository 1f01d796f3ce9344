/**
 * @module `idem/stores/memory` — a store in one process's memory. A store of its own (tests, single-process
 * tools), not a stand-in for the others: it shares nothing across processes and loses everything on exit.
 */
import type { IdempotencyStore } from '../contract.js';
import type { MemoryStoreOptions } from './memory-options.js';
import { MemoryStoreImpl } from './memory-store.js';

export type * from './memory-options.js';

/**
 * Creates an in-memory store. `effects` passed to `complete` receive `undefined` and run before the record is
 * updated; if they throw, the record is left as it was. A claim of a new key beyond `maxRecords`, or beyond
 * `maxRecordsPerScope` in its scope, is refused with an error (the engine answers `STORE_UNAVAILABLE`); claims
 * of keys already held, and every other call, still work.
 *
 * @example
 * const engine = createEngine({ store: memoryStore({ maxRecords: 100_000 }) })
 */
export function memoryStore(options: MemoryStoreOptions = {}): IdempotencyStore<undefined> {
  return new MemoryStoreImpl(options);
}
