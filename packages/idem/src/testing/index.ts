/**
 * @module `idem/testing` — the store conformance suite. Every store in this package passes it against its real
 * backend; a third-party store calls {@link describeStoreConformance} from its own Vitest file.
 *
 * The cases, one file per concern, are in store-cases/; the adapter suite is in adapter.ts.
 */
import { describe } from 'vitest';
import type { IdempotencyStore } from '../core/record.js';
import { budgetCase } from './store-cases/budget.js';
import { claimCases } from './store-cases/claim.js';
import { claimabilityCases } from './store-cases/claimability.js';
import { fencingCases } from './store-cases/fencing.js';
import { storeKit } from './store-cases/kit.js';
import { renewCases } from './store-cases/renew.js';
import { responseSizeCase } from './store-cases/response-size.js';
import { sweepListCases } from './store-cases/sweep-list.js';
import { takeoverCases } from './store-cases/takeover.js';

export interface ConformanceOptions<Tx> {
  /** Shown in the test names. */
  readonly name: string;
  /**
   * A new, empty store isolated from every other one (its own table, prefix or schema): the sweep and list
   * cases count exact numbers of records.
   */
  readonly create: () => Promise<IdempotencyStore<Tx>>;
  /** Extra round trips a claim may take under contention (Postgres's READ COMMITTED re-read). Default 0. */
  readonly contendedClaimExtraTrips?: number;
  /**
   * Round trips a refused claim takes to return the existing record. 1 where the engine returns it with the
   * failed write (docs/DESIGN.md: Round-trip budget); 2 only for an engine that cannot (dynalite ignores ALL_OLD). Default 1.
   */
  readonly refusedClaimTrips?: number;
}

/**
 * Registers the conformance cases for one store.
 *
 * @example
 * describeStoreConformance({ name: 'memory', create: async () => memoryStore() })
 */
export function describeStoreConformance<Tx>(options: ConformanceOptions<Tx>): void {
  describe(`store conformance: ${options.name}`, () => {
    const kit = storeKit(options);
    claimCases(kit);
    fencingCases(kit);
    renewCases(kit);
    claimabilityCases(kit);
    takeoverCases(kit);
    responseSizeCase(kit);
    sweepListCases(kit);
    budgetCase(kit);
  });
}
export * from './adapter.js';
