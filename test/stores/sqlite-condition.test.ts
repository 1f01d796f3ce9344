/**
 * The SQLite claim's SQL condition, reached. A claim reads the row first and answers a refusal from that read; only
 * a key it found free or claimable goes on to `BEGIN IMMEDIATE` and the upsert, whose `WHERE` decides again on
 * the row under the write lock. No other test reaches that `WHERE` with a row the read did not see, so a condition
 * dropped from it (the fingerprint's, say) went unnoticed. Here a second better-sqlite3 connection to the same
 * file takes the write lock with `BEGIN IMMEDIATE`, writes the row and commits — exactly after the first
 * connection's read of the key and before its own `BEGIN IMMEDIATE` (better-sqlite3 is synchronous, so the read
 * statement's `get` is the seam) — and the claim must be decided by the SQL condition alone: the trip shows the
 * read that found nothing, the upsert, and (refused) the read of the row that stopped it.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { recordPk, type ClaimRequest, type ClaimResult, type RoundTrip } from 'idem';
import { sqliteStore, type SqliteDatabase } from 'idem/stores/sqlite';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../harness.js';

const dir = tempDir('idem-sqlite-condition-');
afterAll(() => dir.remove());

const T0 = Date.parse('2026-01-01T00:00:00Z');
const NOW = T0 + 60_000;
const LEASE = 10_000;
const TTL = 86_400_000;
const scope = 'acct_condition';
const MINE = 'a'.repeat(64);
const OTHER = 'b'.repeat(64);

/** The row the second connection writes, as columns. */
interface RivalRow {
  readonly status: 'in_progress' | 'succeeded' | 'failed';
  readonly fingerprint: string;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
  readonly retryable: 0 | 1;
}

interface Raced {
  readonly result: ClaimResult;
  /** The first statement word of each statement in the claim's trip, and what each returned. */
  readonly statements: string[];
  readonly rows: unknown[];
  /** The pre-read found no row: the decision below was the SQL condition's. */
  readonly preReadEmpty: boolean;
}

/**
 * Claims a fresh key on store A while connection B, right after A's read of the key, takes the write lock and
 * writes `rival` for that key.
 */
