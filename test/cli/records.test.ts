/**
 * `idem migrate` and `idem records list|show|sweep` against a real SQLite file and a real PostgreSQL schema
 * (isolated by `?schema=` in the URL), with records seeded through the store itself.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk, type IdempotencyStore, type StoredResponse } from 'idem';
import { postgresStore } from 'idem/stores/postgres';
import { sqliteStore } from 'idem/stores/sqlite';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { idem, inProcess, keyHash } from './helpers.js';

const HOUR = 3_600_000;
const SCOPE = 'acct_cli';
const body = (text: string) => new TextEncoder().encode(text);

interface Seeded {
  readonly succeeded: string;
  readonly declined: string;
  readonly running: string;
}

/** Three live records (succeeded, failed final, in progress) and `expired` records whose TTL has passed. */
async function seed(store: IdempotencyStore<never>, expired: number): Promise<Seeded> {
  const now = Date.now();
  const claim = async (key: string, at: number, ttlMs: number) => {
    const result = await store.claim({
      pk: recordPk(SCOPE, key),
      scope: SCOPE,
      key,
      fingerprint: 'f'.repeat(64),
      token: randomUUID(),
      id: randomUUID(),
      now: at,
      leaseMs: 60_000,
      ttlMs,
    });
    expect(result.kind).toBe('claimed');
    return result.record;
  };
  const respond = (status: number, text: string): StoredResponse => ({
    status,
    headers: [['content-type', 'application/json']],
    body: body(text),
  });
  const keys = { succeeded: `ok-${randomUUID()}`, declined: `no-${randomUUID()}`, running: `run-${randomUUID()}` };
  /** Claims `key` at `at` and completes it 100 ms later, final, with `status` and the answer `code` + `text`. */
  const settle = async (
    key: string,
    at: number,
    status: 'succeeded' | 'failed',
    resultId: string,
    code: number,
    text: string,
  ) => {
    const record = await claim(key, at, 24 * HOUR);
    await store.complete({
      pk: record.pk,
      token: record.token,
      now: at + 100,
      outcome: { status, retryable: false, resultId, response: respond(code, text) },
    });
  };
  await settle(keys.succeeded, now - 3000, 'succeeded', 'ch_1', 201, '{"id":"ch_1","amount":500}');
  await settle(keys.declined, now - 2000, 'failed', 'ch_2', 402, '{"type":"urn:idem:problem:card-declined"}');
  await claim(keys.running, now - 1000, 24 * HOUR);
  for (let i = 0; i < expired; i++) await claim(`old-${i}`, now - 3 * HOUR, HOUR);
  return keys;
}

