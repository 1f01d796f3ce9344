/** The DynamoDB store's table: createTable, list through the scope index, and its options. */
import { BatchWriteItemCommand, DescribeTableCommand } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import {
  createActiveTable,
  failedOutcome,
  kinds,
  local,
  recordingStore,
  request,
  track,
  trackedTable,
} from '#test/fixtures/dynamodb.js';
import { startLocalDynamo } from '../../../../../apps/demo/src/local-dynamo.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import { DEFAULT_LIST_INDEX, dynamodbStore, type DynamoDBAttributeNames, type DynamoDBClientLike } from './index.js';

describe('dynamodb store against dynalite', () => {
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
    const table = trackedTable();
    await createActiveTable({
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
    });
    const store = dynamodbStore({ client: local.client, table, listIndex: 'everything' });
    const req = request();
    const { record } = await store.claim(req);
    const before = store.roundTrips;
    expect(await store.list({ scope: 'acct_dynamo', limit: 10 })).toEqual([record]);
    expect(store.roundTrips - before).toBe(1);
  });

  it('list on a table without the index fails in one line that names the fix; it never scans', async () => {
    const table = trackedTable();
    await createActiveTable({
      TableName: table,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
    });
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

  it('createTable creates a PAY_PER_REQUEST table with the list index, waits until ACTIVE, reports that TTL is not enabled, and is idempotent', async () => {
    const slow = track(await startLocalDynamo({ tableStateMs: 300 }));
    const table = trackedTable(slow);
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
