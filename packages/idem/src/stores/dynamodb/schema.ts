/** The table: its name's rule, and the helper that creates it with its list index and native TTL. */
import {
  CreateTableCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  ResourceInUseException,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { configError } from '../../core/errors.js';
import type { CreateTableOptions, CreateTableResult } from './dynamodb-options.js';
import type { DynamoTable } from './send.js';

/** DynamoDB's rule for a table's (and an index's) name. */
export const TABLE_NAME = /^[a-zA-Z0-9_.-]{3,255}$/;

/** `store.createTable()`: what it does is told on `DynamoDBStore.createTable` (options.ts). */
export async function createTable(
  t: DynamoTable,
  { timeoutMs = 120_000, pollMs = 500 }: CreateTableOptions = {},
): Promise<CreateTableResult> {
  t.open();
  if (!(timeoutMs > 0)) throw configError('timeoutMs', 'a positive number', timeoutMs);
  if (!(pollMs > 0)) throw configError('pollMs', 'a positive number', pollMs);
  const n = t.names;
  let created = true;
  try {
    await t.via('createTable')(
      new CreateTableCommand({
        TableName: t.table,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: n.pk, AttributeType: 'S' },
          ...(t.sortKey ? [{ AttributeName: t.sortKey.name, AttributeType: 'S' as const }] : []),
          { AttributeName: n.scope, AttributeType: 'S' },
          { AttributeName: n.claimedAt, AttributeType: 'N' },
        ],
        KeySchema: [
          { AttributeName: n.pk, KeyType: 'HASH' },
          ...(t.sortKey ? [{ AttributeName: t.sortKey.name, KeyType: 'RANGE' as const }] : []),
        ],
        GlobalSecondaryIndexes: [
          {
            IndexName: t.listIndex,
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
    const { Table } = await t.via('createTable')(new DescribeTableCommand({ TableName: t.table }));
    const indexes = Table?.GlobalSecondaryIndexes ?? [];
    if (Table?.TableStatus === 'ACTIVE' && indexes.every((index) => index.IndexStatus === 'ACTIVE')) break;
    if (Date.now() >= deadline) {
      throw new Error(`dynamodb table ${t.table} is not ACTIVE after ${timeoutMs} ms (${Table?.TableStatus})`);
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }

  try {
    const { TimeToLiveDescription: ttl } = await t.via('createTable')(
      new DescribeTimeToLiveCommand({ TableName: t.table }),
    );
    const on = ttl?.TimeToLiveStatus === 'ENABLED' || ttl?.TimeToLiveStatus === 'ENABLING';
    if (!(on && ttl?.AttributeName === n.expiresAt)) {
      await t.via('createTable')(
        new UpdateTimeToLiveCommand({
          TableName: t.table,
          TimeToLiveSpecification: { AttributeName: n.expiresAt, Enabled: true },
        }),
      );
    }
    return { created, timeToLive: 'enabled' };
  } catch (error) {
    return { created, timeToLive: 'not-enabled', timeToLiveError: error };
  }
}