function suite(
  name: string,
  setup: () => Promise<{
    url: string;
    open: () => Promise<{ store: IdempotencyStore<never>; close: () => Promise<void> }>;
    cleanup: () => Promise<void>;
  }>,
) {
  // The cases are independent (the sweep deletes only expired records, which no other case looks at): run them at once.
  describe.concurrent(name, () => {
    let url: string;
    let keys: Seeded;
    let cleanup: () => Promise<void>;
    beforeAll(async () => {
      const context = await setup();
      url = context.url;
      cleanup = context.cleanup;
      const migrated = await idem(['migrate', '--store', url]);
      expect([migrated.code, migrated.stderr]).toEqual([0, '']);
      expect(migrated.stdout).toMatch(/^Migrated: /);
      const { store, close } = await context.open();
      try {
        keys = await seed(store, 25);
      } finally {
        await close();
      }
    });
    afterAll(async () => {
      await cleanup();
    });

    it('migrate again is a no-op that succeeds', async () => {
      const again = await inProcess(['migrate', '--store', url]);
      expect([again.code, again.stderr]).toEqual([0, '']);
    });

    it('records list --json: the scope’s records, newest claim first, with the key hash and no body', async () => {
      const { code, stdout, stderr } = await inProcess([
        'records',
        'list',
        '--store',
        url,
        '--scope',
        SCOPE,
        '--limit',
        '3',
        '--json',
      ]);
      expect([code, stderr]).toEqual([0, '']);
      const records = JSON.parse(stdout) as Array<Record<string, unknown>>;
      expect(
        records.map((r) => [
          r.key,
          r.keyHash,
          r.status,
          r.retryable,
          r.resultId,
          (r.response as { status: number } | null)?.status ?? null,
        ]),
      ).toEqual([
        [keys.running, keyHash(keys.running), 'in_progress', null, null, null],
        [keys.declined, keyHash(keys.declined), 'failed', false, 'ch_2', 402],
        [keys.succeeded, keyHash(keys.succeeded), 'succeeded', null, 'ch_1', 201],
      ]);
      expect(records[2]?.response).toEqual({ status: 201, headers: { 'content-type': 'application/json' }, bytes: 26 });
    });

    it('records list: a table for people', async () => {
      const { code, stdout } = await inProcess(['records', 'list', '--store', url, '--scope', SCOPE, '--limit', '3']);
      expect(code).toBe(0);
      const lines = stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(/^KEY\s+KEY HASH\s+STATUS\s+HTTP\s+RESULT\s+CLAIMED \(UTC\)\s+EXPIRES \(UTC\)$/);
      expect(lines[2]).toMatch(
        new RegExp(`^${keys.running}\\s+${keyHash(keys.running)}\\s+in_progress\\s+-\\s+-\\s+\\d{4}-`),
      );
      expect(lines[3]).toMatch(
        new RegExp(`^${keys.declined}\\s+${keyHash(keys.declined)}\\s+failed \\(final\\)\\s+402\\s+ch_2\\s`),
      );
      expect(lines[4]).toMatch(
        new RegExp(`^${keys.succeeded}\\s+${keyHash(keys.succeeded)}\\s+succeeded\\s+201\\s+ch_1\\s`),
      );
      expect(lines[5]).toBe('3 records (the newest 3; --limit for more)');
    });

    it('records list for a scope with nothing: says so', async () => {
      const { code, stdout } = await inProcess(['records', 'list', '--store', url, '--scope', 'acct_nobody']);
      expect([code, stdout]).toEqual([0, 'No records for scope acct_nobody.\n']);
    });

    it('records show KEY: the record, and with --body the stored response', async () => {
      const text = await inProcess(['records', 'show', keys.succeeded, '--store', url, '--scope', SCOPE, '--body']);
      expect(text.code).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`^key +${keys.succeeded}\n`));
      expect(text.stdout).toMatch(/\nstatus +succeeded\n/);
      expect(text.stdout).toMatch(/\nresponse +201, 26 bytes\n {2}content-type +application\/json\n/);
      expect(text.stdout.endsWith('\n\n{"id":"ch_1","amount":500}\n')).toBe(true);
      const json = await inProcess(['records', 'show', keys.declined, '--store', url, '--scope', SCOPE, '--json']);
      expect(JSON.parse(json.stdout)).toMatchObject({
        key: keys.declined,
        pk: `IDEMPOTENCY#${SCOPE}#${keys.declined}`,
        status: 'failed',
        retryable: false,
        expired: false,
        response: { status: 402, bytes: 41 },
      });
    });

    it('records show of a key that is not there: exit 1', async () => {
      const { code, stdout, stderr } = await inProcess(['records', 'show', 'nope', '--store', url, '--scope', SCOPE]);
      expect({ code, stdout, stderr }).toEqual({
        code: 1,
        stdout: '',
        stderr: `idem records show: no record for key "nope" in scope ${SCOPE}.\n`,
      });
    });

    it('records sweep deletes the 25 expired records in batches of 10 with a progress line each, then nothing', async () => {
      const first = await inProcess(['records', 'sweep', '--store', url, '--batch-size', '10']);
      expect(first.code).toBe(0);
      expect(first.stderr).toBe(
        'swept batch 1: 10 deleted (10 so far)\nswept batch 2: 10 deleted (20 so far)\nswept batch 3: 5 deleted (25 so far)\n',
      );
      expect(first.stdout).toMatch(/^Deleted 25 expired records from .* in \d+\.\d\d s\.\n$/);
      const second = await inProcess(['records', 'sweep', '--store', url, '--json']);
      expect([second.code, second.stderr]).toEqual([0, '']);
      expect(JSON.parse(second.stdout)).toMatchObject({ deleted: 0, batches: 1, batchSize: 1000 });
      // The live records are untouched.
      const listed = await inProcess(['records', 'list', '--store', url, '--scope', SCOPE, '--json']);
      expect((JSON.parse(listed.stdout) as unknown[]).length).toBe(3);
    });
  });
}

suite('idem records on SQLite', async () => {
  const dir = tempDir();
  const path = `${dir.path}/idem.db`;
  return {
    url: `sqlite:${path}`,
    open: async () => {
      const database = new Database(path);
      const store = sqliteStore({ database });
      const close = async () => {
        await store.close();
        database.close();
      };
      return { store: store as unknown as IdempotencyStore<never>, close };
    },
    cleanup: async () => dir.remove(),
  };
});

const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
describe.skipIf(!postgresUp)('PostgreSQL', () => {
  const schema = `idem_cli_${randomBytes(4).toString('hex')}`;
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('schema', schema);
  suite('idem records on PostgreSQL (schema from the URL)', async () => ({
    url: url.toString(),
    open: async () => {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
      const store = postgresStore<pg.PoolClient>({ pool, schema });
      return { store: store as unknown as IdempotencyStore<never>, close: () => pool.end() };
    },
    cleanup: async () => {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  }));
});

describe('idem records on memory:', () => {
  it('migrate has nothing to do; list finds nothing (a fresh store per command)', async () => {
    const migrated = await idem(['migrate', '--store', 'memory:']);
    expect([migrated.code, migrated.stderr]).toEqual([0, '']);
    expect(migrated.stdout).toMatch(/^Nothing to migrate: the memory store needs no schema \(.*\)\.\n$/);
    const listed = await inProcess(['records', 'list', '--store', 'memory:', '--scope', SCOPE]);
    expect(listed).toEqual({ code: 0, stdout: `No records for scope ${SCOPE}.\n`, stderr: '' });
  });
});
