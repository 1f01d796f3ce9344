/** Reading one scope's records through the list index, never a Scan. */
import {
  BatchGetItemCommand,
  DynamoDBServiceException,
  IndexNotFoundException,
  QueryCommand,
} from '@aws-sdk/client-dynamodb';
import type { BatchGetItemCommandOutput, QueryCommandOutput } from '@aws-sdk/client-dynamodb';
import type { IdempotencyRecord, ListRequest } from '../contract.js';
import { MAX_CLAIM_ATTEMPTS } from './claim.js';
import { decodeItem, str, type Item } from './codec.js';
import type { DynamoTable } from './send.js';

/**
 * A scope's records, newest claim first: a Query of `listIndex` (eventually consistent) for the newest `limit`
 * keys of the scope, then one consistent BatchGetItem for the items themselves (skipped when the index projects
 * every attribute). Two round trips for up to 100 records, whatever else the table holds; never a Scan.
 */
export async function list(t: DynamoTable, { scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
  t.open();
  if (!(limit > 0)) return [];
  const n = t.names;
  const found: Item[] = [];
  let start: Item | undefined;
  do {
    let page: QueryCommandOutput;
    try {
      page = await t.via('list')(
        new QueryCommand({
          TableName: t.table,
          IndexName: t.listIndex,
          ScanIndexForward: false,
          Limit: limit - found.length,
          ExclusiveStartKey: start,
          KeyConditionExpression: '#scope = :scope',
          FilterExpression: t.ours(),
          ExpressionAttributeNames: t.placeholders(`#scope ${t.ours()}`),
          ExpressionAttributeValues: { ...t.oursValues(), ':scope': str(scope) },
        }),
      );
    } catch (error) {
      if (!isMissingIndex(error)) throw error;
      throw new Error(
        `dynamodb table ${t.table} has no index ${t.listIndex} for list: add a global secondary index ` +
          `${t.listIndex} (partition key ${n.scope} S, sort key ${n.claimedAt} N, projection KEYS_ONLY) ` +
          `with UpdateTable, or set listIndex to yours`,
        { cause: error },
      );
    }
    found.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start !== undefined && found.length < limit);

  const keys = found.slice(0, limit);
  // An index projecting every attribute (ALL) has answered already; a KEYS_ONLY one names the items to read.
  const items = keys.every((item) => item[n.status] !== undefined) ? keys : await readMany(t, keys);
  return items.map((item) => decodeItem(t.names, item)).sort((a, b) => b.claimedAt - a.claimedAt);
}

/** The items at `keys` (each an item's primary key, plus whatever else), consistently, in batches of 100. */
async function readMany(t: DynamoTable, keys: Item[]): Promise<Item[]> {
  const items: Item[] = [];
  const keyOf = (item: Item): Item => t.key(item[t.names.pk]?.S ?? '');
  for (let i = 0; i < keys.length; i += 100) {
    let pending: Item[] | undefined = keys.slice(i, i + 100).map(keyOf);
    // UnprocessedKeys (throttling, or 16 MB per answer) are asked for again; each attempt is a round trip.
    for (let attempt = 0; pending && pending.length > 0; attempt++) {
      if (attempt >= MAX_CLAIM_ATTEMPTS) throw new Error(`dynamodb list of ${t.table}: BatchGetItem left keys unread`);
      const { Responses, UnprocessedKeys }: BatchGetItemCommandOutput = await t.via('list')(
        new BatchGetItemCommand({ RequestItems: { [t.table]: { Keys: pending, ConsistentRead: true } } }),
      );
      // An item deleted since the Query (released, swept) is simply not there.
      items.push(...(Responses?.[t.table] ?? []));
      pending = UnprocessedKeys?.[t.table]?.Keys;
    }
  }
  return items;
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
