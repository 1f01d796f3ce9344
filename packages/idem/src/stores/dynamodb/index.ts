/**
 * @module `idem/stores/dynamodb` — records as items of a DynamoDB table, claimed with one conditional write.
 *
 * The item (docs/DESIGN.md: Record), with every attribute name configurable so it fits an existing single-table design:
 *
 * | attribute | type | value |
 * |---|---|---|
 * | `pk` | S | `IDEMPOTENCY#<scope>#<key>` (the partition key; an optional constant sort key beside it) |
 * | `scope`, `key` | S | the tenant and the Idempotency-Key |
 * | `status` | S | `in_progress`, `succeeded` or `failed` |
 * | `fingerprint`, `id`, `token` | S | as in the record |
 * | `claimedAt`, `leaseExpiresAt` | N | epoch **milliseconds** |
 * | `expiresAt` | N | epoch **seconds**, rounded up: what native TTL reads, and nothing else does |
 * | `expiresAtMs` | N | epoch milliseconds: the exact expiry the claim condition and `get` read |
 * | `retryable` | BOOL | |
 * | `resultId` | S | absent while null |
 * | `responseStatus` N, `responseHeaders` S (JSON), `responseBody` B | | absent until a response is stored |
 *
 * Why two expiry attributes: TTL needs seconds, the contract needs milliseconds, and rounding either way would move
 * expiry by up to a second. So `expiresAt` (seconds, `ceil`, so TTL never deletes a record before it has expired)
 * feeds TTL only, and the exact `expiresAtMs` decides. TTL deletion lags by hours or days; the claim treats an
 * expired item as absent, so correctness never waits for it.
 *
 * Round trips (`roundTrips` counts `send` calls; the SDK's own retries of a throttled request happen inside one):
 * new key 1 (+1 to complete), replay / conflict / mismatch 1 (the refused write returns the item, `ALL_OLD`), a
 * takeover of a dead lease or a retry of a retryable failure 2, `list` 2 (a Query of the scope index, then a
 * BatchGetItem). An engine that ignores `ALL_OLD` (dynalite) costs one more consistent `GetItem` per refused write,
 * and so does a refused release on DynamoDB (no item comes back to tell "gone" from "held by another").
 *
 * A write the SDK resent after its reply was lost, and which its own first attempt now refuses, counts as applied
 * (see `claim`): `claimed`, or `ok: true` for a completion, renewal or release it had already made.
 *
 * DynamoDB has no transaction spanning the record and the work's own database, so `complete` takes no `effects`:
 * the work carries the record's stable `id` under a unique constraint instead (docs/DESIGN.md: The work's own writes).
 */
import {
  DEFAULT_ATTRIBUTE_NAMES,
  DEFAULT_LIST_INDEX,
  DYNAMODB_MAX_RESPONSE_BYTES,
  type CreateTableOptions,
  type CreateTableResult,
  type DynamoDBAttributeNames,
  type DynamoDBClientLike,
  type DynamoDBStore,
  type DynamoDBStoreOptions,
} from './dynamodb-options.js';
import { DynamoDBStoreImpl } from './dynamodb-store.js';

export { DEFAULT_ATTRIBUTE_NAMES, DEFAULT_LIST_INDEX, DYNAMODB_MAX_RESPONSE_BYTES };
export type {
  CreateTableOptions,
  CreateTableResult,
  DynamoDBAttributeNames,
  DynamoDBClientLike,
  DynamoDBStore,
  DynamoDBStoreOptions,
};

/**
 * Creates a DynamoDB store on an existing table (see {@link DynamoDBStore.createTable}).
 *
 * @example
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb'
 * const store = dynamodbStore({ client: new DynamoDBClient({}), table: 'app', attributes: { pk: 'PK' } })
 * const engine = createEngine({ store })
 */
export function dynamodbStore(options: DynamoDBStoreOptions): DynamoDBStore {
  return new DynamoDBStoreImpl(options);
}
