/**
 * The SQLite claim's SQL condition, reached. A claim reads the row first and answers a refusal from that read; only
 * a key it found free or claimable goes on to the upsert, whose `WHERE` decides again on the row under the write
 * lock. No other test reaches that `WHERE` with a row the read did not see, so a condition
 * dropped from it (the fingerprint's, say) went unnoticed. Here a second better-sqlite3 connection to the same
 * file takes the write lock with `BEGIN IMMEDIATE`, writes the row and commits — exactly after the first
 * connection's read of the key and before its upsert (better-sqlite3 is synchronous, so the read
 * statement's `get` is the seam) — and the claim must be decided in SQL: the trip shows the read that found nothing,
 * the upsert, and (refused) the read of the row that stopped it. Since the takeover policy the upsert is also pinned
 * to the token the read saw, so a rival's row is refused by the pin too, and a claimable one is taken by a second
 * read and upsert (packages/idem/src/stores/sqlite/takeover.test.ts tests the pin; the WHERE alone decides rows whose token the read saw).
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import type { ClaimRequest, ClaimResult, RoundTrip } from 'idem';
import { sqliteStore } from 'idem/stores/sqlite';
import { describe, expect, it } from 'vitest';
import { claimRequests, LEASE, T0 } from '../../packages/idem/src/testing/fixtures.js';
import { freshFile, seamedAfterRead } from '../fixtures/sqlite.js';

const NOW = T0 + 60_000;
const TTL = 86_400_000;
const scope = 'acct_condition';
const MINE = 'a'.repeat(64);
/** The raced claim's request: a fresh key under MINE, at NOW. */
const claimRequest = claimRequests({ scope, fingerprint: MINE });
const OTHER = 'b'.repeat(64);

const lapsed = NOW - 1;
const live = NOW + 5_000;
const alive = NOW + TTL;

/** The row the second connection writes, as columns. */
interface RivalRow {
  readonly status: 'in_progress' | 'succeeded' | 'failed';
  readonly fingerprint: string;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
  readonly retryable: 0 | 1;
}

/** A rival row: `status` under `fingerprint`, its lease ending at `leaseExpiresAt`, alive unless `expiresAt`. */
const rival = (
  status: RivalRow['status'],
  fingerprint: string,
  leaseExpiresAt: number,
  { expiresAt = alive, retryable = 0 }: Partial<Pick<RivalRow, 'expiresAt' | 'retryable'>> = {},
): RivalRow => ({ status, fingerprint, leaseExpiresAt, expiresAt, retryable });

interface Raced {
  readonly result: ClaimResult;
  readonly request: ClaimRequest;
  readonly rivalId: string;
  /** The first statement word of each statement in the claim's trip, and what each returned. */
  readonly statements: string[];
  readonly rows: unknown[];
  /** The pre-read found no row: the decision below was the SQL condition's. */
  readonly preReadEmpty: boolean;
}

/** Writes `row` for `pk` on a second connection to `file`, inside its own `BEGIN IMMEDIATE` (the write lock). */
function writeRival(file: string, pk: string, key: string, rivalId: string, row: RivalRow): void {
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
        ...row,
        responseStatus: row.status === 'in_progress' ? null : row.status === 'succeeded' ? 201 : 503,
        responseHeaders: row.status === 'in_progress' ? null : '[]',
        responseBody: row.status === 'in_progress' ? null : Buffer.from('{}'),
      });
    other.exec('COMMIT');
  } finally {
    other.close();
  }
}

/**
 * Claims a fresh key on store A while connection B, right after A's read of the key, takes the write lock and
 * writes `row` for that key.
 */
async function raceClaim(row: RivalRow): Promise<Raced> {
  const file = freshFile();
  const request = claimRequest({ token: 'my-token', id: 'my-fresh-id', now: NOW, ttlMs: TTL });
  const { pk, key } = request;
  const rivalId = `rival-${randomUUID()}`;
  // The seam: the claim's pre-read of the key; B writes right after it.
  const seamed = seamedAfterRead(new Database(file), () => writeRival(file, pk, key, rivalId, row));
  const trips: RoundTrip[] = [];
  const store = sqliteStore({ database: seamed, closeDatabase: true, onRoundTrip: (trip) => void trips.push(trip) });
  await store.migrate();
  trips.length = 0;
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

/** What every raced claim shows: its pre-read found nothing, then its statements, its answer and the token. */
const seen = (raced: Raced) => [
  raced.preReadEmpty,
  raced.statements.join(' '),
  raced.result.kind,
  raced.result.record.token,
];
/** Refused: the upsert writes nothing (its token pin and its WHERE both refuse), then the row is read. */
const REFUSED = [true, 'SELECT INSERT SELECT', 'existing', 'rival-token'];
/**
 * Claimed: the upsert, pinned to the token the read saw (none), writes nothing on the rival's row; the claim reads
 * again, finds the row claimable, and its second upsert (pinned to the rival's token) takes it.
 */
const CLAIMED = [true, 'SELECT INSERT SELECT INSERT', 'claimed', 'my-token'];

describe('SQLite claim: a row written between the pre-read and the write lock', () => {
  it('another fingerprint’s lapsed lease is not taken over: refused in SQL', async () => {
    const raced = await raceClaim(rival('in_progress', OTHER, lapsed));
    expect([...seen(raced), raced.result.record.fingerprint]).toEqual([...REFUSED, OTHER]);
    expect(raced.rows[1]).toEqual([]); // the upsert's RETURNING: nothing written
  });

  it('another fingerprint’s retryable failure is not reclaimed: refused in SQL', async () => {
    const raced = await raceClaim(rival('failed', OTHER, live, { retryable: 1 }));
    expect([...seen(raced), raced.result.record.status]).toEqual([...REFUSED, 'failed']);
  });

  it('the same fingerprint’s lapsed lease is taken over, keeping the record’s id', async () => {
    const raced = await raceClaim(rival('in_progress', MINE, lapsed));
    expect([...seen(raced), raced.result.record.id]).toEqual([...CLAIMED, raced.rivalId]);
    expect([raced.result.record.leaseExpiresAt, raced.result.record.expiresAt]).toEqual([NOW + LEASE, NOW + TTL]);
  });

  it('the same fingerprint’s retryable failure is reclaimed, keeping the record’s id', async () => {
    const raced = await raceClaim(rival('failed', MINE, live, { retryable: 1 }));
    expect([...seen(raced), raced.result.record.id, raced.result.record.status]).toEqual([
      ...CLAIMED,
      raced.rivalId,
      'in_progress',
    ]);
  });

  it('the same fingerprint’s live lease, final failure or success is not taken: refused in SQL', async () => {
    const outcomes = [];
    for (const row of [rival('in_progress', MINE, live), rival('failed', MINE, live), rival('succeeded', MINE, lapsed)])
      outcomes.push(seen(await raceClaim(row)));
    expect(outcomes).toEqual([REFUSED, REFUSED, REFUSED]);
  });

  it('an expired row of any fingerprint is replaced: a new life, with the claim’s fresh id', async () => {
    const raced = await raceClaim(rival('succeeded', OTHER, lapsed, { expiresAt: NOW }));
    expect([...seen(raced), raced.result.record.id, raced.result.record.fingerprint]).toEqual([
      ...CLAIMED,
      'my-fresh-id',
      MINE,
    ]);
  });
});
