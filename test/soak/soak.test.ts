/**
 * Soak (issue 6, item 5): one real server (SQLite), a bounded run of requests mixing new keys, replays,
 * in-flight conflicts, mismatched payloads, keyless charges and invalid keys, every answer checked as it
 * arrives, and the server's RSS sampled along the way: it must level off — no growth from a cache, listeners
 * or timers — and the ledger must hold exactly the charges the run made.
 *
 * `npm test` runs 20k requests; `npm run soak` runs 200k (IDEM_SOAK_REQUESTS) and, with IDEM_SOAK_OUT=<file>,
 * writes the curve there as JSON. The bound is generous on purpose: RSS is noisy, a leak is a trend.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { startDemo, tempDir } from '../harness.js';
import { describeCurve, levelsOff, soak } from './load.js';

const REQUESTS = Number(process.env.IDEM_SOAK_REQUESTS ?? 20_000);

describe(`soak: ${REQUESTS} requests against one server`, () => {
  it(
    "every answer is right, the ledger holds exactly the run's charges, and RSS levels off",
    async () => {
      const dir = tempDir('idem-soak-');
      const server = await startDemo({ IDEM_STORE: `sqlite:${join(dir.path, 'idem.db')}`, LOG_LEVEL: 'warn' });
      try {
        const result = await soak({ url: server.url, pid: server.child.pid as number, requests: REQUESTS });
        const memory = levelsOff(result.samples);
        console.log(
          `\nsoak: ${result.requests} requests in ${result.seconds.toFixed(1)} s (${Math.round(result.requests / result.seconds)}/s), ` +
            `mix ${JSON.stringify(result.counts)}\n` +
            `RSS middle-third max ${memory.middleMax.toFixed(1)} MiB, last-third max ${memory.lastMax.toFixed(1)} MiB (limit ${memory.limit.toFixed(1)})\n` +
            describeCurve(result.samples),
        );
        if (process.env.IDEM_SOAK_OUT)
          writeFileSync(process.env.IDEM_SOAK_OUT, JSON.stringify({ ...result, memory }, null, 1));
        expect(result.errors).toEqual([]);
        const db = new Database(join(dir.path, 'idem.db'), { readonly: true });
        const [charges, records] = [
          (db.prepare('SELECT COUNT(*) AS n FROM charges').get() as { n: number }).n,
          (db.prepare('SELECT COUNT(*) AS n FROM idem_records').get() as { n: number }).n,
        ];
        db.close();
        expect([charges, records]).toEqual([result.expectedCharges, result.expectedRecords]);
        expect(memory.ok).toBe(true);
      } finally {
        await server.stop();
        dir.remove();
      }
    },
    Math.max(120_000, REQUESTS * 3),
  );
});
