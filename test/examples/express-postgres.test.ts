/**
 * examples/express-postgres: Express 5 on PostgreSQL (ES modules), installed from the packed tarball, driven to
 * a replay. The work is counted in the example's own ledger table, whose row commits with the record's
 * completion: one row after a charge and its retry, none added by the reused key. The example runs in a schema of
 * its own, dropped afterwards.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { driveReplay, installExample, REPLAYED, startExample, timings, type Installed } from './kit.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const schema = `idem_example_${process.pid}`;
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
let example: Installed | undefined;

beforeAll(async () => {
  if (available) example = await installExample('express-postgres');
}, 300_000);
afterAll(async () => {
  example?.remove();
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await pool.end();
  console.log(`[examples/express-postgres] ${JSON.stringify(timings)}`);
});

describe.skipIf(!available)('examples/express-postgres', () => {
  it('charges once, replays the retry byte for byte, refuses the reused key; one ledger row', async () => {
    if (!example) throw new Error('not installed');
    const server = await startExample(process.execPath, ['server.js'], {
      cwd: example.dir,
      env: { DATABASE_URL: POSTGRES_URL, PG_SCHEMA: schema },
    });
    try {
      const replay = await driveReplay({
        url: `${server.base}/v1/charges`,
        headers: { authorization: 'Bearer acct_alice' },
        body: { amount: 5000, currency: 'usd' },
        otherBody: { amount: 9000, currency: 'usd' },
        executions: async () =>
          Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${schema}.charges`)).rows[0]?.n),
      });
      expect(replay).toEqual(REPLAYED);
      const records = await pool.query(`SELECT scope, status FROM ${schema}.idempotency_records`);
      expect(records.rows).toEqual([{ scope: 'acct_alice', status: 'succeeded' }]);
    } finally {
      await server.stop();
    }
  }, 120_000);
});
