/**
 * examples/express-postgres: Express 5 on PostgreSQL (ES modules), installed from the packed tarball, driven to
 * a replay. The work is counted in the example's own ledger table, whose row commits with the record's
 * completion: one row after a charge and its retry, none added by the reused key. The example runs in a schema of
 * its own, dropped afterwards.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { REPLAYED, runToReplay, useExample } from './kit.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const schema = `idem_example_${process.pid}`;
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
const example = useExample('express-postgres', {
  enabled: available,
  cleanup: async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool.end();
  },
});

describe.skipIf(!available)('examples/express-postgres', () => {
  it('charges once, replays the retry byte for byte, refuses the reused key; one ledger row', async () => {
    const replay = await runToReplay(example(), process.execPath, ['server.js'], {
      env: { DATABASE_URL: POSTGRES_URL, PG_SCHEMA: schema },
      headers: { authorization: 'Bearer acct_alice' },
      executions: async () =>
        Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${schema}.charges`)).rows[0]?.n),
    });
    expect(replay).toEqual(REPLAYED);
    const records = await pool.query(`SELECT scope, status FROM ${schema}.idempotency_records`);
    expect(records.rows).toEqual([{ scope: 'acct_alice', status: 'succeeded' }]);
  }, 120_000);
});