async function raceClaim(
  rival: RivalRow,
): Promise<Raced & { readonly request: ClaimRequest; readonly rivalId: string }> {
  const file = join(dir.path, `${randomUUID()}.db`);
  const database = new Database(file);
  const key = randomUUID();
  const pk = recordPk(scope, key);
  const rivalId = `rival-${randomUUID()}`;
  let armed = true;
  const writeRival = (): void => {
    const other = new Database(file);
    try {
      other.exec('BEGIN IMMEDIATE'); // B holds the write lock: A has read, and has not begun its transaction
      other
        .prepare(
          `INSERT INTO "idem_records" ("pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at",
            "lease_expires_at", "expires_at", "retryable", "result_id", "response_status", "response_headers", "response_body")
          VALUES (@pk, @scope, @key, @status, @fingerprint, @id, 'rival-token', @claimedAt, @leaseExpiresAt, @expiresAt,
            @retryable, NULL, @responseStatus, @responseHeaders, @responseBody)`,
        )
        .run({
          pk,
          scope,
          key,
          id: rivalId,
          claimedAt: T0,
          ...rival,
          responseStatus: rival.status === 'in_progress' ? null : rival.status === 'succeeded' ? 201 : 503,
          responseHeaders: rival.status === 'in_progress' ? null : '[]',
          responseBody: rival.status === 'in_progress' ? null : Buffer.from('{}'),
        });
      other.exec('COMMIT');
    } finally {
      other.close();
    }
  };
  // The seam: the statement that reads the key. Its first `get` is the claim's pre-read; B writes right after it.
  const seamed: SqliteDatabase = {
    prepare: (source) => {
      const statement = database.prepare(source);
      if (!/^SELECT \* FROM "idem_records" WHERE "pk" = @pk$/.test(source)) return statement;
      return {
        run: (...args: unknown[]) => statement.run(...(args as [])),
        all: (...args: unknown[]) => statement.all(...(args as [])),
        get: (...args: unknown[]) => {
          const row = statement.get(...(args as []));
          if (armed) {
            armed = false;
            writeRival();
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
  const trips: RoundTrip[] = [];
  const store = sqliteStore({ database: seamed, closeDatabase: true, onRoundTrip: (trip) => void trips.push(trip) });
  await store.migrate();
  trips.length = 0;
  const request: ClaimRequest = {
    pk,
    scope,
    key,
    fingerprint: MINE,
    token: 'my-token',
    id: 'my-fresh-id',
    now: NOW,
    leaseMs: LEASE,
    ttlMs: TTL,
  };
  try {
    const result = await store.claim(request);
    const trip = trips[0] as RoundTrip;
    const statements = (trip.request as { statements: Array<{ sql: string }> }).statements.map(
      (s) => s.sql.trimStart().split(/\s/)[0] as string,
    );
    const rows = trip.response as unknown[];
    return { result, request, rivalId, statements, rows, preReadEmpty: JSON.stringify(rows[0]) === '[]' };
  } finally {
    await store.close();
  }
}

const lapsed = NOW - 1;
const live = NOW + 5_000;
const alive = NOW + TTL;

describe('SQLite claim: the upsert’s WHERE decides on a row written between the pre-read and the write lock', () => {
  it('another fingerprint’s lapsed lease is not taken over: refused by the fingerprint condition in SQL', async () => {
    const raced = await raceClaim({
      status: 'in_progress',
      fingerprint: OTHER,
      leaseExpiresAt: lapsed,
      expiresAt: alive,
      retryable: 0,
    });
    expect([
      raced.preReadEmpty,
      raced.statements,
      raced.result.kind,
      raced.result.record.token,
      raced.result.record.fingerprint,
    ]).toEqual([true, ['SELECT', 'INSERT', 'SELECT'], 'existing', 'rival-token', OTHER]);
    expect(raced.rows[1]).toEqual([]); // the upsert's RETURNING: nothing written
  });

  it('another fingerprint’s retryable failure is not reclaimed: refused by the fingerprint condition in SQL', async () => {
    const raced = await raceClaim({
      status: 'failed',
      fingerprint: OTHER,
      leaseExpiresAt: live,
      expiresAt: alive,
      retryable: 1,
    });
    expect([
      raced.preReadEmpty,
      raced.statements,
      raced.result.kind,
      raced.result.record.token,
      raced.result.record.status,
    ]).toEqual([true, ['SELECT', 'INSERT', 'SELECT'], 'existing', 'rival-token', 'failed']);
  });

  it('the same fingerprint’s lapsed lease is taken over, keeping the record’s id', async () => {
    const raced = await raceClaim({
      status: 'in_progress',
      fingerprint: MINE,
      leaseExpiresAt: lapsed,
      expiresAt: alive,
      retryable: 0,
    });
    expect([
      raced.preReadEmpty,
      raced.statements,
      raced.result.kind,
      raced.result.record.token,
      raced.result.record.id,
    ]).toEqual([true, ['SELECT', 'INSERT'], 'claimed', 'my-token', raced.rivalId]);
    expect([raced.result.record.leaseExpiresAt, raced.result.record.expiresAt]).toEqual([NOW + LEASE, NOW + TTL]);
  });

  it('the same fingerprint’s retryable failure is reclaimed, keeping the record’s id', async () => {
    const raced = await raceClaim({
      status: 'failed',
      fingerprint: MINE,
      leaseExpiresAt: live,
      expiresAt: alive,
      retryable: 1,
    });
    expect([
      raced.statements,
      raced.result.kind,
      raced.result.record.token,
      raced.result.record.id,
      raced.result.record.status,
    ]).toEqual([['SELECT', 'INSERT'], 'claimed', 'my-token', raced.rivalId, 'in_progress']);
  });

  it('the same fingerprint’s live lease, final failure or success is not taken: refused in SQL', async () => {
    const cases: RivalRow[] = [
      { status: 'in_progress', fingerprint: MINE, leaseExpiresAt: live, expiresAt: alive, retryable: 0 },
      { status: 'failed', fingerprint: MINE, leaseExpiresAt: live, expiresAt: alive, retryable: 0 },
      { status: 'succeeded', fingerprint: MINE, leaseExpiresAt: lapsed, expiresAt: alive, retryable: 0 },
    ];
    const outcomes = [];
    for (const rival of cases) {
      const raced = await raceClaim(rival);
      outcomes.push([raced.preReadEmpty, raced.statements.join(' '), raced.result.kind, raced.result.record.token]);
    }
    expect(outcomes).toEqual([
      [true, 'SELECT INSERT SELECT', 'existing', 'rival-token'],
      [true, 'SELECT INSERT SELECT', 'existing', 'rival-token'],
      [true, 'SELECT INSERT SELECT', 'existing', 'rival-token'],
    ]);
  });

  it('an expired row of any fingerprint is replaced: a new life, with the claim’s fresh id', async () => {
    const raced = await raceClaim({
      status: 'succeeded',
      fingerprint: OTHER,
      leaseExpiresAt: lapsed,
      expiresAt: NOW,
      retryable: 0,
    });
    expect([
      raced.statements,
      raced.result.kind,
      raced.result.record.token,
      raced.result.record.id,
      raced.result.record.fingerprint,
    ]).toEqual([['SELECT', 'INSERT'], 'claimed', 'my-token', 'my-fresh-id', MINE]);
  });
});
