/**
 * The DynamoDB store's public shapes: the client subset it sends commands through, the item's attribute names,
 * the factory's options, the store's interface, and the response limit the item size sets.
 */
import type {
  BatchGetItemCommand,
  BatchGetItemCommandOutput,
  CreateTableCommand,
  CreateTableCommandOutput,
  DeleteItemCommand,
  DeleteItemCommandOutput,
  DescribeTableCommand,
  DescribeTableCommandOutput,
  DescribeTimeToLiveCommand,
  DescribeTimeToLiveCommandOutput,
  GetItemCommand,
  GetItemCommandOutput,
  PutItemCommand,
  PutItemCommandOutput,
  QueryCommand,
  QueryCommandOutput,
  ScanCommand,
  ScanCommandOutput,
  UpdateItemCommand,
  UpdateItemCommandOutput,
  UpdateTimeToLiveCommand,
  UpdateTimeToLiveCommandOutput,
} from '@aws-sdk/client-dynamodb';
import type { IdempotencyStore, RoundTripObserver } from '../contract.js';

/**
 * The subset of `DynamoDBClient` the store uses: `send` with these commands. Pass your own client (its region,
 * credentials, retry policy); the store never destroys it.
 *
 * @example
 * const client: DynamoDBClientLike = new DynamoDBClient({ region: 'eu-west-1' })
 */
export interface DynamoDBClientLike {
  send(command: PutItemCommand): Promise<PutItemCommandOutput>;
  send(command: UpdateItemCommand): Promise<UpdateItemCommandOutput>;
  send(command: GetItemCommand): Promise<GetItemCommandOutput>;
  send(command: BatchGetItemCommand): Promise<BatchGetItemCommandOutput>;
  send(command: DeleteItemCommand): Promise<DeleteItemCommandOutput>;
  send(command: ScanCommand): Promise<ScanCommandOutput>;
  send(command: QueryCommand): Promise<QueryCommandOutput>;
  send(command: CreateTableCommand): Promise<CreateTableCommandOutput>;
  send(command: DescribeTableCommand): Promise<DescribeTableCommandOutput>;
  send(command: DescribeTimeToLiveCommand): Promise<DescribeTimeToLiveCommandOutput>;
  send(command: UpdateTimeToLiveCommand): Promise<UpdateTimeToLiveCommandOutput>;
}

/**
 * The item's attribute names. `expiresAt` holds seconds for native TTL; `expiresAtMs` the exact expiry.
 *
 * @example
 * const attributes: Partial<DynamoDBAttributeNames> = { pk: 'PK', expiresAt: 'ttl' }
 */
export interface DynamoDBAttributeNames {
  readonly pk: string;
  readonly scope: string;
  readonly key: string;
  readonly status: string;
  readonly fingerprint: string;
  readonly id: string;
  readonly token: string;
  readonly claimedAt: string;
  readonly leaseExpiresAt: string;
  readonly expiresAt: string;
  readonly expiresAtMs: string;
  readonly retryable: string;
  readonly resultId: string;
  readonly responseStatus: string;
  readonly responseHeaders: string;
  readonly responseBody: string;
}

/**
 * The attribute names used unless overridden: each is its field's name.
 *
 * @example
 * dynamodbStore({ client, table, attributes: { ...DEFAULT_ATTRIBUTE_NAMES, pk: 'PK' } })
 */
export const DEFAULT_ATTRIBUTE_NAMES: DynamoDBAttributeNames = Object.freeze({
  pk: 'pk',
  scope: 'scope',
  key: 'key',
  status: 'status',
  fingerprint: 'fingerprint',
  id: 'id',
  token: 'token',
  claimedAt: 'claimedAt',
  leaseExpiresAt: 'leaseExpiresAt',
  expiresAt: 'expiresAt',
  expiresAtMs: 'expiresAtMs',
  retryable: 'retryable',
  resultId: 'resultId',
  responseStatus: 'responseStatus',
  responseHeaders: 'responseHeaders',
  responseBody: 'responseBody',
});

