/**
 * @module `idem/durable-objects` — records in Cloudflare Durable Objects: a SQLite-backed object per scope (or per
 * shard of a scope) holds them, decides each claim alone (it runs one event at a time), and deletes them with an
 * alarm once they expire. The store calls the object by `fetch` from your Worker. Workers KV cannot hold a claim:
 * it is eventually consistent, so two requests can both read "no record" (docs/STORES.md).
 */
import type { DurableObjectsStore, DurableObjectsStoreOptions } from './durable-objects-options.js';
import { DurableObjectsStoreImpl, MAX_RESPONSE_BYTES } from './durable-objects-store.js';
import { IdempotencyDurableObject } from './idempotency-object.js';

export { IdempotencyDurableObject, MAX_RESPONSE_BYTES };
export type * from './durable-objects-options.js';

/**
 * Creates the store over a namespace bound to {@link IdempotencyDurableObject}. Round trips: each call is one
 * `fetch` to one object (claim, complete, renew, release, get: 1; list: 1 per shard; sweep: 1 per batch per
 * object this store has called). No `effects` and no `runLocal`: the work's writes go elsewhere, keyed by the
 * record's `id` (docs/STORES.md). Nothing to migrate: each object creates its table as it starts.
 *
 * @example
 * import { idempotency } from 'idem/http'
 * import { durableObjectsStore } from 'idem/durable-objects'
 * export { IdempotencyDurableObject } from 'idem/durable-objects'
 *
 * export default {
 *   fetch(request: Request, env: { IDEM: DurableObjectNamespace }) {
 *     const store = durableObjectsStore({ namespace: env.IDEM })
 *     return idempotency({ store, scope: 'acct_1' })(charge)(request)
 *   },
 * }
 */
export function durableObjectsStore(options: DurableObjectsStoreOptions): DurableObjectsStore {
  return new DurableObjectsStoreImpl(options);
}
