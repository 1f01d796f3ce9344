/** The SQLite store's round trips, as `onRoundTrip` sees them: each counted call, its statements and results. */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import type { ClaimRequest, RoundTrip } from 'idem';
import { describe, expect, it } from 'vitest';
import { claimRequest, freshFile, freshStore, READ_KEY, seamedAfterRead } from '#test/fixtures/sqlite.js';
import { claimedRow as sqlRow } from '#test/fixtures/sql.js';
import { losingClaim, oneKeyThrough } from '#test/fixtures/stores.js';
import { eachOpOnce, SUCCEEDED as succeeded, T0, TTL } from '../../testing/fixtures.js';
import { sqliteSchema, sqliteStore } from './index.js';

describe('sqlite store: onRoundTrip sees each counted call, with its statements and what they returned', () => {
  /** A migrated store whose trips land in `trips` (creation's two pragmas and `migrate` included). */
  async function observedStore() {
    const trips: RoundTrip[] = [];
    const store = await freshStore({ onRoundTrip: (trip) => void trips.push(trip) });
    return { store, trips };
  }
  /** The row the engine returns for a record claimed by `req` and not completed. */
  const claimedRow = (req: ClaimRequest) => sqlRow(req, (ms) => ms, 0);
  /** The claim upsert's named parameters for `req`. */
  const claimParams = ({ pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs }: ClaimRequest) => ({
    pk,
    scope,
    key,
    fingerprint,
    id,
    token,
    now,
    leaseExpiresAt: now + leaseMs,
    expiresAt: now + ttlMs,
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

  const select = READ_KEY;

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
            // Pinned to the token of the row read (none here): the claim knows it replaced nothing.
            { sql: upsert?.sql, params: { ...claimParams(req), seen: null } },
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
    const { winner } = await losingClaim(store, claimRequest, trips);
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
    // (a better-sqlite3 call is synchronous, so this is exactly "between the read and the upsert").
    const file = freshFile();
    const other = sqliteStore({ database: new Database(file), closeDatabase: true });
    await other.migrate();
    const rival = claimRequest();
    const trips: RoundTrip[] = [];
    const racing = seamedAfterRead(new Database(file), () => void other.claim(rival));
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
    const { winner } = await losingClaim(store, claimRequest, trips, succeeded);
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
    await eachOpOnce(store, req);
    await store.complete({ pk: req.pk, token: req.token, now: T0 + 3, outcome: succeeded }); // stale: changes 0
    await store.release({ pk: req.pk, token: req.token });
    await store.sweep({ now: T0 + TTL });
    expect(store.roundTrips - before).toBe(8);
    expect(trips.length).toBe(8);
    expect(trips.map((trip) => trip.op)).toEqual([
      'claim',
      'renew',
      'complete',
      'get',
      'list',
      'complete',
      'release',
      'sweep',
    ]);
    // The claim's trip is two statements (the read, then the upsert); every other operation is one.
    expect(trips.map((trip) => (trip.response as unknown[]).length)).toEqual([2, 1, 1, 1, 1, 1, 1, 1]);
    expect(trips[1]?.response).toEqual([{ changes: 1 }]);
    expect(trips[2]?.response).toEqual([{ changes: 1 }]);
    expect(trips[5]?.response).toEqual([{ changes: 0 }]);
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
    await oneKeyThrough(store, claimRequest);
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
