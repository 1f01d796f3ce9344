/** Reading one scope's records through its index, never the keyspace. */
import { recordPk } from '../../core/key.js';
import type { IdempotencyRecord, ListRequest } from '../contract.js';
import { decode } from './codec.js';
import { redisKeys } from './schema.js';
import { SCRIPTS } from './scripts.js';
import type { RedisCommands } from './send.js';

/** Expired index members one `list` call removes at most before it returns and is called again. */
const LIST_PRUNE_BUDGET = 1_000;

export async function list(
  io: RedisCommands,
  prefix: string,
  { scope, limit }: ListRequest,
): Promise<IdempotencyRecord[]> {
  if (!(limit > 0)) return [];
  const { index, base } = redisKeys(prefix, recordPk(scope, ''));
  for (;;) {
    const reply = await io.run(
      'list',
      SCRIPTS.list,
      [index],
      base,
      String(Math.floor(limit)),
      String(LIST_PRUNE_BUDGET),
    );
    if (!Array.isArray(reply) || !Array.isArray(reply[1]))
      throw new Error(`redis list script returned an unexpected reply for ${scope}`);
    // 1: it stopped after pruning its budget of expired members; the next call picks up where it left off.
    if (reply[0] === 1) continue;
    return (reply[1] as unknown[]).map((fields) => {
      const record = decode(recordPk(scope, '?'), fields);
      if (record === null) throw new Error(`redis list script returned an empty record for ${scope}`);
      return { ...record, pk: recordPk(scope, record.key) };
    });
  }
}
