/** Deleting expired items on demand: for engines without native TTL, and for operators. */
import { DeleteItemCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import { configError } from '../../core/errors.js';
import type { SweepRequest } from '../contract.js';
import { num, type Item } from './codec.js';
import type { DynamoTable } from './send.js';

/**
 * Native TTL deletes expired items on DynamoDB, and the claim treats them as absent meanwhile, so there is no
 * need to schedule this there. It exists for engines without TTL (dynalite, DynamoDB Local) and for operators:
 * a consistent Scan for expired idempotency items, each deleted only if it is *still* expired (a conditional
 * DeleteItem), so an item reclaimed between the scan and the delete survives.
 */
export async function sweep(t: DynamoTable, { now, batchSize = 100, limit = Infinity }: SweepRequest): Promise<number> {
  t.open();
  if (!Number.isInteger(batchSize) || batchSize <= 0) throw configError('batchSize', 'a positive integer', batchSize);
  if (!(limit > 0)) throw configError('limit', 'a positive number', limit);
  let deleted = 0;
  let start: Item | undefined;
  do {
    const page = await t.via('sweep')(
      new ScanCommand({
        TableName: t.table,
        ConsistentRead: true,
        Limit: batchSize,
        ExclusiveStartKey: start,
        ProjectionExpression: '#pk',
        ...t.filter(`${t.ours()} AND #expiresAtMs <= :now`, { ...t.oursValues(), ':now': num(now) }),
      }),
    );
    for (const item of page.Items ?? []) {
      if (deleted >= limit) return deleted;
      const pk = item[t.names.pk]?.S;
      if (pk === undefined) continue;
      const gone = await t.heldWrite(
        new DeleteItemCommand({
          TableName: t.table,
          Key: t.key(pk),
          ...t.condition('#expiresAtMs <= :now', { ':now': num(now) }),
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
