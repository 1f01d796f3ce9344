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
  BatchGetItemCommand,
  ConditionalCheckFailedException,
  CreateTableCommand,
  DeleteItemCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  DynamoDBServiceException,
  GetItemCommand,
  IndexNotFoundException,
  PutItemCommand,
  QueryCommand,
  ResourceInUseException,
  ScanCommand,
  UpdateItemCommand,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import type {
  AttributeValue,
  BatchGetItemCommandOutput,
  CreateTableCommandOutput,
  DeleteItemCommandOutput,
  DescribeTableCommandOutput,
  DescribeTimeToLiveCommandOutput,
  GetItemCommandOutput,
  PutItemCommandOutput,
  QueryCommandOutput,
  ScanCommandOutput,
  UpdateItemCommandOutput,
  UpdateTimeToLiveCommandOutput,
} from '@aws-sdk/client-dynamodb';
import { configError } from '../../core/errors.js';
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  ListRequest,
  RecordStatus,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  RoundTripObserver,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { claimedRecord, decodeHeaders, encodeHeaders, isClaimable } from '../contract.js';

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

type Field = keyof DynamoDBAttributeNames;
type Item = Record<string, AttributeValue>;

/** A claim retries only when another writer changed the item between our two writes; this bounds a livelock. */
const MAX_CLAIM_ATTEMPTS = 5;
const PREFIX = 'IDEMPOTENCY#';
const TABLE_NAME = /^[a-zA-Z0-9_.-]{3,255}$/;
/** The longest attribute name the item-size budget below allows for, in UTF-8 bytes. */
const MAX_ATTRIBUTE_NAME_BYTES = 255;

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
 * plus 20,318 escaped characters. A test in index.test.ts stores a response of exactly this size beside every
 * other attribute at its largest, on dynalite, which enforces the same 409,600-byte limit.
 */
export const DYNAMODB_MAX_RESPONSE_BYTES = 360 * 1024;
/** A reclaim: the claim's fields, the stored id kept, the previous outcome cleared. */
const TAKEOVER =
  'SET #status = :inProgress, #token = :token, #claimedAt = :now, #leaseExpiresAt = :lease, ' +
  '#expiresAt = :ttl, #expiresAtMs = :expiresAtMs, #retryable = :false ' +
  'REMOVE #resultId, #responseStatus, #responseHeaders, #responseBody';

/**
 * Creates a DynamoDB store on an existing table (see {@link DynamoDBStore.createTable}).
 *
 * @example
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb'
 * const store = dynamodbStore({ client: new DynamoDBClient({}), table: 'app', attributes: { pk: 'PK' } })
 * const engine = createEngine({ store })
 */
export function dynamodbStore({
  client,
  table,
  attributes = {},
  sortKey,
  listIndex = DEFAULT_LIST_INDEX,
  onRoundTrip,
}: DynamoDBStoreOptions): DynamoDBStore {
  if (typeof client?.send !== 'function') throw configError('client', 'an object with a send(command) method');
  if (typeof table !== 'string' || !TABLE_NAME.test(table)) {
    throw configError('table', 'a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)', table);
  }
  if (typeof attributes !== 'object' || attributes === null) throw configError('attributes', 'an object', attributes);
  for (const [field, name] of Object.entries(attributes)) {
    if (!(field in DEFAULT_ATTRIBUTE_NAMES)) {
      throw configError(`attributes.${field}`, `one of ${Object.keys(DEFAULT_ATTRIBUTE_NAMES).join(', ')}`);
    }
    if (typeof name !== 'string' || name.length === 0 || Buffer.byteLength(name) > MAX_ATTRIBUTE_NAME_BYTES) {
      throw configError(`attributes.${field}`, `a non-empty string of at most ${MAX_ATTRIBUTE_NAME_BYTES} bytes`, name);
    }
  }
  if (sortKey !== undefined) {
    if (
      typeof sortKey?.name !== 'string' ||
      sortKey.name.length === 0 ||
      Buffer.byteLength(sortKey.name) > MAX_ATTRIBUTE_NAME_BYTES
    ) {
      throw configError(
        'sortKey.name',
        `a non-empty string of at most ${MAX_ATTRIBUTE_NAME_BYTES} bytes`,
        sortKey?.name,
      );
    }
    if (typeof sortKey.value !== 'string' || sortKey.value.length === 0) {
      throw configError('sortKey.value', 'a non-empty string', sortKey.value);
    }
  }
  if (typeof listIndex !== 'string' || !TABLE_NAME.test(listIndex)) {
    throw configError('listIndex', 'a DynamoDB index name (3-255 of a-z A-Z 0-9 _ . -)', listIndex);
  }
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') throw configError('onRoundTrip', 'a function');
  const names: DynamoDBAttributeNames = Object.freeze({ ...DEFAULT_ATTRIBUTE_NAMES, ...attributes });
  const all = [...(Object.keys(names) as Field[]).map((field) => names[field]), ...(sortKey ? [sortKey.name] : [])];
  if (new Set(all).size !== all.length) throw configError('attributes', 'distinct names (including sortKey.name)', all);
  return new DynamoStore(client, table, names, sortKey, listIndex, onRoundTrip);
}