export interface DynamoDBStoreOptions extends RoundTripObserver {
  readonly client: DynamoDBClientLike;
  readonly table: string;
  /** Rename any attribute; the rest keep {@link DEFAULT_ATTRIBUTE_NAMES}. */
  readonly attributes?: Partial<DynamoDBAttributeNames>;
  /**
   * For a table whose primary key has a sort key (a single-table design): its name, and the constant value every
   * idempotency item carries in it, e.g. `{ name: 'SK', value: 'IDEMPOTENCY' }`.
   */
  readonly sortKey?: { readonly name: string; readonly value: string };
  /**
   * The global secondary index `list` queries: partition key the `scope` attribute (S), sort key `claimedAt` (N).
   * `createTable` creates it with projection KEYS_ONLY (completions and renewals then never write to it); an index
   * with projection ALL works too. Default {@link DEFAULT_LIST_INDEX}. `list` never scans the table: on a table
   * without this index it fails with an error that says how to add it.
   */
  readonly listIndex?: string;
}

/** The name of the index `list` queries unless `listIndex` says otherwise. */
export const DEFAULT_LIST_INDEX = 'scope-claimedAt-index';

export interface CreateTableOptions {
  /** How long to wait for the table (and its index) to become ACTIVE. Default 120 s. */
  readonly timeoutMs?: number;
  /** Delay between status checks. Default 500 ms. */
  readonly pollMs?: number;
}

/** What {@link DynamoDBStore.createTable} did. */
export interface CreateTableResult {
  /** False when the table already existed (the helper is safe to run on every start). */
  readonly created: boolean;
  /**
   * `enabled` when native TTL is on for the `expiresAt` attribute. `not-enabled` when the engine refused or does
   * not support it (dynalite, or TTL already set on another attribute): records then stay until `sweep` deletes
   * them, and expired ones are still claimable. The refusal is in `timeToLiveError`.
   */
  readonly timeToLive: 'enabled' | 'not-enabled';
  readonly timeToLiveError?: unknown;
}

/**
 * The DynamoDB store, plus a helper that creates its table.
 *
 * @example
 * const store = dynamodbStore({ client, table: 'idempotency' })
 * const { timeToLive } = await store.createTable()
 */
export interface DynamoDBStore extends IdempotencyStore {
  /** {@link DYNAMODB_MAX_RESPONSE_BYTES}: what fits in one item beside everything else the item holds. */
  readonly maxResponseBytes: number;
  /**
   * Creates the table if it is missing (PAY_PER_REQUEST, `pk` as the string HASH key, the sort key if configured,
   * and always the `listIndex` GSI), waits until it is ACTIVE, and enables native TTL on `expiresAt` where the
   * engine supports it. A table that already exists is left as it is (add the index yourself: see `list`).
   */
  createTable(options?: CreateTableOptions): Promise<CreateTableResult>;
}

/** The longest attribute name the item-size budget below allows for, in UTF-8 bytes. */
export const MAX_ATTRIBUTE_NAME_BYTES = 255;

/**
 * The largest response (body bytes plus the UTF-8 bytes of header names and values) the store declares: 360 KiB.
 *
 * DynamoDB's item limit is 400 KB = 409,600 bytes, counting attribute names (UTF-8) and values (S: UTF-8 bytes;
 * B: raw bytes; N: at most 21; BOOL: 1). Everything in the item but the response, each at its largest:
 *
 *     attribute names: 16 + the sort key's, each ≤ 255 bytes (checked by the factory)   17 × 255 =  4,335
 *     pk ≤ 2,048 (DynamoDB's partition key limit); sort key value ≤ 1,024 (its limit)            3,072
 *     scope ≤ 2,048 (a GSI partition key's limit: the list index)                               2,048
 *     key ≤ 255 (MAX_KEY_LENGTH, ASCII); status ≤ 11                                               266
 *     fingerprint, id, token ≤ 255 each (64 and two UUIDs of 36 by default; generateId may vary)     765
 *     resultId ≤ 2,048 (an assumption: a processor's id; a longer one eats into the headroom)    2,048
 *     claimedAt, leaseExpiresAt, expiresAt, expiresAtMs, responseStatus: N ≤ 21 each               105
 *     retryable: BOOL                                                                                1
 *                                                                                    total      12,640
 *
 * The response: the body as B (its bytes exactly), the headers as JSON text `[["name","value"],…]`, which adds
 * 8 bytes per header and 2 in all, plus 1 per `"` or `\` and 5 per other control character it escapes. So
 * 409,600 − 368,640 − 12,640 = 28,320 bytes of headroom for that framing and escaping: 1,000 headers (8,002)
 * plus 20,318 escaped characters. A test in items.test.ts stores a response of exactly this size beside every
 * other attribute at its largest, on dynalite, which enforces the same 409,600-byte limit.
 */
export const DYNAMODB_MAX_RESPONSE_BYTES = 360 * 1024;
