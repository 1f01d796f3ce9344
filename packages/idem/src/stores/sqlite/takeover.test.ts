/**
 * What a SQLite claim reports as `takeover` when the row changes between its read and its upsert (docs/DESIGN.md:
 * Takeover policy). The claim reads a retryable failure; right after that read another connection takes the key
 * over and its holder dies (an in_progress row whose lease has lapsed, under a new token). The upsert is pinned to
 * the token read, so it refuses, reads again and claims over the lapsed lease: a takeover, not a plain retry.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { freshFile, seamedAfterRead } from '#test/fixtures/sqlite.js';
import { recordPk } from '../../core/key.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import { sqliteStore } from './index.js';

const scope = 'acct_takeover';

describe('SQLite claim: takeover when the row moved on after the read', () => {
  it('read a retryable failure, met a lapsed takeover: reports takeover true and keeps the id', async () => {
    const file = freshFile();
    const key = randomUUID();
    const pk = recordPk(scope, key);
    const fingerprint = 'f'.repeat(64);
    const setup = sqliteStore({ database: new Database(file), closeDatabase: true });
    await setup.migrate();
    const first = { pk, scope, key, fingerprint, token: 'first', id: 'the-id', now: T0, leaseMs: LEASE, ttlMs: TTL };
    expect((await setup.claim(first)).kind).toBe('claimed');
    const failed = { status: 'failed', retryable: true, resultId: null, response: null } as const;
    expect(await setup.complete({ pk, token: 'first', now: T0 + 1, outcome: failed })).toEqual({ ok: true });
    await setup.close();

    const other = new Database(file);
    // Another process reclaims the failure at T0 + 2 and dies: by T0 + 2 + LEASE its lease has lapsed.
    const diedHolding = () =>
      other
        .prepare(`UPDATE "idem_records" SET "status" = 'in_progress', "token" = 'dead', "retryable" = 0 WHERE "pk" = ?`)
        .run(pk);
    const store = sqliteStore({ database: seamedAfterRead(new Database(file), diedHolding), closeDatabase: true });
    try {
      const now = T0 + 2 + LEASE;
      const claim = await store.claim({ ...first, token: 'mine', id: randomUUID(), now });
      expect(claim).toMatchObject({ kind: 'claimed', takeover: true, record: { id: 'the-id', token: 'mine' } });
    } finally {
      await store.close();
      other.close();
    }
  });
});
