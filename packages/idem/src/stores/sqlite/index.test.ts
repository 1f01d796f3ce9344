import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { createEngine, manualClock, recordPk } from 'idem';
import type { ClaimRequest, Outcome, RoundTrip } from 'idem';
import { describeStoreConformance } from 'idem/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { sqliteSchema, sqliteStore } from './index.js';
import type { SqliteDatabase, SqliteStoreOptions } from './index.js';

const dir = mkdtempSync(join(tmpdir(), 'idem-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const freshFile = (): string => join(dir, `${randomUUID()}.db`);

/** A migrated store on a new database file of its own; closing the store closes the database. */
async function freshStore(options: Partial<SqliteStoreOptions<Database.Database>> = {}) {
  const store = sqliteStore({ database: new Database(freshFile()), closeDatabase: true, ...options });
  await store.migrate();
  return store;
}

describeStoreConformance({ name: 'sqlite', create: () => freshStore() });

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;
const scope = 'acct_sqlite';

const claimRequest = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => {
  const key = overrides.key ?? randomUUID();
  return {
    pk: recordPk(scope, key),
    scope,
    key,
    fingerprint: 'f'.repeat(64),
    token: randomUUID(),
    id: randomUUID(),
    now: T0,
    leaseMs: LEASE,
    ttlMs: TTL,
    ...overrides,
  };
};

const succeeded: Outcome = {
  status: 'succeeded',
  retryable: false,
  resultId: 'ch_1',
  response: { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array([0x7b, 0x7d]) },
};

/** A store with a `ledger` table beside the records, as the demo has. */
async function storeWithLedger() {
  const store = await freshStore();
  store.database.exec(
    'CREATE TABLE ledger (charge_id TEXT PRIMARY KEY, record_id TEXT NOT NULL UNIQUE, amount INTEGER NOT NULL)',
  );
  const ledger = () =>
    store.database.prepare('SELECT charge_id, record_id, amount FROM ledger ORDER BY charge_id').all();
  return { store, ledger };
}

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

  it('migrate() is idempotent and creates exactly the DDL of schema.sql', async () => {
    const master = (database: Database.Database) =>
      database
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .all();
    const store = await freshStore();
    await store.migrate();
    const fromFile = new Database(freshFile());
    fromFile.exec(readFileSync(fileURLToPath(new URL('./schema.sql', import.meta.url)), 'utf8'));
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

describe('sqlite store: effects commit with the completion, in one transaction', () => {
  it('effects that insert a row commit together with an ok completion', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    await store.claim(req);
    const result = await store.complete({
      pk: req.pk,
      token: req.token,
      now: T0 + 1,
      outcome: succeeded,
      effects: (tx) => tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run('ch_1', req.id, 500),
    });
    expect(result).toEqual({ ok: true });
    expect(ledger()).toEqual([{ charge_id: 'ch_1', record_id: req.id, amount: 500 }]);
    expect((await store.get(req.pk))?.status).toBe('succeeded');
    await store.close();
  });

  it('a stale token completes nothing: {ok:false}, the effects do not run and leave no row', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    await store.claim(req);
    const before = await store.get(req.pk);
    let calls = 0;
    const result = await store.complete({
      pk: req.pk,
      token: randomUUID(),
      now: T0 + 1,
      outcome: succeeded,
      effects: (tx) => {
        calls++;
        tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run('ch_stale', req.id, 500);
      },
    });
    expect(result).toEqual({ ok: false });
    expect(calls).toBe(0);
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    await store.close();
  });

  it('a lease taken over while the work ran: the first owner’s completion and effects are refused', async () => {
    const { store, ledger } = await storeWithLedger();
    const first = claimRequest();
    await store.claim(first);
    const takeover = { ...first, token: randomUUID(), now: T0 + LEASE };
    expect((await store.claim(takeover)).kind).toBe('claimed');
    const insert = (chargeId: string) => (tx: Database.Database) =>
      tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run(chargeId, first.id, 500);
    const late = { pk: first.pk, now: T0 + LEASE + 1, outcome: succeeded };
    expect(await store.complete({ ...late, token: first.token, effects: insert('ch_late') })).toEqual({ ok: false });
    expect(await store.complete({ ...late, token: takeover.token, effects: insert('ch_owner') })).toEqual({ ok: true });
    expect(ledger()).toEqual([{ charge_id: 'ch_owner', record_id: first.id, amount: 500 }]);
    expect((await store.get(first.pk))?.token).toBe(takeover.token);
    await store.close();
  });

  it('effects that throw roll back their writes and the completion, and the error is rethrown', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    await store.claim(req);
    const before = await store.get(req.pk);
    const boom = new Error('ledger constraint');
    const completion = store.complete({
      pk: req.pk,
      token: req.token,
      now: T0 + 1,
      outcome: succeeded,
      effects: (tx) => {
        tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run('ch_1', req.id, 500);
        throw boom;
      },
    });
    await expect(completion).rejects.toBe(boom);
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    // The holder can still complete afterwards: nothing was left half-written.
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: succeeded })).toEqual({
      ok: true,
    });
    await store.close();
  });

  it('async effects are refused with a clear error, and their synchronous writes roll back', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    await store.claim(req);
    const before = await store.get(req.pk);
    const completion = store.complete({
      pk: req.pk,
      token: req.token,
      now: T0 + 1,
      outcome: succeeded,
      effects: async (tx) => {
        tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run('ch_1', req.id, 500);
      },
    });
    await expect(completion).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: 'Expected `effects` to be a synchronous function: SQLite transactions here are synchronous.',
    });
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    await store.close();
  });

  it('through the engine: the work’s ledger write and the completion commit once; a retry replays', async () => {
    const { store, ledger } = await storeWithLedger();
    const engine = createEngine({ store, clock: manualClock(T0), ttlMs: 24 * 3_600_000 });
    const run = { scope, key: randomUUID(), fingerprint: 'a'.repeat(64) };
    let executions = 0;
    const work = async ({ id }: { id: string }) => {
      executions++;
      return {
        response: { status: 201, headers: [], body: new TextEncoder().encode('{"id":"ch_1"}') },
        resultId: 'ch_1',
        effects: (tx: Database.Database) => tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run('ch_1', id, 500),
      };
    };
    const first = await engine.run(run, work);
    const retry = await engine.run(run, work);
    expect([first.replayed, retry.replayed]).toEqual([false, true]);
    expect(executions).toBe(1);
    expect(ledger()).toEqual([{ charge_id: 'ch_1', record_id: first.record?.id, amount: 500 }]);
    expect(new TextDecoder().decode(retry.response.body)).toBe('{"id":"ch_1"}');
    await store.close();
  });
});

