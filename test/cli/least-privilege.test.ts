/**
 * `idem records` under the least-privilege role docs/OPERATIONS.md recommends: USAGE on Idem's schema and
 * SELECT, INSERT, UPDATE, DELETE on its table, nothing else. The commands run no DDL (no demo `charges` table, no
 * CREATE SCHEMA), and `migrate` creates Idem's table and nothing else.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { postgresStore } from 'idem/stores/postgres';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { inProcess } from './helpers.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);

describe.skipIf(!available)('idem records as a role with only DML on Idem’s table', () => {
  const suffix = randomBytes(4).toString('hex');
  const schema = `idem_lp_${suffix}`;
  const role = `idem_lp_${suffix}`;
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  const asAdmin = `${POSTGRES_URL}?schema=${schema}`;
  const url = new URL(POSTGRES_URL);
  url.username = role;
  url.password = '';
  const asRole = `${url.toString()}?schema=${schema}`;
  const key = `lp-${randomUUID()}`;
  const tables = async () =>
    (
      await admin.query<{ table_name: string }>(
        'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1',
        [schema],
      )
    ).rows.map((row) => row.table_name);

  beforeAll(async () => {
    const migrated = await inProcess(['migrate', '--store', asAdmin]);
    expect(migrated.code, migrated.stderr).toBe(0);
    await admin.query(`CREATE ROLE ${role} LOGIN`);
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
    await admin.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.idempotency_records TO ${role}`);
    const store = postgresStore({ pool: admin, schema });
    const now = Date.now();
    const claimed = await store.claim({
      pk: recordPk('acct_lp', key),
      scope: 'acct_lp',
      key,
      fingerprint: 'f'.repeat(64),
      token: randomUUID(),
      id: randomUUID(),
      now,
      leaseMs: 60_000,
      ttlMs: 3_600_000,
    });
    expect(claimed.kind).toBe('claimed');
  });

  afterAll(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  });

  it('migrate created Idem’s table and nothing else', async () => {
    expect(await tables()).toEqual(['idempotency_records']);
  });

  it('list, show and sweep succeed, and leave the schema as it was', async () => {
    const list = await inProcess(['records', 'list', '--store', asRole, '--scope', 'acct_lp', '--json']);
    expect([list.code, list.stderr]).toEqual([0, '']);
    expect((JSON.parse(list.stdout) as Array<{ key: string }>).map((record) => record.key)).toEqual([key]);
    const show = await inProcess(['records', 'show', key, '--store', asRole, '--scope', 'acct_lp', '--json']);
    expect([show.code, show.stderr, (JSON.parse(show.stdout) as { status: string }).status]).toEqual([
      0,
      '',
      'in_progress',
    ]);
    const sweep = await inProcess(['records', 'sweep', '--store', asRole, '--json']);
    expect([sweep.code, sweep.stderr, (JSON.parse(sweep.stdout) as { deleted: number }).deleted]).toEqual([0, '', 0]);
    expect(await tables()).toEqual(['idempotency_records']);
  });

  it('migrate under that role fails (it may not create), exit 1 with the store’s message', async () => {
    const { code, stderr } = await inProcess(['migrate', '--store', asRole]);
    expect([code, stderr]).toEqual([1, `idem migrate: ${asRole}: permission denied for schema ${schema}\n`]);
  });
});
