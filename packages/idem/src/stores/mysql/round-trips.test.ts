/** The MySQL store's round trips, as `onRoundTrip` sees them: each statement, what it returned or its error. */
import { randomUUID } from 'node:crypto';
import type mysql from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import type { RoundTrip } from '../contract.js';
import { available, isolated, pool, request, scope } from '#test/fixtures/mysql.js';
import { LEASE, SUCCEEDED as succeeded, T0, TTL } from '../../testing/fixtures.js';
import { mysqlStore } from './index.js';

describe.skipIf(!available)('mysql store', () => {
  describe('onRoundTrip', () => {
    it('a claim is one trip: the upsert’s header and the row, in one response; then each op reports once', async () => {
      const { name: table, drop } = await isolated();
      const seen: RoundTrip[] = [];
      try {
        const store = mysqlStore<mysql.PoolConnection>({ pool, table, onRoundTrip: (trip) => void seen.push(trip) });
        const req = request();
        await store.claim(req);
        const [claim] = seen;
        // `DO LAST_INSERT_ID(0)` (the takeover flag's reset), the upsert's header, the row.
        const [, header, rows] = claim?.response as [unknown, { affectedRows: number }, Array<Record<string, unknown>>];
        expect([claim?.op, header.affectedRows, rows.length, Buffer.from(rows[0]?.token as Buffer).toString()]).toEqual(
          ['claim', 1, 1, req.token],
        );
        expect((claim?.request as { sql: string }).sql).toContain('ON DUPLICATE KEY UPDATE');
        await store.claim({ ...req, token: randomUUID(), now: T0 + 1 });
        await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
        const effects = (tx: mysql.PoolConnection) => tx.query(`SELECT count(*) FROM \`${table}\``); // the work's: not reported
        await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: succeeded, effects });
        await store.get(req.pk);
        await store.list({ scope, limit: 10 });
        await store.release({ pk: req.pk, token: req.token });
        await store.sweep({ now: T0 });
        expect(seen.map((trip) => trip.op)).toEqual([
          'claim',
          'claim',
          'renew',
          'complete',
          'complete',
          'complete',
          'get',
          'list',
          'release',
          'sweep',
        ]);
        expect(seen.length).toBe(store.roundTrips);
        expect(seen.slice(3, 6).map((trip) => (trip.request as { sql: string }).sql)).toEqual([
          'START TRANSACTION',
          expect.stringContaining('UPDATE'),
          'COMMIT',
        ]);
        expect((seen[8]?.response as { affectedRows: number }).affectedRows).toBe(0); // a finished record is not released
      } finally {
        await drop();
      }
    });

    it('a statement that fails is reported with its error; an observer that throws changes nothing', async () => {
      const seen: RoundTrip[] = [];
      const missing = mysqlStore({ pool, table: 'idem_never_created', onRoundTrip: (trip) => void seen.push(trip) });
      const failure = await missing.get('IDEMPOTENCY#x#y').then(
        () => undefined,
        (error: unknown) => error,
      );
      expect((failure as { errno?: unknown }).errno).toBe(1146); // ER_NO_SUCH_TABLE, the server's own answer
      const sql = String((seen[0]?.request as { sql?: unknown } | undefined)?.sql);
      expect(sql).toContain('FROM `idem_never_created` WHERE pk = ?');
      expect(seen).toEqual([{ op: 'get', request: { sql, values: [Buffer.from('IDEMPOTENCY#x#y')] }, error: failure }]);

      const { name: table, drop } = await isolated();
      try {
        let calls = 0;
        const store = mysqlStore({
          pool,
          table,
          onRoundTrip: () => {
            calls++;
            throw new Error('observer broke');
          },
        });
        const req = request();
        expect((await store.claim(req)).kind).toBe('claimed');
        expect((await store.claim(request({ key: req.key }))).record.token).toBe(req.token);
        expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded })).toEqual({
          ok: true,
        });
        expect([calls, store.roundTrips]).toEqual([3, 3]);
      } finally {
        await drop();
      }
    });
  });
});