describe('sqlite store: sweep', () => {
  /** Inserts `count` finished records directly (one statement), expiring at `expiresAt`. */
  const seed = (database: Database.Database, count: number, expiresAt: number): void => {
    database
      .prepare(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @count)
         INSERT INTO idem_records (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable)
         SELECT 'IDEMPOTENCY#acct_sweep#' || @prefix || i, 'acct_sweep', @prefix || i, 'succeeded', 'f', 'id' || i, 't' || i,
           @claimedAt, @claimedAt, @expiresAt, 0 FROM n`,
      )
      .run({ count, prefix: randomUUID(), claimedAt: expiresAt - TTL, expiresAt });
  };
  const countWhere = (database: Database.Database, condition: string, now: number) =>
    database.prepare(`SELECT count(*) FROM idem_records WHERE ${condition}`).pluck().get({ now });

  it('deletes 2500 expired records in batches of 1000 — 3 round trips — and keeps the 10 live ones', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    seed(store.database, 10, T0 + 1);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000 })).toBe(2_500);
    // 1000 + 1000 + 500: the third batch deletes fewer than a batch, so it is the last.
    expect(store.roundTrips - before).toBe(3);
    expect(countWhere(store.database, 'expires_at <= @now', T0)).toBe(0);
    expect(countWhere(store.database, 'expires_at > @now', T0)).toBe(10);
    await store.close();
  });

  it('a whole number of full batches takes one more, empty, batch to know it is done', async () => {
    const store = await freshStore();
    seed(store.database, 3_000, T0);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000 })).toBe(3_000);
    expect(store.roundTrips - before).toBe(4);
    await store.close();
  });

  it('stops at limit, capping the last batch', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    const before = store.roundTrips;
    expect(await store.sweep({ now: T0, batchSize: 1_000, limit: 1_500 })).toBe(1_500);
    expect(store.roundTrips - before).toBe(2);
    expect(countWhere(store.database, 'expires_at <= @now', T0)).toBe(1_000);
    await store.close();
  });

  it('yields to the event loop between batches', async () => {
    const store = await freshStore();
    seed(store.database, 2_500, T0);
    const events: Array<string | number> = [];
    // Queued before the sweep starts, so it runs at the sweep's first yield: after batch 1, before batch 2.
    setImmediate(() => events.push(countWhere(store.database, 'expires_at <= @now', T0) as number));
    const sweeping = store.sweep({ now: T0, batchSize: 1_000 });
    expect(await sweeping).toBe(2_500);
    events.push('swept');
    expect(events).toEqual([1_500, 'swept']);
    await store.close();
  });

  it('refuses a batch size that is not a positive integer', async () => {
    const store = await freshStore();
    await expect(store.sweep({ now: T0, batchSize: 0 })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: 'Expected `batchSize` to be a positive integer, got 0.',
    });
    await store.close();
  });
});

describe('sqlite store: two processes racing on one database file', () => {
  const child = fileURLToPath(new URL('./race-child.ts', import.meta.url));
  const root = fileURLToPath(new URL('../../../', import.meta.url));

  interface ChildResult {
    readonly key: string;
    readonly kind: 'claimed' | 'existing';
    readonly token: string;
    readonly recordToken: string;
  }

  it('50 claims of each of 64 keys from each of 2 processes: exactly one claim per key wins', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true });
    await store.migrate();
    const keys = Array.from({ length: 64 }, () => randomUUID());
    const N = 50;

    const processes = [0, 1].map(() =>
      spawn(process.execPath, ['--import', 'tsx', child, file, String(N), ...keys], {
        cwd: root,
        stdio: ['pipe', 'pipe', 'pipe'],
      }),
    );
    const runs = processes.map((proc) => {
      const lines = createInterface({ input: proc.stdout });
      let stderr = '';
      proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const ready = new Promise<void>((resolve) => lines.once('line', () => resolve()));
      const output = new Promise<{ code: number | null; stderr: string; lines: string[] }>((resolve) => {
        const seen: string[] = [];
        lines.on('line', (line) => seen.push(line));
        proc.on('close', (code) => resolve({ code, stderr, lines: seen }));
      });
      return { ready, output };
    });
    // The shared start signal: once both processes are loaded and waiting, both are told the same instant.
    await Promise.all(runs.map((run) => run.ready));
    const startAt = Date.now() + 200;
    for (const proc of processes) proc.stdin.end(`${startAt}\n`);
    const outputs = await Promise.all(runs.map((run) => run.output));

    for (const output of outputs) {
      expect({ code: output.code, stderr: output.stderr }).toEqual({ code: 0, stderr: '' });
    }
    const reports = outputs.map(
      (output) => JSON.parse(output.lines.at(-1) ?? '{}') as { pid: number; results: ChildResult[] },
    );
    for (const report of reports) expect(report.results.length).toBe(N * keys.length);
    const all = reports.flatMap((report) => report.results);
    for (const key of keys) {
      const mine = all.filter((result) => result.key === key);
      expect(mine.length).toBe(2 * N);
      const winners = mine.filter((result) => result.kind === 'claimed');
      expect(winners.length).toBe(1);
      const winner = winners[0] as ChildResult;
      expect(winner.recordToken).toBe(winner.token);
      // Every loser was handed the winner's record, in its one call.
      expect(mine.filter((result) => result.recordToken !== winner.token)).toEqual([]);
      expect((await store.get(recordPk('acct_race', key)))?.token).toBe(winner.token);
    }
    await store.close();
  });
});

describe('sqlite store: refusals do not take the write lock', () => {
  it('while another connection holds the write lock, a replay, a mismatch and a live lease still answer at once', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true, busyTimeoutMs: 2_000 });
    await store.migrate();
    const finished = claimRequest();
    await store.claim(finished);
    await store.complete({ pk: finished.pk, token: finished.token, now: T0 + 1, outcome: succeeded });
    const live = claimRequest();
    await store.claim(live);
    // A writer that stalls inside its transaction (a frozen process): the write lock stays taken.
    const blocker = new Database(file);
    blocker.exec('BEGIN IMMEDIATE');
    try {
      const replay = await store.claim(claimRequest({ key: finished.key, now: T0 + 2 }));
      const mismatch = await store.claim(claimRequest({ key: finished.key, fingerprint: 'other', now: T0 + 2 }));
      const busy = await store.claim(claimRequest({ key: live.key, now: T0 + 2 }));
      expect([replay.kind, replay.record.status, mismatch.kind, busy.kind, busy.record.token]).toEqual([
        'existing',
        'succeeded',
        'existing',
        'existing',
        live.token,
      ]);
      // (Were a refusal to take the lock, each of these would wait busy_timeout, then fail SQLITE_BUSY.)
      // A fresh key does need the lock: it waits, then fails closed.
      await expect(store.claim(claimRequest())).rejects.toMatchObject({ code: 'SQLITE_BUSY' });
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
      await store.close();
    }
  });
});

describe('sqlite store: onRoundTrip sees each counted call, with its statements and what they returned', () => {
  /** A migrated store whose trips land in `trips` (creation's two pragmas and `migrate` included). */
  async function observedStore() {
    const trips: RoundTrip[] = [];
    const store = await freshStore({ onRoundTrip: (trip) => void trips.push(trip) });
    return { store, trips };
  }
  /** The row the engine returns for a record claimed by `req` and not completed. */
  const claimedRow = (req: ClaimRequest) => ({
    pk: req.pk,
    scope: req.scope,
    key: req.key,
    status: 'in_progress',
    fingerprint: req.fingerprint,
    id: req.id,
    token: req.token,
    claimed_at: req.now,
    lease_expires_at: req.now + req.leaseMs,
    expires_at: req.now + req.ttlMs,
    retryable: 0,
    result_id: null,
    response_status: null,
    response_headers: null,
    response_body: null,
  });
  const claimParams = (req: ClaimRequest) => ({
    pk: req.pk,
    scope: req.scope,
    key: req.key,
    fingerprint: req.fingerprint,
    id: req.id,
    token: req.token,
    now: req.now,
    leaseExpiresAt: req.now + req.leaseMs,
    expiresAt: req.now + req.ttlMs,
  });
  const statementsOf = (trip: RoundTrip | undefined) =>
    (trip?.request as { statements: Array<{ sql: string; params?: unknown }> }).statements;

  it('creation and migrate() report the pragmas and the DDL', async () => {
    const { store, trips } = await observedStore();
    expect(trips.map((trip) => trip.op)).toEqual(['open', 'open', 'migrate']);
    expect(trips.slice(0, 2)).toEqual([
      { op: 'open', request: { statements: [{ sql: 'PRAGMA busy_timeout = 5000' }] }, response: [[{ timeout: 5000 }]] },
      {
        op: 'open',
        request: { statements: [{ sql: 'PRAGMA journal_mode = WAL' }] },
        response: [[{ journal_mode: 'wal' }]],
      },
    ]);
    expect(trips[2]).toEqual({ op: 'migrate', request: { statements: [{ sql: sqliteSchema() }] }, response: [null] });
    expect(trips.length).toBe(store.roundTrips);
    await store.close();
  });

  const select = 'SELECT * FROM "idem_records" WHERE "pk" = @pk';

  it('a fresh claim is one trip: the read that finds nothing, the upsert, and the row its RETURNING gave back', async () => {
    const { store, trips } = await observedStore();
    trips.length = 0;
    const req = claimRequest();
    expect((await store.claim(req)).kind).toBe('claimed');
    const [, upsert] = statementsOf(trips[0]);
    expect(trips).toEqual([
      {
        op: 'claim',
        request: {
          statements: [
            { sql: select, params: { pk: req.pk } },
            { sql: upsert?.sql, params: claimParams(req) },
          ],
        },
        response: [[], [claimedRow(req)]],
      },
    ]);
    expect(upsert?.sql).toContain('INSERT INTO "idem_records"');
    expect(upsert?.sql).toContain('ON CONFLICT ("pk") DO UPDATE SET');
    expect(upsert?.sql).toContain('RETURNING *');
    await store.close();
  });

  it('a losing claim is one trip of one read: no write lock, no upsert', async () => {
    const { store, trips } = await observedStore();
    const winner = claimRequest();
    await store.claim(winner);
    trips.length = 0;
    const loser = claimRequest({ key: winner.key, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
    expect((await store.claim(loser)).kind).toBe('existing');
    expect(trips).toEqual([
      {
        op: 'claim',
        request: { statements: [{ sql: select, params: { pk: winner.pk } }] },
        response: [[claimedRow(winner)]],
      },
    ]);
    await store.close();
  });

  it('a claim that meets another connection’s claim between its read and its lock gets that row, in the same trip', async () => {
    // Two connections to one file. The first store's read of the key runs the second store's claim right after it
    // (a better-sqlite3 call is synchronous, so this is exactly "between the read and BEGIN IMMEDIATE").
    const file = freshFile();
    const other = sqliteStore({ database: new Database(file), closeDatabase: true });
    await other.migrate();
    const rival = claimRequest();
    const trips: RoundTrip[] = [];
    const database = new Database(file);
    let raced = false;
    const racing: SqliteDatabase = {
      prepare: (source) => {
        const statement = database.prepare(source);
        if (source !== select) return statement;
        return {
          run: (...args: unknown[]) => statement.run(...(args as [])),
          all: (...args: unknown[]) => statement.all(...(args as [])),
          get: (...args: unknown[]) => {
            const row = statement.get(...(args as []));
            if (!raced) {
              raced = true;
              void other.claim(rival);
            }
            return row;
          },
        };
      },
      exec: (source) => database.exec(source),
      pragma: (source, options) => database.pragma(source, options),
      transaction: (fn) => database.transaction(fn),
      close: () => database.close(),
    };
    const store = sqliteStore({ database: racing, closeDatabase: true, onRoundTrip: (trip) => void trips.push(trip) });
    trips.length = 0;
    const late = claimRequest({ key: rival.key, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
    const result = await store.claim(late);
    expect([result.kind, result.record.token, store.roundTrips - 2]).toEqual(['existing', rival.token, 1]);
    expect(trips.map((trip) => statementsOf(trip).map((statement) => statement.sql.split(' ')[0]))).toEqual([
      ['SELECT', 'INSERT', 'SELECT'],
    ]);
    expect(trips[0]?.response).toEqual([[], [], [claimedRow(rival)]]);
    await store.close();
    await other.close();
  });

  it('a losing claim on a finished record gets the stored BLOB as the driver returns it (a Buffer)', async () => {
    const { store, trips } = await observedStore();
    const winner = claimRequest();
    await store.claim(winner);
    await store.complete({ pk: winner.pk, token: winner.token, now: T0 + 1, outcome: succeeded });
    trips.length = 0;
    await store.claim(claimRequest({ key: winner.key, token: randomUUID(), now: T0 + 2 }));
    expect(trips[0]?.response).toEqual([
      [
        {
          ...claimedRow(winner),
          status: 'succeeded',
          result_id: 'ch_1',
          response_status: 201,
          response_headers: '[["content-type","application/json"]]',
          response_body: Buffer.from([0x7b, 0x7d]),
        },
      ],
    ]);
    const [[row]] = trips[0]?.response as [Array<{ response_body: unknown }>];
    expect(Buffer.isBuffer(row?.response_body)).toBe(true);
    await store.close();
  });

  it('reports as many trips as roundTrips counts, one per operation, with each write’s { changes }', async () => {
    const { store, trips } = await observedStore();
    const before = store.roundTrips;
    trips.length = 0;
    const req = claimRequest();
    await store.claim(req);
    await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
    await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: succeeded });
    await store.complete({ pk: req.pk, token: req.token, now: T0 + 3, outcome: succeeded }); // stale: changes 0
    await store.get(req.pk);
    await store.list({ scope, limit: 10 });
    await store.release({ pk: req.pk, token: req.token });
    await store.sweep({ now: T0 + TTL });
    expect(store.roundTrips - before).toBe(8);
    expect(trips.length).toBe(8);
    expect(trips.map((trip) => trip.op)).toEqual([
      'claim',
      'renew',
      'complete',
      'complete',
      'get',
      'list',
      'release',
      'sweep',
    ]);
    // The claim's trip is two statements (the read, then the upsert); every other operation is one.
    expect(trips.map((trip) => (trip.response as unknown[]).length)).toEqual([2, 1, 1, 1, 1, 1, 1, 1]);
    expect(trips[1]?.response).toEqual([{ changes: 1 }]);
    expect(trips[2]?.response).toEqual([{ changes: 1 }]);
    expect(trips[3]?.response).toEqual([{ changes: 0 }]);
    expect(trips[6]?.response).toEqual([{ changes: 0 }]); // release of a finished record changes nothing
    expect(trips[7]?.response).toEqual([{ changes: 1 }]);
    expect(statementsOf(trips[7])).toEqual([
      {
        sql: 'DELETE FROM "idem_records" WHERE rowid IN (SELECT rowid FROM "idem_records" WHERE "expires_at" <= @now LIMIT @take)',
        params: { now: T0 + TTL, take: 1_000 },
      },
    ]);
    await store.close();
  });

  it('a completion whose effects throw is reported with the error, and the statement that ran', async () => {
    const { store, trips } = await observedStore();
    const req = claimRequest();
    await store.claim(req);
    trips.length = 0;
    const boom = new Error('ledger write failed');
    const effects = () => {
      throw boom;
    };
    await expect(
      store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded, effects }),
    ).rejects.toBe(boom);
    const [update] = statementsOf(trips[0]);
    expect(trips).toEqual([
      {
        op: 'complete',
        request: {
          statements: [
            {
              sql: update?.sql,
              params: {
                pk: req.pk,
                token: req.token,
                status: 'succeeded',
                retryable: 0,
                resultId: 'ch_1',
                responseStatus: 201,
                responseHeaders: '[["content-type","application/json"]]',
                responseBody: new Uint8Array([0x7b, 0x7d]),
              },
            },
          ],
        },
        error: boom,
      },
    ]);
    expect(update?.sql).toContain('UPDATE "idem_records" SET "status" = @status');
    await store.close();
  });

  it('an observer that throws changes nothing: same results and round trips; the store’s own errors still surface', async () => {
    let calls = 0;
    const store = await freshStore({
      onRoundTrip: () => {
        calls++;
        throw new Error('observer broke');
      },
    });
    const req = claimRequest();
    const won = await store.claim(req);
    expect([won.kind, won.record.token]).toEqual(['claimed', req.token]);
    const lost = await store.claim(claimRequest({ key: req.key, token: randomUUID() }));
    expect([lost.kind, lost.record.token]).toEqual(['existing', req.token]);
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded })).toEqual({
      ok: true,
    });
    expect((await store.get(req.pk))?.status).toBe('succeeded');
    expect((await store.list({ scope, limit: 10 })).map((r) => r.pk)).toEqual([req.pk]);
    const boom = new Error('effects failed');
    const second = claimRequest();
    await store.claim(second);
    const effects = () => {
      throw boom;
    };
    const completion = store.complete({ pk: second.pk, token: second.token, now: T0 + 1, outcome: succeeded, effects });
    await expect(completion).rejects.toBe(boom);
    expect(store.roundTrips).toBe(10); // open ×2, migrate, claim ×2, complete, get, list, claim, complete
    expect(calls).toBe(10);
    await store.close();
  });

  it('refuses an onRoundTrip that is not a function', () => {
    const database = new Database(':memory:');
    expect(() => sqliteStore({ database, onRoundTrip: 'log' as never })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: 'Expected `onRoundTrip` to be a function, got "log".',
      }),
    );
    database.close();
  });
});

describe('sqlite store: runLocal, the claim, the work and the completion in one transaction', () => {
  const committed: Outcome = succeeded;
  const insertLedger = (db: SqliteDatabase, recordId: string): void =>
    void db
      .prepare('INSERT INTO ledger (charge_id, record_id, amount) VALUES (?, ?, ?)')
      .run(`ch_${recordId}`, recordId, 500);

  it('a new key: one round trip; the claim, the ledger row and the outcome commit together', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    const before = store.roundTrips;
    const result = await store.runLocal({ ...req, work: (db, record) => (insertLedger(db, record.id), committed) });
    expect(store.roundTrips - before).toBe(1);
    expect(result).toEqual({ kind: 'committed', record: await store.get(req.pk) });
    expect([result.kind === 'committed' && result.record.status, ledger()]).toEqual([
      'succeeded',
      [{ charge_id: `ch_${req.id}`, record_id: req.id, amount: 500 }],
    ]);
    // A refusal afterwards: one plain read, the work not called.
    const beforeReplay = store.roundTrips;
    const replay = await store.runLocal({
      ...claimRequest({ key: req.key, now: T0 + 1 }),
      work: () => {
        throw new Error('must not run');
      },
    });
    const replayed = replay.kind === 'existing' && replay.record.response?.status;
    expect([replay.kind, replayed, store.roundTrips - beforeReplay]).toEqual(['existing', 201, 1]);
    await store.close();
  });

  it('work that returns null or throws rolls back its rows and the claim: no record, no ledger row', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    expect(await store.runLocal({ ...req, work: (db, record) => (insertLedger(db, record.id), null) })).toEqual({
      kind: 'rolled-back',
    });
    const boom = new Error('boom');
    await expect(
      store.runLocal({
        ...claimRequest({ key: req.key }),
        work: (db, record) => {
          insertLedger(db, record.id);
          throw boom;
        },
      }),
    ).rejects.toBe(boom);
    expect([await store.get(req.pk), ledger()]).toEqual([null, []]);
    await store.close();
  });

  it('a key left in_progress by a lease-mode claim: refused while the lease lives, taken over (same id) once it lapsed', async () => {
    const { store, ledger } = await storeWithLedger();
    const held = claimRequest();
    await store.claim(held);
    let runs = 0;
    const work = (db: SqliteDatabase, record: { id: string }) => (runs++, insertLedger(db, record.id), committed);
    const refused = await store.runLocal({ ...claimRequest({ key: held.key, now: T0 + LEASE - 1 }), work });
    expect([refused.kind, refused.kind === 'existing' && refused.record.token, runs]).toEqual([
      'existing',
      held.token,
      0,
    ]);
    const taken = await store.runLocal({ ...claimRequest({ key: held.key, now: T0 + LEASE }), work });
    expect([taken.kind, taken.kind === 'committed' && taken.record.id, runs]).toEqual(['committed', held.id, 1]);
    expect(await store.complete({ pk: held.pk, token: held.token, now: T0 + LEASE, outcome: committed })).toEqual({
      ok: false,
    });
    expect(ledger()).toEqual([{ charge_id: `ch_${held.id}`, record_id: held.id, amount: 500 }]);
    await store.close();
  });
});

describe('sqlite store: runLocal from 4 processes on one new key', () => {
  const child = fileURLToPath(new URL('./local-child.ts', import.meta.url));
  const root = fileURLToPath(new URL('../../../', import.meta.url));

  interface ChildReport {
    readonly replayed: boolean;
    readonly status: number;
    readonly body: string;
    readonly trips: unknown[][];
  }

  it('the first holds the lock until the 3 others read the key absent; they wait, then replay it; one ledger row', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true });
    await store.migrate();
    store.database.exec('CREATE TABLE ledger (ref TEXT PRIMARY KEY, pid INTEGER NOT NULL)');
    const key = randomUUID();
    const N = 4;
    const children = Array.from({ length: N }, () => {
      const proc = spawn(process.execPath, ['--import', 'tsx', child, file, key], {
        cwd: root,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const lines = createInterface({ input: proc.stdout });
      const waiting = new Map<string, () => void>();
      const seen: string[] = [];
      lines.on('line', (line) => {
        seen.push(line);
        waiting.get(line)?.();
      });
      let stderr = '';
      proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const hear = (line: string) =>
        seen.includes(line) ? Promise.resolve() : new Promise<void>((resolve) => waiting.set(line, resolve));
      const done = new Promise<{ code: number | null; stderr: string; last: string }>((resolve) =>
        proc.on('close', (code) => resolve({ code, stderr, last: seen.at(-1) ?? '' })),
      );
      return { proc, hear, done, tell: (line: string) => proc.stdin.write(`${line}\n`) };
    });
    await Promise.all(children.map((c) => c.hear('ready')));
    const [first, ...others] = children as [(typeof children)[number], ...typeof children];
    first.tell('go');
    await first.hear('holding'); // inside its transaction: the write lock is taken, its ledger row uncommitted
    for (const other of others) other.tell('go');
    await Promise.all(others.map((other) => other.hear('read'))); // each read the key: absent
    first.tell('release');
    const outputs = await Promise.all(children.map((c) => c.done));
    for (const output of outputs) expect({ code: output.code, stderr: output.stderr }).toEqual({ code: 0, stderr: '' });
    const [winner, ...losers] = outputs.map((output) => JSON.parse(output.last) as ChildReport) as [
      ChildReport,
      ...ChildReport[],
    ];
    // The winner: its read found nothing; in the transaction, its upsert returned its row and the UPDATE changed it.
    expect([winner.replayed, winner.status, winner.trips]).toEqual([false, 201, [[0], [1, { changes: 1 }]]]);
    for (const loser of losers) {
      // A loser: its read found nothing (before the commit); under the lock, its upsert was refused (no row) and
      // the SELECT read the winner's committed row. It replayed the winner's body.
      expect([loser.replayed, loser.status, loser.body, loser.trips]).toEqual([true, 201, winner.body, [[0], [0, 1]]]);
    }
    const rows = store.database.prepare('SELECT ref, pid FROM ledger').all() as Array<{ ref: string; pid: number }>;
    expect(rows).toEqual([{ ref: (JSON.parse(winner.body) as { id: string }).id, pid: first.proc.pid }]);
    await store.close();
  });
});