class DynamoStore implements DynamoDBStore {
  readonly name = 'dynamodb';
  readonly maxResponseBytes = DYNAMODB_MAX_RESPONSE_BYTES;
  readonly #client: DynamoDBClientLike;
  readonly #table: string;
  readonly #names: DynamoDBAttributeNames;
  readonly #sortKey: { readonly name: string; readonly value: string } | undefined;
  readonly #listIndex: string;
  readonly #onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  #roundTrips = 0;
  #closed = false;

  constructor(
    client: DynamoDBClientLike,
    table: string,
    names: DynamoDBAttributeNames,
    sortKey: { readonly name: string; readonly value: string } | undefined,
    listIndex: string,
    onRoundTrip: ((trip: RoundTrip) => void) | undefined,
  ) {
    this.#client = client;
    this.#table = table;
    this.#names = names;
    this.#sortKey = sortKey;
    this.#listIndex = listIndex;
    this.#onRoundTrip = onRoundTrip;
  }

  get roundTrips(): number {
    return this.#roundTrips;
  }

  /*
   * The claim. DynamoDB serialises conditional writes to one item, so the condition is the lock; nothing is read
   * first. Two requests with one new key:
   *
   *   A: PutItem if absent-or-expired ──► written: in_progress, token A            → claimed
   *   B: PutItem if absent-or-expired ──► ConditionalCheckFailed, Item = A's item  → existing (409 / replay)
   *
   * A read-then-write would let both read "absent" and both write. A PutItem replaces the whole item, so it writes
   * the request's fresh id: right for an absent or expired record, wrong for a reclaim (a dead lease or a
   * retryable failure, same fingerprint), which must keep the stored id. So a reclaim is a second write, an
   * UpdateItem conditional on the token the first one returned. Two retries after A crashed:
   *
   *   B: PutItem ──► refused, Item = A's (dead lease)  C: PutItem ──► refused, Item = A's (dead lease)
   *   B: UpdateItem if token = A and still reclaimable ──► token B, A's id kept         → claimed
   *   C: UpdateItem if token = A ... ──► refused, Item = B's (live lease)               → existing
   *   A (late): UpdateItem complete if token = A ──► refused                            → fenced out
   *
   * The reclaim condition re-checks the lease because A may renew in between, and the token pins the id: if the
   * item was replaced meanwhile (expired, then claimed afresh by a writer with a later clock), the write is refused
   * and the loop decides again on the item it returns, instead of handing out a stale id. Only the common cases
   * must be one round trip (new key, replay, conflict, mismatch); a reclaim costs two.
   *
   * With SDK retries (`maxAttempts` > 1), a write can be applied and its reply lost; the SDK sends it again, and
   * the resend fails its own condition against the item its first attempt wrote:
   *
   *   A: PutItem (token A) ──► written, reply lost ──► SDK resends ──► ConditionalCheckFailed, Item = token A's
   *
   * Tokens are fresh per claim, so an item in the way holding this request's token can only be its own earlier
   * attempt: that is `claimed`, not a conflict with itself (a 409 for the only request ever sent for the key).
   */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    this.#open();
    const { pk, now } = request;
    let seen: IdempotencyRecord | null | undefined; // undefined: not seen yet
    for (let attempt = 0; attempt < MAX_CLAIM_ATTEMPTS; attempt++) {
      if (!seen || seen.expiresAt <= now) {
        const record = claimedRecord(null, request);
        const refused = await this.#conditionalWrite(
          new PutItemCommand({
            TableName: this.#table,
            Item: this.#claimItem(record),
            ...this.#condition('attribute_not_exists(#pk) OR #expiresAtMs <= :now', { ':now': num(now) }),
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
          'claim',
          pk,
        );
        if (refused === undefined) return { kind: 'claimed', record };
        if (refused?.token === request.token) return { kind: 'claimed', record: refused };
        seen = refused;
        continue;
      }
      if (!isClaimable(seen, request.fingerprint, now)) return { kind: 'existing', record: seen };
      const record = claimedRecord(seen, request);
      const refused = await this.#conditionalWrite(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(pk),
          UpdateExpression: TAKEOVER,
          ...this.#condition(
            '#token = :seen AND #fingerprint = :fingerprint AND #expiresAtMs > :now AND ' +
              '((#status = :failed AND #retryable = :true) OR (#status = :inProgress AND #leaseExpiresAt <= :now))',
            {
              ':seen': str(seen.token),
              ':fingerprint': str(request.fingerprint),
              ':now': num(now),
              ':failed': str('failed'),
              ':true': { BOOL: true },
              ':inProgress': str('in_progress'),
              ':token': str(record.token),
              ':lease': num(record.leaseExpiresAt),
              ':ttl': num(ttlSeconds(record.expiresAt)),
              ':expiresAtMs': num(record.expiresAt),
              ':false': { BOOL: false },
            },
            TAKEOVER,
          ),
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
        'claim',
        pk,
      );
      if (refused === undefined) return { kind: 'claimed', record };
      if (refused?.token === request.token) return { kind: 'claimed', record: refused };
      seen = refused;
    }
    throw new Error(
      `dynamodb claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} attempts (constant contention)`,
    );
  }

  async complete({ pk, token, outcome, effects }: CompleteRequest): Promise<WriteResult> {
    this.#open();
    if (effects !== undefined) {
      throw new Error(
        'dynamodb store has no transaction for effects; key the work’s own write on the record id instead',
      );
    }
    const values: Item = {
      ':token': str(token),
      ':inProgress': str('in_progress'),
      ':status': str(outcome.status),
      ':retryable': { BOOL: outcome.retryable },
    };
    const set = ['#status = :status', '#retryable = :retryable'];
    const remove: string[] = [];
    if (outcome.resultId === null) remove.push('#resultId');
    else {
      set.push('#resultId = :resultId');
      values[':resultId'] = str(outcome.resultId);
    }
    if (outcome.response === null) remove.push('#responseStatus', '#responseHeaders', '#responseBody');
    else {
      set.push(
        '#responseStatus = :responseStatus',
        '#responseHeaders = :responseHeaders',
        '#responseBody = :responseBody',
      );
      values[':responseStatus'] = num(outcome.response.status);
      values[':responseHeaders'] = str(encodeHeaders(outcome.response.headers));
      values[':responseBody'] = { B: outcome.response.body };
    }
    const update = `SET ${set.join(', ')}${remove.length > 0 ? ` REMOVE ${remove.join(', ')}` : ''}`;
    return this.#heldWrite(
      new UpdateItemCommand({
        TableName: this.#table,
        Key: this.#key(pk),
        UpdateExpression: update,
        ...this.#condition('#token = :token AND #status = :inProgress', values, update),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
      'complete',
      pk,
      // Refused by its own earlier attempt: the item holds this token, already settled with this status.
      (item) => item !== null && item.token === token && item.status === outcome.status,
    );
  }

  /**
   * Moves the lease and the expiry (both expiry attributes: TTL's seconds and the exact milliseconds), each only
   * forward. Refused by an item still ours that is already as far on (a newer renewal, or this write's own earlier
   * attempt), it is `ok: true`; already further on in one attribute only, it writes the later of each.
   */
  async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
    this.#open();
    const update = 'SET #leaseExpiresAt = :lease, #expiresAt = :ttl, #expiresAtMs = :expiresAtMs';
    // An abandoned renewal landing after a newer one must not shorten the lease: it writes nothing it would move back.
    const held =
      '#token = :token AND #status = :inProgress AND #leaseExpiresAt <= :lease AND #expiresAtMs <= :expiresAtMs';
    let [lease, expires] = [now + leaseMs, expiresAt];
    for (let attempt = 0; attempt < MAX_CLAIM_ATTEMPTS; attempt++) {
      const values = { ':token': str(token), ':inProgress': str('in_progress'), ':lease': num(lease) };
      const ttl = { ':ttl': num(ttlSeconds(expires)), ':expiresAtMs': num(expires) };
      const seen = await this.#conditionalWrite(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(pk),
          UpdateExpression: update,
          ...this.#condition(held, { ...values, ...ttl }, update),
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
        'renew',
        pk,
      );
      if (seen === undefined) return { ok: true };
      if (seen?.token !== token || seen.status !== 'in_progress') return { ok: false };
      if (seen.leaseExpiresAt >= lease && seen.expiresAt >= expires) return { ok: true };
      [lease, expires] = [Math.max(lease, seen.leaseExpiresAt), Math.max(expires, seen.expiresAt)];
    }
    throw new Error(`dynamodb renew of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} attempts (contention)`);
  }

  async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
    this.#open();
    return this.#heldWrite(
      new DeleteItemCommand({
        TableName: this.#table,
        Key: this.#key(pk),
        ...this.#condition('#token = :token AND #status = :inProgress', {
          ':token': str(token),
          ':inProgress': str('in_progress'),
        }),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
      'release',
      pk,
      // Refused because the item is gone (its own earlier attempt deleted it): the key is free, as release wants.
      (item) => item === null,
    );
  }

  async get(pk: string): Promise<IdempotencyRecord | null> {
    this.#open();
    return this.#read('get', pk);
  }

  /**
   * Native TTL deletes expired items on DynamoDB, and the claim treats them as absent meanwhile, so there is no
   * need to schedule this there. It exists for engines without TTL (dynalite, DynamoDB Local) and for operators:
   * a consistent Scan for expired idempotency items, each deleted only if it is *still* expired (a conditional
   * DeleteItem), so an item reclaimed between the scan and the delete survives.
   */
  async sweep({ now, batchSize = 100, limit = Infinity }: SweepRequest): Promise<number> {
    this.#open();
    if (!Number.isInteger(batchSize) || batchSize <= 0) throw configError('batchSize', 'a positive integer', batchSize);
    if (!(limit > 0)) throw configError('limit', 'a positive number', limit);
    let deleted = 0;
    let start: Item | undefined;
    do {
      const page = await this.#via('sweep')(
        new ScanCommand({
          TableName: this.#table,
          ConsistentRead: true,
          Limit: batchSize,
          ExclusiveStartKey: start,
          ProjectionExpression: '#pk',
          ...this.#filter(`${this.#ours()} AND #expiresAtMs <= :now`, { ...this.#oursValues(), ':now': num(now) }),
        }),
      );
      for (const item of page.Items ?? []) {
        if (deleted >= limit) return deleted;
        const pk = item[this.#names.pk]?.S;
        if (pk === undefined) continue;
        const gone = await this.#heldWrite(
          new DeleteItemCommand({
            TableName: this.#table,
            Key: this.#key(pk),
            ...this.#condition('#expiresAtMs <= :now', { ':now': num(now) }),
          }),
          'sweep',
          pk,
        );
        if (gone.ok) deleted++;
      }
      start = page.LastEvaluatedKey;
    } while (start !== undefined && deleted < limit);
    return deleted;
  }

  /**
   * A scope's records, newest claim first: a Query of `listIndex` (eventually consistent) for the newest `limit`
   * keys of the scope, then one consistent BatchGetItem for the items themselves (skipped when the index projects
   * every attribute). Two round trips for up to 100 records, whatever else the table holds; never a Scan.
   */
  async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
    this.#open();
    if (!(limit > 0)) return [];
    const n = this.#names;
    const found: Item[] = [];
    let start: Item | undefined;
    do {
      let page: QueryCommandOutput;
      try {
        page = await this.#via('list')(
          new QueryCommand({
            TableName: this.#table,
            IndexName: this.#listIndex,
            ScanIndexForward: false,
            Limit: limit - found.length,
            ExclusiveStartKey: start,
            KeyConditionExpression: '#scope = :scope',
            FilterExpression: this.#ours(),
            ExpressionAttributeNames: this.#placeholders(`#scope ${this.#ours()}`),
            ExpressionAttributeValues: { ...this.#oursValues(), ':scope': str(scope) },
          }),
        );
      } catch (error) {
        if (!isMissingIndex(error)) throw error;
        throw new Error(
          `dynamodb table ${this.#table} has no index ${this.#listIndex} for list: add a global secondary index ` +
            `${this.#listIndex} (partition key ${n.scope} S, sort key ${n.claimedAt} N, projection KEYS_ONLY) ` +
            `with UpdateTable, or set listIndex to yours`,
          { cause: error },
        );
      }
      found.push(...(page.Items ?? []));
      start = page.LastEvaluatedKey;
    } while (start !== undefined && found.length < limit);

    const keys = found.slice(0, limit);
    // An index projecting every attribute (ALL) has answered already; a KEYS_ONLY one names the items to read.
    const items = keys.every((item) => item[n.status] !== undefined) ? keys : await this.#readMany(keys);
    return items.map((item) => this.#decode(item)).sort((a, b) => b.claimedAt - a.claimedAt);
  }

  /** The items at `keys` (each an item's primary key, plus whatever else), consistently, in batches of 100. */
  async #readMany(keys: Item[]): Promise<Item[]> {
    const items: Item[] = [];
    const keyOf = (item: Item): Item => this.#key(item[this.#names.pk]?.S ?? '');
    for (let i = 0; i < keys.length; i += 100) {
      let pending: Item[] | undefined = keys.slice(i, i + 100).map(keyOf);
      // UnprocessedKeys (throttling, or 16 MB per answer) are asked for again; each attempt is a round trip.
      for (let attempt = 0; pending && pending.length > 0; attempt++) {
        if (attempt >= MAX_CLAIM_ATTEMPTS)
          throw new Error(`dynamodb list of ${this.#table}: BatchGetItem left keys unread`);
        const { Responses, UnprocessedKeys }: BatchGetItemCommandOutput = await this.#via('list')(
          new BatchGetItemCommand({ RequestItems: { [this.#table]: { Keys: pending, ConsistentRead: true } } }),
        );
        // An item deleted since the Query (released, swept) is simply not there.
        items.push(...(Responses?.[this.#table] ?? []));
        pending = UnprocessedKeys?.[this.#table]?.Keys;
      }
    }
    return items;
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  async createTable({ timeoutMs = 120_000, pollMs = 500 }: CreateTableOptions = {}): Promise<CreateTableResult> {
    this.#open();
    if (!(timeoutMs > 0)) throw configError('timeoutMs', 'a positive number', timeoutMs);
    if (!(pollMs > 0)) throw configError('pollMs', 'a positive number', pollMs);
    const n = this.#names;
    let created = true;
    try {
      await this.#via('createTable')(
        new CreateTableCommand({
          TableName: this.#table,
          BillingMode: 'PAY_PER_REQUEST',
          AttributeDefinitions: [
            { AttributeName: n.pk, AttributeType: 'S' },
            ...(this.#sortKey ? [{ AttributeName: this.#sortKey.name, AttributeType: 'S' as const }] : []),
            { AttributeName: n.scope, AttributeType: 'S' },
            { AttributeName: n.claimedAt, AttributeType: 'N' },
          ],
          KeySchema: [
            { AttributeName: n.pk, KeyType: 'HASH' },
            ...(this.#sortKey ? [{ AttributeName: this.#sortKey.name, KeyType: 'RANGE' as const }] : []),
          ],
          GlobalSecondaryIndexes: [
            {
              IndexName: this.#listIndex,
              KeySchema: [
                { AttributeName: n.scope, KeyType: 'HASH' },
                { AttributeName: n.claimedAt, KeyType: 'RANGE' },
              ],
              // Keys only: a completion (the response, up to 360 KiB) or a renewal changes no key of the index,
              // so it writes the table alone; list reads the items themselves.
              Projection: { ProjectionType: 'KEYS_ONLY' },
            },
          ],
        }),
      );
    } catch (error) {
      if (!(error instanceof ResourceInUseException)) throw error;
      created = false;
    }

    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { Table } = await this.#via('createTable')(new DescribeTableCommand({ TableName: this.#table }));
      const indexes = Table?.GlobalSecondaryIndexes ?? [];
      if (Table?.TableStatus === 'ACTIVE' && indexes.every((index) => index.IndexStatus === 'ACTIVE')) break;
      if (Date.now() >= deadline) {
        throw new Error(`dynamodb table ${this.#table} is not ACTIVE after ${timeoutMs} ms (${Table?.TableStatus})`);
      }
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }

    try {
      const { TimeToLiveDescription: ttl } = await this.#via('createTable')(
        new DescribeTimeToLiveCommand({ TableName: this.#table }),
      );
      const on = ttl?.TimeToLiveStatus === 'ENABLED' || ttl?.TimeToLiveStatus === 'ENABLING';
      if (!(on && ttl?.AttributeName === n.expiresAt)) {
        await this.#via('createTable')(
          new UpdateTimeToLiveCommand({
            TableName: this.#table,
            TimeToLiveSpecification: { AttributeName: n.expiresAt, Enabled: true },
          }),
        );
      }
      return { created, timeToLive: 'enabled' };
    } catch (error) {
      return { created, timeToLive: 'not-enabled', timeToLiveError: error };
    }
  }

  #open(): void {
    if (this.#closed) throw new Error('dynamodb store is closed');
  }

  /**
   * The client's `send`, counted and reported as part of the store operation `op`: every request to DynamoDB goes
   * through here.
   */
  #via(op: string): DynamoDBClientLike['send'] {
    // One function for every overload: each command's output is the client's own, passed through unchanged.
    const send = async (command: never): Promise<unknown> => {
      this.#roundTrips++;
      const onRoundTrip = this.#onRoundTrip;
      if (!onRoundTrip) return this.#client.send(command);
      const request = { command: commandName(command), input: (command as { input: unknown }).input };
      try {
        const response = await this.#client.send(command);
        report(onRoundTrip, { op, request, response });
        return response;
      } catch (error) {
        report(onRoundTrip, { op, request, error });
        throw error;
      }
    };
    return send as DynamoDBClientLike['send'];
  }

  /**
   * Sends a conditional write. Resolves undefined when it was applied; when the condition failed, the item in the
   * way: the one DynamoDB returned with the failure (`ALL_OLD`), or — from an engine that ignores `ALL_OLD`, or
   * when there is no item — one read with a consistent GetItem, a round trip of its own. null: no item.
   */
  async #conditionalWrite(
    command: PutItemCommand | UpdateItemCommand | DeleteItemCommand,
    op: string,
    pk: string,
  ): Promise<IdempotencyRecord | null | undefined> {
    try {
      await this.#via(op)(command as PutItemCommand);
      return undefined;
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw error;
      return error.Item ? this.#decode(error.Item) : this.#read(op, pk);
    }
  }

  /**
   * A write conditional on holding the token: refused is `{ ok: false }`, not an error — unless `ownAttempt` says
   * the item in the way (null: none) is what this very write leaves behind, i.e. an SDK resend of a write whose
   * first attempt was applied and whose reply was lost (see the comment on `claim`): then `{ ok: true }`. Without
   * `ownAttempt` a refusal is final and costs no read.
   */
  async #heldWrite(
    command: UpdateItemCommand | DeleteItemCommand,
    op: string,
    pk: string,
    ownAttempt?: (item: IdempotencyRecord | null) => boolean,
  ): Promise<WriteResult> {
    if (ownAttempt === undefined) {
      try {
        await this.#via(op)(command);
        return { ok: true };
      } catch (error) {
        if (error instanceof ConditionalCheckFailedException) return { ok: false };
        throw error;
      }
    }
    const refused = await this.#conditionalWrite(command, op, pk);
    return { ok: refused === undefined || ownAttempt(refused) };
  }

  async #read(op: string, pk: string): Promise<IdempotencyRecord | null> {
    const { Item } = await this.#via(op)(
      new GetItemCommand({ TableName: this.#table, Key: this.#key(pk), ConsistentRead: true }),
    );
    return Item ? this.#decode(Item) : null;
  }

  #key(pk: string): Item {
    const key: Item = { [this.#names.pk]: str(pk) };
    if (this.#sortKey) key[this.#sortKey.name] = str(this.#sortKey.value);
    return key;
  }

  /** Filters idempotency items out of a shared (single-table) table. */
  #ours(): string {
    return `begins_with(#pk, :prefix)${this.#sortKey ? ' AND #sk = :sk' : ''}`;
  }

  #oursValues(): Item {
    return { ':prefix': str(PREFIX), ...(this.#sortKey ? { ':sk': str(this.#sortKey.value) } : {}) };
  }

  /** `ExpressionAttributeNames` for exactly the `#field` placeholders the expressions use (DynamoDB rejects extras). */
  #placeholders(...expressions: string[]): Record<string, string> {
    const placeholders: Record<string, string> = {};
    for (const expression of expressions) {
      for (const [placeholder, field] of expression.matchAll(/#(\w+)/g)) {
        const name = field === 'sk' ? this.#sortKey?.name : this.#names[field as Field];
        if (name === undefined) throw new Error(`unknown placeholder ${placeholder}`);
        placeholders[placeholder] = name;
      }
    }
    return placeholders;
  }

  /** A condition and the names and values it (and any `alsoUses` expression, e.g. the update) refers to. */
  #condition(condition: string, values: Item, ...alsoUses: string[]) {
    return {
      ConditionExpression: condition,
      ExpressionAttributeNames: this.#placeholders(condition, ...alsoUses),
      ExpressionAttributeValues: values,
    };
  }

  #filter(filter: string, values: Item, ...alsoUses: string[]) {
    return {
      FilterExpression: filter,
      ExpressionAttributeNames: this.#placeholders(filter, ...alsoUses),
      ExpressionAttributeValues: values,
    };
  }

  /** The item a fresh claim puts (no outcome yet). */
  #claimItem(record: IdempotencyRecord): Item {
    const n = this.#names;
    return {
      ...this.#key(record.pk),
      [n.scope]: str(record.scope),
      [n.key]: str(record.key),
      [n.status]: str(record.status),
      [n.fingerprint]: str(record.fingerprint),
      [n.id]: str(record.id),
      [n.token]: str(record.token),
      [n.claimedAt]: num(record.claimedAt),
      [n.leaseExpiresAt]: num(record.leaseExpiresAt),
      [n.expiresAt]: num(ttlSeconds(record.expiresAt)),
      [n.expiresAtMs]: num(record.expiresAt),
      [n.retryable]: { BOOL: record.retryable },
    };
  }

  #decode(item: Item): IdempotencyRecord {
    const n = this.#names;
    const pk = item[n.pk]?.S ?? '(no pk)';
    const need = <T>(field: Field, value: T | undefined): T => {
      if (value === undefined) throw new Error(`dynamodb item ${pk} has no valid ${n[field]} attribute`);
      return value;
    };
    const s = (field: Field): string => need(field, item[n[field]]?.S);
    const ms = (field: Field): number => {
      const value = Number(need(field, item[n[field]]?.N));
      return need(field, Number.isFinite(value) ? value : undefined);
    };
    const status = s('status');
    if (status !== 'in_progress' && status !== 'succeeded' && status !== 'failed') need('status', undefined);
    const responseStatus = item[n.responseStatus]?.N;
    return {
      pk: s('pk'),
      scope: s('scope'),
      key: s('key'),
      status: status as RecordStatus,
      fingerprint: s('fingerprint'),
      id: s('id'),
      token: s('token'),
      claimedAt: ms('claimedAt'),
      leaseExpiresAt: ms('leaseExpiresAt'),
      expiresAt: ms('expiresAtMs'),
      retryable: need('retryable', item[n.retryable]?.BOOL),
      resultId: item[n.resultId]?.S ?? null,
      response:
        responseStatus === undefined
          ? null
          : {
              status: Number(responseStatus),
              headers: decodeHeaders(s('responseHeaders')),
              body: need('responseBody', item[n.responseBody]?.B),
            },
    };
  }
}

/** DynamoDB's answer to a Query of an index the table does not have. */
function isMissingIndex(error: unknown): boolean {
  if (error instanceof IndexNotFoundException) return true;
  return (
    error instanceof DynamoDBServiceException &&
    error.name === 'ValidationException' &&
    error.message.includes('does not have the specified index')
  );
}

/** `PutItemCommand` → `PutItem`: the operation's name in DynamoDB's own API. */
function commandName(command: object): string {
  return command.constructor.name.replace(/Command$/, '');
}

/** An observer must never change what happens to a payment. */
function report(onRoundTrip: (trip: RoundTrip) => void, trip: RoundTrip): void {
  try {
    onRoundTrip(trip);
  } catch {
    // Ignored on purpose.
  }
}

/** Native TTL reads whole seconds; rounding up means TTL never deletes an item before it has expired. */
function ttlSeconds(expiresAtMs: number): number {
  return Math.ceil(expiresAtMs / 1000);
}

function str(value: string): AttributeValue {
  return { S: value };
}

function num(value: number): AttributeValue {
  return { N: String(value) };
}
