/**
 * @module `idem/testing` — the adapter conformance suite: one HTTP contract that every framework adapter (and the
 * Web-standard layer) meets, checked over real HTTP against a real store. A third-party adapter writes an
 * {@link AdapterHarness} and calls {@link describeAdapterConformance} from its own Vitest file.
 *
 * The harness contract is in adapter-harness.ts, the node:http ↔ Web bridge in node-bridge.ts, and the cases, one
 * file per concern, in adapter-cases/.
 */
import { describe } from 'vitest';
import type { IdempotencyStore } from '../core/record.js';
import type { AdapterConformanceOptions } from './adapter-harness.js';
import { compressionCase } from './adapter-cases/compression.js';
import { suiteKit } from './adapter-cases/kit.js';
import { recordedFirstCases } from './adapter-cases/recorded-first.js';
import { refusalCases } from './adapter-cases/refusals.js';
import { replayCases } from './adapter-cases/replay.js';
import { retryCases } from './adapter-cases/retry.js';

export * from './adapter-harness.js';
export * from './node-bridge.js';

/**
 * Registers the adapter conformance cases for one adapter.
 *
 * @example
 * describeAdapterConformance({
 *   harness: expressHarness,
 *   createStore: async () => { const store = sqliteStore({ database: new Database(file), closeDatabase: true }); await store.migrate(); return store },
 *   effect: (tx, ref) => { tx.prepare('INSERT INTO ledger (ref) VALUES (?)').run(ref) },
 *   countEffects: async (ref, store) => (store.database.prepare('SELECT count(*) AS n FROM ledger WHERE ref = ?').get(ref) as { n: number }).n,
 * })
 */
export function describeAdapterConformance<Tx, S extends IdempotencyStore<Tx>>(
  options: AdapterConformanceOptions<Tx, S>,
): void {
  describe(`adapter conformance: ${options.harness.name}`, { timeout: 20_000 }, () => {
    const kit = suiteKit(options);
    replayCases(kit);
    retryCases(kit);
    recordedFirstCases(kit);
    refusalCases(kit);
    compressionCase(kit);
  });
}
