/**
 * @module `idem/stores/redis` — records in Redis, one hash per record, one Lua script per operation.
 *
 * - **Keys**: the record `IDEMPOTENCY#<scope>#<key>` is the hash `<prefix>{IDEMPOTENCY#<scope>}#<key>`, and its
 *   scope's index the sorted set `<prefix>{IDEMPOTENCY#<scope>}:claims` (member `<key>`, score `claimedAt`). The
 *   `{…}` hash tag is the scope's, so a record and its index share a Cluster slot and every script — each touching
 *   a record, its index, or both — is atomic on its own and Cluster-safe (a scope holding `}` makes Redis hash a
 *   shorter tag, the same for both keys). A scope's records therefore live on one Cluster node.
 * - **`list` reads the index**, never the keyspace: one script walks the scope's sorted set from its newest member
 *   and reads `limit` records, pruning members whose records have expired; one round trip whatever else the
 *   server holds (a second only when it has pruned 1,000 members in one go). A claim only adds its key to the
 *   index (one `ZADD`): members whose records have expired stay until `list` meets them or `sweep` prunes them,
 *   and the index, which has no expiry, goes with its last member.
 * - **Native expiry**: a claim sets the key's expiry to `ttlMs` (`PEXPIRE`, relative, so it follows the engine's
 *   `expiresAt - now` whatever Redis's own clock says); a renewal moves it to the new `expiresAt - now` the same
 *   way, never back; a completion uses `HSET`, which keeps it.
 * - **Binary bodies** are stored base64-encoded in the `responseBody` field and decoded on read: exact bytes with
 *   any driver, because no reply has to be read as a Buffer. (Costs a third more space for the body.)
 * - **Scripts** run by `EVALSHA`. {@link RedisStore.load} loads them up front (on every node of a Cluster); an
 *   `EVALSHA` that still gets `NOSCRIPT` (a restarted or failed-over server, a node added later) is retried once
 *   with `EVAL`, and both requests are counted in `roundTrips`.
 * - **`sweep` uses `SCAN`**: O(keyspace), for operators, never for hot paths; it prunes the scope indexes. On a
 *   Cluster it scans every primary (the client's `nodes('master')`).
 * - **Replication** is asynchronous: a write acknowledged by a primary that dies before its replica has it is
 *   lost at failover. `replicas` sends `WAIT` with each write script and fails the call when too few replicas
 *   have it; that narrows the window (a replica that acknowledged may still not be the one promoted), it does
 *   not make Redis a consensus store. docs/STORES.md (Redis Cluster) has the measurements.
 * - **Before this layout** records were `<prefix>{<pk>}`: this version does not see them. They expire natively
 *   within their TTL; docs/STORES.md has the upgrade path.
 */
import { fromNodeRedis } from './node-redis.js';
import type { RedisStore, RedisStoreOptions } from './redis-options.js';
import { RedisStoreImpl } from './redis-store.js';

export { fromNodeRedis };
export type * from './redis-options.js';

/**
 * Creates a Redis store. `effects` passed to `complete` are refused: Redis cannot commit them with the record.
 * Key the work's own writes on the record's `id` under a unique constraint instead (docs/DESIGN.md: The work's own writes).
 *
 * Records expire natively, so no record needs `sweep`; the scope indexes do: they hold a member per key claimed
 * until `list` or `sweep` prunes it, so run it now and then (docs/STORES.md: Redis). It costs a `SCAN` of the
 * prefix plus one call per record and per index found; it deletes the records whose `expiresAt` has passed by
 * the `now` it is given (useful when the caller's clock runs ahead of Redis's). `close` stops the store; it does
 * not quit the client you passed.
 * `onRoundTrip` sees every counted command as a {@link RedisRoundTripRequest} with the server's raw reply.
 *
 * @example
 * import { Redis } from 'ioredis'
 * const store = redisStore({ client: new Redis(process.env.REDIS_URL), prefix: 'payments:' })
 * await store.load()
 * const engine = createEngine({ store })
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  return new RedisStoreImpl(options);
}
