import { randomUUID } from 'node:crypto';
import {
  BatchWriteItemCommand,
  ConditionalCheckFailedException,
  CreateTableCommand,
  DeleteTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
} from '@aws-sdk/client-dynamodb';
import type { UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { describeStoreConformance } from 'idem/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { ClaimRequest, IdempotencyRecord, RoundTrip } from '../contract.js';
import type { DynamoDBAttributeNames, DynamoDBClientLike, DynamoDBStore, DynamoDBStoreOptions } from './index.js';
import { DEFAULT_ATTRIBUTE_NAMES, DEFAULT_LIST_INDEX, DYNAMODB_MAX_RESPONSE_BYTES, dynamodbStore } from './index.js';
import { startLocalDynamo } from './local.js';

// dynalite runs in this process, so there is no service to skip on: every run exercises the store.
const local = await startLocalDynamo();
afterAll(() => local.close());

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;

const tableName = () => `idem-test-${randomUUID()}`;

/** A store on a fresh table of its own, which `close` deletes. Delegates explicitly (the store keeps #private state). */
async function isolated(options: Omit<DynamoDBStoreOptions, 'client' | 'table'> = {}): Promise<DynamoDBStore> {
  const table = tableName();
  const store = dynamodbStore({ client: local.client, table, ...options });
  await store.createTable({ pollMs: 10 });
  return {
    name: store.name,
    maxResponseBytes: store.maxResponseBytes,
    get roundTrips() {
      return store.roundTrips;
    },
    claim: (request) => store.claim(request),
    complete: (request) => store.complete(request),
    renew: (request) => store.renew(request),
    release: (request) => store.release(request),
    get: (pk) => store.get(pk),
    sweep: (request) => store.sweep(request),
    list: (request) => store.list(request),
    createTable: (opts) => store.createTable(opts),
    close: async () => {
      await store.close();
      await local.client.send(new DeleteTableCommand({ TableName: table }));
    },
  };
}

// dynalite ignores ReturnValuesOnConditionCheckFailure, so a refused claim gets no item back with its
// ConditionalCheckFailedException and the store reads it with a consistent GetItem: 2 round trips here, 1 on
// DynamoDB itself (the request still asks for ALL_OLD; see the recording test below).
describeStoreConformance({ name: 'dynamodb (dynalite)', create: () => isolated(), refusedClaimTrips: 2 });

const RENAMED: DynamoDBAttributeNames = {
  pk: 'PK',
  scope: 'IdemScope',
  key: 'IdemKey',
  status: 'Status',
  fingerprint: 'Fingerprint',
  id: 'RecordId',
  token: 'FencingToken',
  claimedAt: 'ClaimedAt',
  leaseExpiresAt: 'LeaseExpiresAt',
  expiresAt: 'ttl',
  expiresAtMs: 'ExpiresAtMs',
  retryable: 'Retryable',
  resultId: 'ResultId',
  responseStatus: 'ResponseStatus',
  responseHeaders: 'ResponseHeaders',
  responseBody: 'ResponseBody',
};
const SINGLE_TABLE = {
  attributes: RENAMED,
  sortKey: { name: 'SK', value: 'IDEMPOTENCY' },
  listIndex: 'byScope',
} as const;

// The same contract in a single-table layout: every attribute renamed, a composite key, list through a GSI.
describeStoreConformance({
  name: 'dynamodb (dynalite, single-table names, sort key, list index)',
  create: () => isolated(SINGLE_TABLE),
  refusedClaimTrips: 2,
});

const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => {
  const scope = overrides.scope ?? 'acct_dynamo';
  const key = overrides.key ?? randomUUID();
  return {
    pk: recordPk(scope, key),
    scope,
    key,
    fingerprint: 'f'.repeat(64),
    token: randomUUID(),
    id: randomUUID(),
    now: T0,
    leaseMs: LEASE,
    ttlMs: TTL,
    ...overrides,
  };
};

describe('dynamodb store against dynalite', () => {
  const open: Array<{ close(): Promise<unknown> }> = [];
  afterEach(async () => {
    for (const closable of open.splice(0).reverse()) await closable.close();
  });
  const track = <T extends { close(): Promise<unknown> }>(closable: T): T => {
    open.push(closable);
    return closable;
  };

  /** Forwards every command to dynalite and keeps it: recording, not mocking. */
  const recordingClient = (): { client: DynamoDBClientLike; sent: Array<{ input: unknown }> } => {
    const sent: Array<{ input: unknown }> = [];
    const send = (command: { input: unknown }) => {
      sent.push(command);
      return local.client.send(command as PutItemCommand);
    };
    const client = { send } as DynamoDBClientLike;
    return { client, sent };
  };
  const recordingStore = async (options: Omit<DynamoDBStoreOptions, 'client' | 'table'> = {}) => {
    const recorder = recordingClient();
    const table = tableName();
    const store = dynamodbStore({ client: recorder.client, table, ...options });
    await store.createTable({ pollMs: 10 });
    track({ close: () => local.client.send(new DeleteTableCommand({ TableName: table })) });
    recorder.sent.length = 0;
    return { store, table, sent: recorder.sent };
  };
  const kinds = (sent: Array<{ input: unknown }>) => sent.map((command) => command.constructor.name);

  it('claims with a PutItem that asks for ALL_OLD, and reads the item back when the engine ignores it', async () => {
    const { store, sent } = await recordingStore();
    const first = request();
    await store.claim(first);
    expect(kinds(sent)).toEqual(['PutItemCommand']);
    const put = sent[0] as PutItemCommand;
    expect(put.input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect(put.input.ConditionExpression).toBe('attribute_not_exists(#pk) OR #expiresAtMs <= :now');
    expect(put.input.ExpressionAttributeNames).toEqual({ '#pk': 'pk', '#expiresAtMs': 'expiresAtMs' });
    expect(put.input.ExpressionAttributeValues).toEqual({ ':now': { N: String(T0) } });

    sent.length = 0;
    const before = store.roundTrips;
    const second = await store.claim({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
    expect(second.kind).toBe('existing');
    expect(second.record.token).toBe(first.token);
    expect(kinds(sent)).toEqual(['PutItemCommand', 'GetItemCommand']);
    expect((sent[0] as PutItemCommand).input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect((sent[1] as GetItemCommand).input.ConsistentRead).toBe(true);
    expect(store.roundTrips - before).toBe(2);
  });

  it('reports every round trip to onRoundTrip: command, input, output, or the engine’s own error', async () => {
    const trips: RoundTrip[] = [];
    const { store, table } = await recordingStore({ onRoundTrip: (trip) => trips.push(trip) });
    trips.length = 0;
    const before = store.roundTrips;
    const first = request();
    await store.claim(first);
    await store.claim({ ...first, token: randomUUID(), now: T0 + 1 });
    await store.renew({ pk: first.pk, token: 'stale', now: T0 + 2, leaseMs: LEASE, expiresAt: T0 + TTL });
    expect(trips.map((t) => [t.op, (t.request as { command: string }).command])).toEqual([
      ['claim', 'PutItem'],
      ['claim', 'PutItem'],
      ['claim', 'GetItem'],
      ['renew', 'UpdateItem'],
      // A refused renewal reads the item (dynalite returns none with the failure) to tell its own earlier attempt,
      // resent by the SDK, from another holder: here another holder, so ok: false.
      ['renew', 'GetItem'],
    ]);
    expect(store.roundTrips - before).toBe(5);
    expect((trips[0]?.request as { input: { TableName: string } }).input.TableName).toBe(table);
    expect(trips[0]?.error).toBeUndefined();
    expect(trips[1]?.error).toBeInstanceOf(ConditionalCheckFailedException);
    expect(trips[1]?.response).toBeUndefined();
    expect((trips[2]?.response as { Item: Record<string, unknown> }).Item.token).toEqual({ S: first.token });
    expect(trips[3]?.error).toBeInstanceOf(ConditionalCheckFailedException);
  });

  it('takes over a dead lease with an UpdateItem conditional on the token it saw, keeping the id', async () => {
    const { store, sent } = await recordingStore();
    const first = request();
    await store.claim(first);
    sent.length = 0;
    const before = store.roundTrips;
    const takeover = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + LEASE };
    const result = await store.claim(takeover);
    expect(result.kind).toBe('claimed');
    expect(result.record.id).toBe(first.id);
    expect(result.record.token).toBe(takeover.token);
    // dynalite: the refused Put, its GetItem fallback, the takeover. On DynamoDB: 2.
    expect(kinds(sent)).toEqual(['PutItemCommand', 'GetItemCommand', 'UpdateItemCommand']);
    expect(store.roundTrips - before).toBe(3);
    const update = sent[2] as UpdateItemCommand;
    expect(update.input.ExpressionAttributeValues?.[':seen']).toEqual({ S: first.token });
    expect(update.input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect(await store.get(first.pk)).toEqual({ ...result.record });
  });

  it('two concurrent takeovers of one dead lease: exactly one wins, the other sees the winner', async () => {
    const { store } = await recordingStore();
    const first = request();
    await store.claim(first);
    const attempts = [0, 1].map(() => ({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + LEASE }));
    const results = await Promise.all(attempts.map((attempt) => store.claim(attempt)));
    expect(results.map((r) => r.kind).sort()).toEqual(['claimed', 'existing']);
    const winner = results.find((r) => r.kind === 'claimed')?.record as IdempotencyRecord;
    for (const r of results) expect(r.record.token).toBe(winner.token);
    expect(winner.id).toBe(first.id);
    expect(await store.complete({ pk: first.pk, token: first.token, now: T0 + LEASE, outcome: failedOutcome })).toEqual(
      {
        ok: false,
      },
    );
  });

  it('a takeover whose item was replaced after it was read is refused, re-read, and keeps the stored id', async () => {
    const table = tableName();
    const other = dynamodbStore({ client: local.client, table });
    await other.createTable({ pollMs: 10 });
    track({ close: () => local.client.send(new DeleteTableCommand({ TableName: table })) });
    const first = request();
    await other.claim(first);
    await other.complete({ pk: first.pk, token: first.token, now: T0 + 1, outcome: failedOutcome });
    // Another writer whose clock is past the first record's expiry replaces it (fresh id, same payload) and
    // fails retryably, in the gap between our read of the first record and our takeover write.
    const replacement = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + TTL };
    let interleaved = false;
    const send = async (command: { input: unknown }) => {
      if (!interleaved && command.constructor.name === 'UpdateItemCommand') {
        interleaved = true;
        expect((await other.claim(replacement)).kind).toBe('claimed');
        await other.complete({ pk: first.pk, token: replacement.token, now: T0 + TTL, outcome: failedOutcome });
      }
      return local.client.send(command as PutItemCommand);
    };
    const client = { send } as DynamoDBClientLike;
    const store = dynamodbStore({ client, table });
    const retry = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + 2 };
    const result = await store.claim(retry);
    expect(interleaved).toBe(true);
    expect(result.kind).toBe('claimed');
    expect(result.record.id).toBe(replacement.id);
    expect((await store.get(first.pk))?.id).toBe(replacement.id);
    expect((await store.get(first.pk))?.token).toBe(retry.token);
  });

  it('writes the item of docs/DESIGN.md (Record): attribute names and types exactly, expiresAt in seconds for TTL', async () => {
    const { store, table } = await recordingStore();
    const req = request({ now: T0 + 1_234 });
    await store.claim(req);
    const raw = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect(req.pk).toBe(`IDEMPOTENCY#acct_dynamo#${req.key}`);
    expect(raw.Item).toEqual({
      pk: { S: req.pk },
      scope: { S: 'acct_dynamo' },
      key: { S: req.key },
      status: { S: 'in_progress' },
      fingerprint: { S: req.fingerprint },
      id: { S: req.id },
      token: { S: req.token },
      claimedAt: { N: String(T0 + 1_234) },
      leaseExpiresAt: { N: String(T0 + 1_234 + LEASE) },
      // ceil((T0 + 61 234 ms) / 1000): TTL may only delete after the exact expiry, never before.
      expiresAt: { N: String(T0 / 1000 + 62) },
      expiresAtMs: { N: String(T0 + 1_234 + TTL) },
      retryable: { BOOL: false },
    });

    const body = new Uint8Array([0x00, 0xff, 0x7b]);
    const outcome = {
      status: 'succeeded',
      retryable: false,
      resultId: 'ch_1',
      response: { status: 201, headers: [['x-a', 'b']], body },
    } as const;
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2_000, outcome })).toEqual({ ok: true });
    const done = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect(done.Item?.status).toEqual({ S: 'succeeded' });
    expect(done.Item?.resultId).toEqual({ S: 'ch_1' });
    expect(done.Item?.responseStatus).toEqual({ N: '201' });
    expect(done.Item?.responseHeaders).toEqual({ S: '[["x-a","b"]]' });
    expect([...(done.Item?.responseBody?.B ?? [])]).toEqual([0x00, 0xff, 0x7b]);
  });

  it('renew moves both expiry attributes in its one write: TTL seconds (rounded up) and exact milliseconds', async () => {
    const { store, table, sent } = await recordingStore();
    const req = request();
    await store.claim(req);
    sent.length = 0;
    const expiresAt = T0 + 2 * TTL + 1_001;
    expect(await store.renew({ pk: req.pk, token: req.token, now: T0 + 5_000, leaseMs: LEASE, expiresAt })).toEqual({
      ok: true,
    });
    expect(kinds(sent)).toEqual(['UpdateItemCommand']);
    const raw = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect([raw.Item?.leaseExpiresAt, raw.Item?.expiresAt, raw.Item?.expiresAtMs]).toEqual([
      { N: String(T0 + 5_000 + LEASE) },
      { N: String(T0 / 1000 + 122) },
      { N: String(expiresAt) },
    ]);
  });

  it('uses the configured attribute names and sort key in the item', async () => {
    const { store, table } = await recordingStore(SINGLE_TABLE);
    const req = request();
    await store.claim(req);
    const raw = await local.client.send(
      new GetItemCommand({
        TableName: table,
        Key: { PK: { S: req.pk }, SK: { S: 'IDEMPOTENCY' } },
        ConsistentRead: true,
      }),
    );
    expect(Object.keys(raw.Item ?? {}).sort()).toEqual(
      [
        'PK',
        'SK',
        'IdemScope',
        'IdemKey',
        'Status',
        'Fingerprint',
        'RecordId',
        'FencingToken',
        'ClaimedAt',
        'LeaseExpiresAt',
        'ttl',
        'ExpiresAtMs',
        'Retryable',
      ].sort(),
    );
    expect(raw.Item?.ttl).toEqual({ N: String((T0 + TTL) / 1000) });
  });

  it('leaves other entities of a shared table alone in list and sweep', async () => {
    const { store, table } = await recordingStore(SINGLE_TABLE);
    const foreign = {
      PK: { S: 'ACCOUNT#acct_dynamo' },
      SK: { S: 'PROFILE' },
      IdemScope: { S: 'acct_dynamo' },
      ClaimedAt: { N: String(T0 + 5) },
      ExpiresAtMs: { N: '0' },
    };
    await local.client.send(new PutItemCommand({ TableName: table, Item: foreign }));
    const mine = request({ now: T0 });
    await store.claim(mine);
    expect((await store.list({ scope: 'acct_dynamo', limit: 10 })).map((r) => r.key)).toEqual([mine.key]);
    expect(await store.sweep({ now: T0 + TTL })).toBe(1);
    const kept = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { PK: foreign.PK, SK: foreign.SK }, ConsistentRead: true }),
    );
    expect(kept.Item).toEqual(foreign);
  });

  it('stores a response of exactly maxResponseBytes beside every other attribute at its largest (the budget in index.ts)', async () => {
    expect(DYNAMODB_MAX_RESPONSE_BYTES).toBe(368_640);
    // Every attribute name at 255 bytes, the sort key's value at 1,024, the pk at DynamoDB's 2,048.
    const long = (name: string) => name.padEnd(255, '_');
    const attributes = Object.fromEntries(Object.keys(DEFAULT_ATTRIBUTE_NAMES).map((field) => [field, long(field)]));
    const { store } = await recordingStore({
      attributes,
      sortKey: { name: long('sortKey'), value: 'S'.repeat(1_024) },
      listIndex: 'byScope',
    });
    expect(store.maxResponseBytes).toBe(DYNAMODB_MAX_RESPONSE_BYTES);
    const key = 'k'.repeat(255);
    const scope = 's'.repeat(2_048 - 'IDEMPOTENCY#'.length - 1 - key.length);
    const req = request({ scope, key, fingerprint: 'f'.repeat(255), token: 't'.repeat(255), id: 'i'.repeat(255) });
    expect(Buffer.byteLength(req.pk)).toBe(2_048);
    expect((await store.claim(req)).kind).toBe('claimed');
    // Split between body and headers; the headers carry characters JSON escapes.
    const headers: Array<[string, string]> = Array.from({ length: 40 }, (_, i) => [
      `x-header-${i}`,
      `"${'v'.repeat(90)}\\"`,
    ]);
    const headerBytes = headers.reduce(
      (sum, [name, value]) => sum + Buffer.byteLength(name) + Buffer.byteLength(value),
      0,
    );
    const body = Uint8Array.from({ length: DYNAMODB_MAX_RESPONSE_BYTES - headerBytes }, (_, i) => (i * 31) % 256);
    const response = { status: 200, headers, body };
    const outcome = { status: 'succeeded', retryable: false, resultId: 'r'.repeat(2_048), response } as const;
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
    const stored = await store.get(req.pk);
    expect(stored?.response?.headers).toEqual(headers);
    expect(Buffer.compare(Buffer.from(stored?.response?.body ?? []), Buffer.from(body))).toBe(0);
    expect(stored?.resultId).toBe(outcome.resultId);

    // The limit is real on dynalite: a body of 400 KB on its own does not fit.
    const over = request();
    await store.claim(over);
    const tooBig = { ...outcome, response: { status: 200, headers: [], body: new Uint8Array(409_600) } };
    await expect(store.complete({ pk: over.pk, token: over.token, now: T0 + 1, outcome: tooBig })).rejects.toThrow(
      'Item size to update has exceeded the maximum allowed size',
    );
  });

  it('list is a Query of the scope index plus one BatchGetItem, with 5,000 items of other scopes (before: 7 Scan pages)', async () => {
    const { store, table, sent } = await recordingStore();
    const mine = [request({ now: T0 }), request({ now: T0 + 1 }), request({ now: T0 + 2 })];
    for (const req of mine) await store.claim(req);
    await store.complete({ pk: mine[1]?.pk ?? '', token: mine[1]?.token ?? '', now: T0 + 3, outcome: failedOutcome });
    // 5,000 finished items of 50 other scopes, each with a 1 KB response: about 6 MB, 7 Scan pages.
    for (let i = 0; i < 5_000; i += 25) {
      const items = Array.from({ length: 25 }, (_, j) => {
        const other = request({ scope: `acct_other_${(i + j) % 50}`, now: T0 + i + j });
        return {
          PutRequest: {
            Item: {
              pk: { S: other.pk },
              scope: { S: other.scope },
              key: { S: other.key },
              status: { S: 'succeeded' },
              fingerprint: { S: other.fingerprint },
              id: { S: other.id },
              token: { S: other.token },
              claimedAt: { N: String(other.now) },
              leaseExpiresAt: { N: String(other.now + LEASE) },
              expiresAt: { N: String((other.now + TTL) / 1000) },
              expiresAtMs: { N: String(other.now + TTL) },
              retryable: { BOOL: false },
              responseStatus: { N: '201' },
              responseHeaders: { S: '[]' },
              responseBody: { B: new Uint8Array(1_000) },
            },
          },
        };
      });
      await local.client.send(new BatchWriteItemCommand({ RequestItems: { [table]: items } }));
    }
    sent.length = 0;
    const before = store.roundTrips;
    const listed = await store.list({ scope: 'acct_dynamo', limit: 10 });
    expect(store.roundTrips - before).toBe(2);
    expect(kinds(sent)).toEqual(['QueryCommand', 'BatchGetItemCommand']);
    expect(listed).toEqual([
      await store.get(mine[2]?.pk ?? ''),
      await store.get(mine[1]?.pk ?? ''),
      await store.get(mine[0]?.pk ?? ''),
    ]);
    expect(listed[1]?.status).toBe('failed');
    expect((await store.list({ scope: 'acct_dynamo', limit: 2 })).map((r) => r.key)).toEqual([
      mine[2]?.key,
      mine[1]?.key,
    ]);
  });

  it('list through an index that projects every attribute is the Query alone', async () => {
    const table = tableName();
    await local.client.send(
      new CreateTableCommand({
        TableName: table,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'scope', AttributeType: 'S' },
          { AttributeName: 'claimedAt', AttributeType: 'N' },
        ],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        GlobalSecondaryIndexes: [
          {
            IndexName: 'everything',
            KeySchema: [
              { AttributeName: 'scope', KeyType: 'HASH' },
              { AttributeName: 'claimedAt', KeyType: 'RANGE' },
            ],
            Projection: { ProjectionType: 'ALL' },
          },
        ],
      }),
    );
    track({ close: () => local.client.send(new DeleteTableCommand({ TableName: table })) });
    const store = dynamodbStore({ client: local.client, table, listIndex: 'everything' });
    const req = request();
    const { record } = await store.claim(req);
    const before = store.roundTrips;
    expect(await store.list({ scope: 'acct_dynamo', limit: 10 })).toEqual([record]);
    expect(store.roundTrips - before).toBe(1);
  });

  it('list on a table without the index fails in one line that names the fix; it never scans', async () => {
    const table = tableName();
    await local.client.send(
      new CreateTableCommand({
        TableName: table,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
      }),
    );
    track({ close: () => local.client.send(new DeleteTableCommand({ TableName: table })) });
    const store = dynamodbStore({ client: local.client, table });
    await store.claim(request());
    const before = store.roundTrips;
    await expect(store.list({ scope: 'acct_dynamo', limit: 10 })).rejects.toThrow(
      `dynamodb table ${table} has no index ${DEFAULT_LIST_INDEX} for list: add a global secondary index ` +
        `${DEFAULT_LIST_INDEX} (partition key scope S, sort key claimedAt N, projection KEYS_ONLY) with UpdateTable, ` +
        'or set listIndex to yours',
    );
    expect(store.roundTrips - before).toBe(1);
  });

  it('round-trips every byte value, and an empty body', async () => {
    const { store } = await recordingStore();
    const all = new Uint8Array(256).map((_, i) => i);
    for (const body of [all, new Uint8Array(0)]) {
      const req = request();
      await store.claim(req);
      const response = { status: 200, headers: [['content-type', 'application/octet-stream']] as const, body };
      const outcome = { status: 'succeeded', retryable: false, resultId: null, response } as const;
      expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
      const stored = await store.get(req.pk);
      expect(stored?.response?.body).toBeInstanceOf(Uint8Array);
      expect([...(stored?.response?.body ?? [1])]).toEqual([...body]);
      expect(stored?.response?.headers).toEqual([['content-type', 'application/octet-stream']]);
      expect(stored?.resultId).toBeNull();
    }
  });

  it('50 concurrent claims through 3 separate clients: exactly one is claimed', async () => {
    const table = tableName();
    const clients = [0, 1, 2].map(
      () =>
        new DynamoDBClient({
          region: 'local',
          endpoint: local.endpoint,
          credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
        }),
    );
    for (const client of clients) track({ close: async () => client.destroy() });
    const stores = clients.map((client) => dynamodbStore({ client, table }));
    await (stores[0] as DynamoDBStore).createTable({ pollMs: 10 });
    track({ close: () => local.client.send(new DeleteTableCommand({ TableName: table })) });
    const base = request();
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        (stores[i % 3] as DynamoDBStore).claim({ ...base, token: randomUUID(), id: randomUUID() }),
      ),
    );
    const winners = results.filter((r) => r.kind === 'claimed');
    expect(winners.length).toBe(1);
    const winner = (winners[0] as { record: IdempotencyRecord }).record;
    for (const r of results) expect(r.record.token).toBe(winner.token);
    expect((await (stores[2] as DynamoDBStore).get(base.pk))?.token).toBe(winner.token);
  });

  it('createTable creates a PAY_PER_REQUEST table with the list index, waits until ACTIVE, reports that TTL is not enabled, and is idempotent', async () => {
    const slow = track(await startLocalDynamo({ tableStateMs: 300 }));
    const table = tableName();
    const store = dynamodbStore({ client: slow.client, table });
    const result = await store.createTable({ pollMs: 20 });
    expect(result.created).toBe(true);
    expect(result.timeToLive).toBe('not-enabled');
    expect((result.timeToLiveError as Error).name).toBe('UnknownOperationException');
    const { Table } = await slow.client.send(new DescribeTableCommand({ TableName: table }));
    expect(Table?.TableStatus).toBe('ACTIVE');
    expect(Table?.BillingModeSummary?.BillingMode).toBe('PAY_PER_REQUEST');
    expect(Table?.KeySchema).toEqual([{ AttributeName: 'pk', KeyType: 'HASH' }]);
    expect(Table?.AttributeDefinitions).toEqual([
      { AttributeName: 'pk', AttributeType: 'S' },
      { AttributeName: 'scope', AttributeType: 'S' },
      { AttributeName: 'claimedAt', AttributeType: 'N' },
    ]);
    expect(
      Table?.GlobalSecondaryIndexes?.map(({ IndexName, KeySchema, Projection, IndexStatus }) => ({
        IndexName,
        KeySchema,
        Projection,
        IndexStatus,
      })),
    ).toEqual([
      {
        IndexName: DEFAULT_LIST_INDEX,
        KeySchema: [
          { AttributeName: 'scope', KeyType: 'HASH' },
          { AttributeName: 'claimedAt', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'KEYS_ONLY' },
        IndexStatus: 'ACTIVE',
      },
    ]);
    expect((await store.createTable({ pollMs: 20 })).created).toBe(false);
  });

  it('refuses effects: there is no transaction to run them in', async () => {
    const { store } = await recordingStore();
    const req = request();
    await store.claim(req);
    await expect(
      store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: failedOutcome, effects: () => undefined }),
    ).rejects.toThrow('dynamodb store has no transaction for effects');
    expect((await store.get(req.pk))?.status).toBe('in_progress');
  });

  it('a closed store refuses calls', async () => {
    const { store } = await recordingStore();
    await store.close();
    await expect(store.get('IDEMPOTENCY#a#b')).rejects.toThrow('dynamodb store is closed');
  });

  it('validates its options, naming the option', () => {
    const client = local.client;
    expect(() => dynamodbStore({ client: {} as DynamoDBClientLike, table: 'idem' })).toThrow(
      'Expected `client` to be an object with a send(command) method.',
    );
    expect(() => dynamodbStore({ client, table: 'x' })).toThrow('Expected `table` to be a DynamoDB table name');
    expect(() => dynamodbStore({ client, table: 'idem', listIndex: '' })).toThrow(
      'Expected `listIndex` to be a DynamoDB index name (3-255 of a-z A-Z 0-9 _ . -), got "".',
    );
    expect(() =>
      dynamodbStore({ client, table: 'idem', attributes: { pkk: 'PK' } as Partial<DynamoDBAttributeNames> }),
    ).toThrow('Expected `attributes.pkk` to be one of pk, scope,');
    expect(() => dynamodbStore({ client, table: 'idem', attributes: { status: '' } })).toThrow(
      'Expected `attributes.status` to be a non-empty string of at most 255 bytes, got "".',
    );
    expect(() => dynamodbStore({ client, table: 'idem', attributes: { status: 'é'.repeat(128) } })).toThrow(
      'Expected `attributes.status` to be a non-empty string of at most 255 bytes',
    );
    expect(() => dynamodbStore({ client, table: 'idem', sortKey: { name: 's'.repeat(256), value: 'X' } })).toThrow(
      'Expected `sortKey.name` to be a non-empty string of at most 255 bytes',
    );
    expect(() => dynamodbStore({ client, table: 'idem', attributes: { status: 'token' } })).toThrow(
      'Expected `attributes` to be distinct names (including sortKey.name)',
    );
    expect(() => dynamodbStore({ client, table: 'idem', sortKey: { name: 'pk', value: 'X' } })).toThrow(
      'Expected `attributes` to be distinct names (including sortKey.name)',
    );
  });
});

const failedOutcome = { status: 'failed', retryable: true, resultId: null, response: null } as const;
