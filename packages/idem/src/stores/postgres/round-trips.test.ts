/** The PostgreSQL store's round trips, as `onRoundTrip` sees them: each statement, what it returned or its error. */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { ClaimRequest, RoundTrip } from '../contract.js';
import { POSTGRES_URL } from '#test/services.js';
import { available, freshSchema, pool, request, TABLE } from '#test/fixtures/postgres.js';
import { claimedRow as sqlRow, claimValues } from '#test/fixtures/sql.js';
import { losingClaim, oneKeyThrough } from '#test/fixtures/stores.js';
import { eachOpOnce, SUCCEEDED as succeeded, T0, TTL } from '../../testing/fixtures.js';
import { postgresSchemaSql, postgresStore } from './index.js';

describe.skipIf(!available)('postgres store', () => {
  describe('onRoundTrip', () => {
    /** A store on a fresh schema whose trips land in `trips`, from its `migrate()` on. */
    const observed = async (onRoundTrip?: (trip: RoundTrip) => void) => {
      const schema = freshSchema();
      const trips: RoundTrip[] = [];
      const store = postgresStore<pg.PoolClient>({
        pool,
        schema,
        onRoundTrip: onRoundTrip ?? ((trip) => void trips.push(trip)),
      });
      await store.migrate();
      const drop = async () => {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      };
      return { schema, table: `"${schema}"."${TABLE}"`, store, trips, drop };
    };
    /** A row as pg returns it for a record claimed by `req` and not completed (`bigint` columns as strings). */
    const claimedRow = (req: ClaimRequest) => sqlRow(req, String, false);
    const textOf = (trip: RoundTrip | undefined) => (trip?.request as { text: string }).text;

    it('migrate() reports each statement of its transaction', async () => {
      const { schema, store, trips, drop } = await observed();
      try {
        const [createSchema, ...rest] = postgresSchemaSql({ schema }).trim().split('\n\n');
        expect(trips.map(textOf)).toEqual([
          'BEGIN',
          'SELECT pg_advisory_xact_lock(hashtext($1))',
          'SELECT 1 FROM pg_namespace WHERE nspname = $1',
          createSchema,
          ...rest,
          'COMMIT',
        ]);
        expect(new Set(trips.map((trip) => trip.op))).toEqual(new Set(['migrate']));
        expect(trips[0]).toEqual({ op: 'migrate', request: { text: 'BEGIN' }, response: { rows: [], rowCount: null } });
        expect(trips[2]).toEqual({
          op: 'migrate',
          request: { text: 'SELECT 1 FROM pg_namespace WHERE nspname = $1', values: [schema] },
          response: { rows: [], rowCount: 0 },
        });
        expect(trips.length).toBe(store.roundTrips);
      } finally {
        await drop();
      }
    });

    it('a fresh claim is one trip: the claim statement, and the row it returned with claimed = true', async () => {
      const { store, trips, drop } = await observed();
      try {
        trips.length = 0;
        const req = request();
        expect((await store.claim(req)).kind).toBe('claimed');
        const text = textOf(trips[0]);
        expect(trips).toEqual([
          {
            op: 'claim',
            request: { text, values: claimValues(req) },
            response: { rows: [{ ...claimedRow(req), claimed: true, takeover: false }], rowCount: 1 },
          },
        ]);
        expect(text).toContain('WITH cur AS (');
        expect(text).toContain('ON CONFLICT (pk) DO UPDATE SET');
      } finally {
        await drop();
      }
    });

    it('a losing claim is one trip whose rows hold the record in the way, with claimed = false', async () => {
      const { store, trips, drop } = await observed();
      try {
        const { winner, loser } = await losingClaim(store, request, trips);
        expect(trips).toEqual([
          {
            op: 'claim',
            request: { text: textOf(trips[0]), values: claimValues(loser) },
            response: { rows: [{ ...claimedRow(winner), claimed: false, takeover: false }], rowCount: 1 },
          },
        ]);
        expect(textOf(trips[0])).toContain('WITH cur AS (');
      } finally {
        await drop();
      }
    });

    it('a losing claim on a finished record shows jsonb as text and bytea as a Buffer, as pg returned them', async () => {
      const { store, trips, drop } = await observed();
      try {
        const { winner } = await losingClaim(store, request, trips, succeeded);
        expect(trips[0]?.response).toEqual({
          rows: [
            {
              ...claimedRow(winner),
              status: 'succeeded',
              result_id: 'ch_1',
              response_status: 201,
              response_headers: '[["content-type", "application/json"]]',
              response_body: Buffer.from([0x7b, 0x7d]),
              claimed: false,
              takeover: false,
            },
          ],
          rowCount: 1,
        });
        const { rows } = trips[0]?.response as { rows: Array<{ response_body: unknown }> };
        expect(Buffer.isBuffer(rows[0]?.response_body)).toBe(true);
      } finally {
        await drop();
      }
    });

    it('reports as many trips as roundTrips counts; a transactional completion is BEGIN, UPDATE, COMMIT', async () => {
      const { table, store, trips, drop } = await observed();
      try {
        const before = store.roundTrips;
        trips.length = 0;
        const req = request();
        await eachOpOnce(store, req);
        const other = request();
        await store.claim(other);
        const effects = (tx: pg.PoolClient) => tx.query(`SELECT count(*) FROM ${table}`); // the work's: not reported
        await store.complete({ pk: other.pk, token: other.token, now: T0 + 2, outcome: succeeded, effects });
        await store.release({ pk: other.pk, token: other.token });
        await store.sweep({ now: T0 + TTL });
        expect(store.roundTrips - before).toBe(11);
        expect(trips.length).toBe(11);
        expect(trips.map((trip) => trip.op)).toEqual([
          'claim',
          'renew',
          'complete',
          'get',
          'list',
          'claim',
          'complete',
          'complete',
          'complete',
          'release',
          'sweep',
        ]);
        expect(trips.slice(6, 9).map(textOf)).toEqual(['BEGIN', textOf(trips[2]), 'COMMIT']);
        expect(trips.slice(6, 9).map((trip) => trip.response)).toEqual([
          { rows: [], rowCount: null },
          { rows: [], rowCount: 1 },
          { rows: [], rowCount: null },
        ]);
        expect(trips[1]?.response).toEqual({ rows: [], rowCount: 1 });
        expect(trips[3]?.request).toEqual({ text: textOf(trips[3]), values: [req.pk] });
        expect(trips[9]?.response).toEqual({ rows: [], rowCount: 0 }); // a finished record is not released
        expect(trips[10]?.response).toEqual({ rows: [], rowCount: 2 }); // both records, in one short batch
      } finally {
        await drop();
      }
    });

    it('a statement that fails is reported with its error', async () => {
      const own = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const trips: RoundTrip[] = [];
      const store = postgresStore({
        pool: own,
        schema: 'idem_never_created',
        onRoundTrip: (trip) => void trips.push(trip),
      });
      try {
        const failure = await store.get('IDEMPOTENCY#x#y').then(
          () => undefined,
          (error: unknown) => error,
        );
        expect((failure as { code?: unknown }).code).toBe('42P01'); // undefined_table, Postgres's own answer
        expect(trips).toEqual([
          {
            op: 'get',
            request: { text: textOf(trips[0]), values: ['IDEMPOTENCY#x#y'] },
            error: failure,
          },
        ]);
      } finally {
        await own.end();
      }
    });

    it('an observer that throws changes nothing: same results and round trips', async () => {
      let calls = 0;
      const { schema, store, drop } = await observed(() => {
        calls++;
        throw new Error('observer broke');
      });
      try {
        const ledger = `"${schema}"."ledger"`;
        await pool.query(`CREATE TABLE ${ledger} (record_id text PRIMARY KEY)`);
        const before = store.roundTrips;
        const effects = (tx: pg.PoolClient, id: string) => tx.query(`INSERT INTO ${ledger} VALUES ($1)`, [id]);
        const req = await oneKeyThrough(store, request, { effects });
        expect((await pool.query(`SELECT record_id FROM ${ledger}`)).rows).toEqual([{ record_id: req.id }]);
        expect(store.roundTrips - before).toBe(7); // claim ×2, BEGIN, UPDATE, COMMIT, get, list
        expect(calls).toBe(store.roundTrips);
        expect(pool.totalCount).toBe(pool.idleCount); // the connection went back to the pool
      } finally {
        await drop();
      }
    });

    it('refuses an onRoundTrip that is not a function', () => {
      expect(() => postgresStore({ pool, onRoundTrip: 'log' as never })).toThrow(
        'Expected `onRoundTrip` to be a function, got "log".',
      );
    });
  });
});
