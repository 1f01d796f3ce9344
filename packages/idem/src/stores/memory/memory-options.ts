/** The memory store's options. */
import type { RoundTripObserver } from '../contract.js';

export interface MemoryStoreOptions extends RoundTripObserver {
  /**
   * Refuse claims of new keys beyond this many records in all (a guard against unbounded growth). A record counts
   * until `sweep` deletes it or `release` frees it, expired or not. Default 1,000,000.
   */
  readonly maxRecords?: number;
  /**
   * Refuse claims of new keys beyond this many records in one scope, so one tenant filling its share cannot
   * refuse every other tenant. Default `maxRecords / 10` (rounded up): at least ten scopes fit before `maxRecords`.
   */
  readonly maxRecordsPerScope?: number;
}
