/** The SQLite store's options, its schema and how it stores each value. */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import type { Outcome } from 'idem';
import { describe, expect, it } from 'vitest';
import { claimRequest, freshFile, freshStore } from '#test/fixtures/sqlite.js';
import { LEASE, SUCCEEDED as succeeded, T0, TTL } from '../../testing/fixtures.js';
import { sqliteSchema, sqliteStore } from './index.js';

describe('sqlite store: options and schema', () => {
  it('validates its options at once, naming the option', () => {
    const database = new Database(':memory:');
    expect(() => sqliteStore({ database: undefined as unknown as Database.Database })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: 'Expected `database` to be an open better-sqlite3 Database.',
      }),
    );
    expect(() => sqliteStore({ database, table: 'idem records; --' })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message:
          'Expected `table` to be an SQL identifier (letters, digits and _, not starting with a digit or sqlite_), got "idem records; --".',
      }),
    );
    expect(() => sqliteStore({ database, table: 'sqlite_records' })).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID' }),
    );
    expect(() => sqliteStore({ database, busyTimeoutMs: -1 })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: 'Expected `busyTimeoutMs` to be a non-negative integer, got -1.',
      }),
    );
    database.close();
  });

  it('sets WAL and the busy timeout on the database', async () => {
    const store = await freshStore({ busyTimeoutMs: 1_234 });
    expect(store.database.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(store.database.pragma('busy_timeout', { simple: true })).toBe(1_234);
    await store.close();
    const defaults = await freshStore();
    expect(defaults.database.pragma('busy_timeout', { simple: true })).toBe(5_000);
    await defaults.close();
  });

  it('migrate() is idempotent and creates exactly the DDL of the built schema.sql', async () => {
    const master = (database: Database.Database) =>
      database
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .all();
    const store = await freshStore();
    await store.migrate();
    const fromFile = new Database(freshFile());
    fromFile.exec(
      readFileSync(fileURLToPath(new URL('../../../dist/stores/sqlite/schema.sql', import.meta.url)), 'utf8'),
    );
    expect(master(store.database)).toEqual(master(fromFile));
    expect(master(store.database).map((row) => (row as { name: string }).name)).toEqual([
      'idem_records',
      'idem_records_expires_at',
      'idem_records_scope_claimed_at',
    ]);
    fromFile.close();
    await store.close();
  });

  it('uses the table it is given, and sqliteSchema() names its indexes after it', async () => {
    expect(sqliteSchema('payments_idem')).toContain(
      'CREATE INDEX IF NOT EXISTS "payments_idem_expires_at" ON "payments_idem"',
    );
    const store = await freshStore({ table: 'payments_idem' });
    const req = claimRequest();
    await store.claim(req);
    const tables = store.database
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
      .pluck()
      .all();
    expect(tables).toEqual(['payments_idem']);
    expect(store.database.prepare('SELECT token FROM payments_idem').pluck().all()).toEqual([req.token]);
    await store.close();
  });

  it('stores times as INTEGER ms, booleans as 0/1, headers as JSON text and the body as a BLOB', async () => {
    const store = await freshStore();
    const req = claimRequest();
    await store.claim(req);
    await store.complete({
      pk: req.pk,
      token: req.token,
      now: T0 + 1,
      outcome: { ...succeeded, status: 'failed', retryable: true },
    });
    const row = store.database
      .prepare(
        `SELECT typeof(claimed_at) AS t_claimed, claimed_at, lease_expires_at, expires_at, retryable,
           typeof(response_headers) AS t_headers, response_headers, typeof(response_body) AS t_body, response_body
         FROM idem_records`,
      )
      .get();
    expect(row).toEqual({
      t_claimed: 'integer',
      claimed_at: T0,
      lease_expires_at: T0 + LEASE,
      expires_at: T0 + TTL,
      retryable: 1,
      t_headers: 'text',
      response_headers: '[["content-type","application/json"]]',
      t_body: 'blob',
      response_body: Buffer.from([0x7b, 0x7d]),
    });
    await store.close();
  });

  it('keeps an empty response body as zero bytes, not as no response', async () => {
    const store = await freshStore();
    const req = claimRequest();
    await store.claim(req);
    const empty: Outcome = { ...succeeded, response: { status: 204, headers: [], body: new Uint8Array() } };
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: empty })).toEqual({ ok: true });
    const response = (await store.get(req.pk))?.response;
    expect(response?.status).toBe(204);
    expect(response?.body).toEqual(new Uint8Array());
    await store.close();
  });

  it('close() leaves a database it was given open unless closeDatabase is set, and refuses calls after', async () => {
    const database = new Database(freshFile());
    const store = sqliteStore({ database });
    await store.migrate();
    await store.close();
    expect(database.open).toBe(true);
    await expect(store.get('IDEMPOTENCY#a#b')).rejects.toThrow('sqlite store is closed');
    const owning = sqliteStore({ database, closeDatabase: true });
    await owning.close();
    expect(database.open).toBe(false);
  });
});
