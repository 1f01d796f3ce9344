/**
 * What a PostgreSQL claim reports as `takeover` when its snapshot is stale (docs/DESIGN.md: Takeover policy). The
 * claim's snapshot sees a retryable failure; another transaction, holding the row's lock, turns it into a lapsed
 * takeover (a holder that died) and commits while the claim waits. The DO UPDATE is pinned to the snapshot's
 * token, so it writes nothing; the claim runs again on a fresh snapshot and reports the takeover it made.
 */
import { describe, expect, it } from 'vitest';
import { available, blockedOn, isolated, pool, request } from '#test/fixtures/postgres.js';
import { LEASE, T0 } from '../../testing/fixtures.js';

describe.skipIf(!available)('postgres claim: takeover behind a stale snapshot', () => {
  it('saw a retryable failure, met a lapsed takeover committed meanwhile: reports takeover true, keeps the id', async () => {
    const { store, table, drop } = await isolated();
    const client = await pool.connect();
    try {
      const first = request({ now: T0 });
      expect((await store.claim(first)).kind).toBe('claimed');
      const failed = { status: 'failed', retryable: true, resultId: null, response: null } as const;
      expect(await store.complete({ pk: first.pk, token: first.token, now: T0 + 1, outcome: failed })).toEqual({
        ok: true,
      });
      await client.query('BEGIN');
      await client.query(
        `UPDATE ${table} SET status = 'in_progress', token = 'dead', retryable = false WHERE pk = $1`,
        [first.pk],
      );
      const claim = store.claim({ ...first, token: 'mine', id: 'fresh-id', now: T0 + 2 + LEASE });
      await blockedOn(table);
      await client.query('COMMIT');
      expect(await claim).toMatchObject({ kind: 'claimed', takeover: true, record: { id: first.id, token: 'mine' } });
    } finally {
      client.release();
      await drop();
    }
  });
});
