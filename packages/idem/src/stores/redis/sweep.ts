/**
 * Deleting expired records on demand, and pruning the scope indexes of members whose records are gone, by `SCAN`:
 * for operators, never a hot path (records expire natively; the indexes are pruned only here and by `list`).
 */
import type { SweepRequest } from '../contract.js';
import { globEscape, parseKey, PK_PREFIX } from './schema.js';
import { SCRIPTS } from './scripts.js';
import type { RedisCommands } from './send.js';

export async function sweep(
  io: RedisCommands,
  prefix: string,
  scanCount: number,
  { now, batchSize = scanCount, limit = Infinity }: SweepRequest,
): Promise<number> {
  let deleted = 0;
  // On a Cluster, each primary's keys: a scope's records live on the primary serving its slot.
  primaries: for (const node of await io.nodes('master')) {
    for await (const page of io.scan(node, 'sweep', `${globEscape(`${prefix}{${PK_PREFIX}`)}*`, batchSize)) {
      const found = page.map((key) => parseKey(prefix, key)).filter((keys) => keys !== undefined);
      const records = found.filter((keys) => keys.kind === 'record');
      // Each call deletes at most one record, so a chunk no larger than what is left never overshoots `limit`.
      for (let i = 0; i < records.length && deleted < limit;) {
        const chunk = records.slice(i, i + Math.min(records.length, limit - deleted));
        i += chunk.length;
        const replies = await Promise.all(
          chunk.map(({ record, index, member }) =>
            io.run('sweep', SCRIPTS.sweep, [record, index], String(now), member),
          ),
        );
        deleted += replies.filter((reply) => reply === 1).length;
      }
      if (deleted >= limit) break primaries;
      // Members whose records expired natively, which no claim or list has pruned yet.
      for (const { index, base } of found.filter((keys) => keys.kind === 'index')) {
        for (let start = 0, checked = batchSize; checked === batchSize;) {
          const reply = await io.run('sweep', SCRIPTS.prune, [index], base, String(start), String(batchSize));
          [start, , checked] = reply as [number, number, number];
        }
      }
    }
  }
  return deleted;
}
