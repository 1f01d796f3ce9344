/**
 * The SQLite claim outside a transaction: the upsert alone (autocommit), then, when it wrote nothing, a plain read
 * of the row in the way — which may have moved on in between. Here a second connection writes a live rival row
 * right after the claim's pre-read, and deletes it right before the read that follows the refused upsert: the
 * claim must run the upsert again and win, not answer from a row that is gone. Inside runLocal's transaction the
 * upsert is not pinned to what the pre-read saw: its WHERE alone must refuse a row that holds another payload.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { freshFile, seamedReads } from '#test/fixtures/sqlite.js';
import { recordPk } from '../../core/key.js';
import type { ClaimRequest, IdempotencyRecord, RoundTrip } from '../contract.js';
import { T0, TTL } from '../../testing/fixtures.js';
import { sqliteStore } from './index.js';

const scope = 'acct_alone';

/**
 * A fresh database file, a key, a second connection to it, and `rival()`: that connection writes the key's row for
 * another payload ('b'…), live (`in_progress`) or a retryable failure (`failed`).
 */
function rivalry(status: 'in_progress' | 'failed') {
  const file = freshFile();
  const key = randomUUID();
  const pk = recordPk(scope, key);
  const other = new Database(file);
  const rival = () =>
    other
      .prepare(
        `INSERT INTO "idem_records" ("pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at",
          "lease_expires_at", "expires_at", "retryable") VALUES (?, ?, ?, ?, ?, 'rival-id', 'rival-token', ?, ?, ?, ?)`,
      )
      .run(pk, scope, key, status, 'b'.repeat(64), T0, T0 + TTL, T0 + TTL, status === 'failed' ? 1 : 0);
  return { file, key, pk, other, rival };
}

describe('SQLite claim: the upsert alone, in autocommit', () => {
  it('a rival row gone between the refused upsert and the read after it: the upsert runs again and wins', async () => {
    const { file, key, pk, other, rival } = rivalry('in_progress');
    const gone = () => other.prepare('DELETE FROM "idem_records" WHERE "pk" = ?').run(pk);
    const trips: RoundTrip[] = [];
    const store = sqliteStore({
      database: seamedReads(new Database(file), { 0: { after: rival }, 1: { before: gone } }),
      closeDatabase: true,
      onRoundTrip: (trip) => void trips.push(trip),
    });
    try {
      await store.migrate();
      trips.length = 0;
      const request: ClaimRequest = {
        pk,
        scope,
        key,
        fingerprint: 'a'.repeat(64),
        token: 'my-token',
        id: 'my-id',
        now: T0 + 1,
        leaseMs: 10_000,
        ttlMs: TTL,
      };
      const result = await store.claim(request);
      expect([result.kind, result.record.token, result.record.id]).toEqual(['claimed', 'my-token', 'my-id']);
      // One trip: the pre-read (nothing), the upsert (refused by the rival), the read (the rival gone), the upsert.
      expect(trips.length).toBe(1);
      const { statements } = trips[0]?.request as { statements: Array<{ sql: string }> };
      const results = trips[0]?.response as unknown[][];
      expect(statements.map((s) => s.sql.trimStart().split(/\s/)[0])).toEqual(['SELECT', 'INSERT', 'SELECT', 'INSERT']);
      expect(results.map((rows) => rows.length)).toEqual([0, 0, 0, 1]);
      expect((await store.get(pk))?.token).toBe('my-token');
    } finally {
      other.close();
      await store.close();
    }
  });
});

describe('SQLite claim: inside runLocal, the upsert checks the fingerprint itself', () => {
  it('a retryable failure of another payload written after the pre-read: existing, the work never runs', async () => {
    // Right after runLocal's plain read (no row), another process claims the key for another payload and fails
    // retryably: a row the claim condition accepts only for that payload.
    const { file, key, pk, other, rival } = rivalry('failed');
    const store = sqliteStore({
      database: seamedReads(new Database(file), { 0: { after: rival } }),
      closeDatabase: true,
    });
    try {
      await store.migrate();
      const ran: IdempotencyRecord[] = [];
      const request = { pk, scope, key, fingerprint: 'a'.repeat(64), token: 'my-token', id: 'my-id', now: T0 + 1 };
      const result = await store.runLocal({
        ...request,
        leaseMs: 10_000,
        ttlMs: TTL,
        work: (_tx, record) => {
          ran.push(record);
          return { status: 'succeeded', retryable: false, resultId: 'charge', response: null };
        },
      });
      expect(result.kind).toBe('existing');
      expect(result.kind === 'existing' ? [result.record.token, result.record.fingerprint] : []).toEqual([
        'rival-token',
        'b'.repeat(64),
      ]);
      expect(ran).toEqual([]);
      expect((await store.get(pk))?.status).toBe('failed');
    } finally {
      other.close();
      await store.close();
    }
  });
});
