/** The PostgreSQL store's effects: the work's writes commit in the record's transaction, or with the claim in `runLocal`. */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { RoundTrip } from '../contract.js';
import { POSTGRES_URL } from '#test/services.js';
import { available, blockedOn, isolated, pool, POSTGRES, request } from '#test/fixtures/postgres.js';
import { describeTransactionalCompletion } from '#test/fixtures/sql.js';
import { SUCCEEDED as succeeded } from '../../testing/fixtures.js';
import { postgresStore } from './index.js';

describe.skipIf(!available)('postgres store', () => {
  describeTransactionalCompletion(POSTGRES);

  for (const pipeline of [false, true]) {
    describe(`runLocal: the claim, the work and the completion in one transaction${pipeline ? ' (pipelined client)' : ''}`, () => {
      /** Statements go out two at a time on a pipelining client: BEGIN with the claim, the UPDATE with COMMIT. */
      const on = new pg.Pool({ connectionString: POSTGRES_URL, max: 6, pipeline });
      afterAll(async () => {
        await on.end();
      });
      /** What a trip was: its statement (claim, complete, or the text) and its row count, or its SQLSTATE. */
      const shape = (trip: RoundTrip): string => {
        const text = (trip.request as { text: string }).text;
        const what = text.startsWith('WITH cur') ? 'claim' : text.startsWith('WITH done') ? 'complete' : text;
        if (trip.error !== undefined) return `${what}: ${(trip.error as { code?: string }).code}`;
        return what === 'claim' || what === 'complete'
          ? `${what}: ${(trip.response as { rowCount: number }).rowCount}`
          : what;
      };
      const ledgerOf = async (schema: string) => {
        const ledger = `"${schema}".ledger`;
        await pool.query(`CREATE TABLE ${ledger} (record_id text PRIMARY KEY, amount integer NOT NULL)`);
        return ledger;
      };

      it('a new key is BEGIN, the claim, the fenced UPDATE, COMMIT: the record and the ledger row share one transaction id', async () => {
        const { schema, table, drop } = await isolated(on);
        const seen: RoundTrip[] = [];
        const store = postgresStore<pg.PoolClient>({ pool: on, schema, onRoundTrip: (trip) => void seen.push(trip) });
        try {
          const ledger = await ledgerOf(schema);
          const req = request();
          const result = await store.runLocal({
            ...req,
            work: async (tx, record) => {
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [record.id]);
              return succeeded;
            },
          });
          expect(result).toEqual({ kind: 'committed', record: await store.get(req.pk) });
          expect(seen.slice(0, 4).map(shape)).toEqual(['BEGIN', 'claim: 1', 'complete: 1', 'COMMIT']);
          const xmin = async (from: string) =>
            (await pool.query<{ x: string }>(`SELECT xmin::text AS x FROM ${from}`)).rows;
          const [recordXmin, ledgerXmin] = [await xmin(table), await xmin(ledger)];
          expect(recordXmin.length).toBe(1);
          expect(ledgerXmin).toEqual(recordXmin);
          // A refusal: BEGIN, the claim (which writes nothing), ROLLBACK; the work is not called.
          seen.length = 0;
          const replay = await store.runLocal({
            ...request({ key: req.key }),
            work: () => {
              throw new Error('must not run');
            },
          });
          expect([replay.kind, seen.map(shape)]).toEqual(['existing', ['BEGIN', 'claim: 1', 'ROLLBACK']]);
          expect(await xmin(table)).toEqual(recordXmin);
        } finally {
          await drop();
        }
      });

      it('work that returns null or throws rolls back its writes and the claim: no record, no ledger row', async () => {
        const { schema, store, drop } = await isolated(on);
        try {
          const ledger = await ledgerOf(schema);
          const req = request();
          const write = (tx: pg.PoolClient, id: string) =>
            tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [id]);
          expect(
            await store.runLocal({ ...req, work: async (tx, record) => (await write(tx, record.id), null) }),
          ).toEqual({
            kind: 'rolled-back',
          });
          const boom = new Error('boom');
          await expect(
            store.runLocal({
              ...request({ key: req.key }),
              work: async (tx, record) => {
                await write(tx, record.id);
                throw boom;
              },
            }),
          ).rejects.toBe(boom);
          expect([await store.get(req.pk), (await pool.query(`SELECT * FROM ${ledger}`)).rows]).toEqual([null, []]);
          expect(on.totalCount).toBe(on.idleCount); // every connection went back to the pool
        } finally {
          await drop();
        }
      });

      it('work that deletes its own claim: the guarded UPDATE fails, so the COMMIT sent behind it commits nothing', async () => {
        const { schema, table, store, drop } = await isolated(on);
        try {
          const ledger = await ledgerOf(schema);
          const req = request();
          await expect(
            store.runLocal({
              ...req,
              work: async (tx, record) => {
                await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [record.id]);
                await tx.query(`DELETE FROM ${table} WHERE pk = $1`, [record.pk]);
                return succeeded;
              },
            }),
          ).rejects.toThrow(`postgres store: runLocal of ${req.pk} found its own claim gone before the completion`);
          expect([await store.get(req.pk), (await pool.query(`SELECT * FROM ${ledger}`)).rows]).toEqual([null, []]);
          expect(on.totalCount).toBe(on.idleCount);
        } finally {
          await drop();
        }
      });

      for (const [isolation, first] of [
        ['read committed', 'claim: 0'],
        ['repeatable read', 'claim: 40001'],
      ] as const) {
        it(`under ${isolation}: the duplicate waits on the winner's row, starts again, and gets the winner's record`, async () => {
          const { schema, drop } = await isolated();
          const own = new pg.Pool({
            connectionString: POSTGRES_URL,
            max: 4,
            pipeline,
            options: `-c default_transaction_isolation=${isolation.replace(' ', '\\ ')}`,
          });
          try {
            const ledger = await ledgerOf(schema);
            const winner = postgresStore<pg.PoolClient>({ pool: own, schema });
            const loserTrips: RoundTrip[] = [];
            const loser = postgresStore<pg.PoolClient>({
              pool: own,
              schema,
              onRoundTrip: (trip) => void loserTrips.push(trip),
            });
            const req = request();
            let started!: () => void;
            const winnerHolds = new Promise<void>((resolve) => (started = resolve));
            let loserRuns = 0;
            let level: string | undefined;
            const first$ = winner.runLocal({
              ...req,
              work: async (tx, record) => {
                level = (await tx.query<{ transaction_isolation: string }>('SHOW transaction_isolation')).rows[0]
                  ?.transaction_isolation;
                started();
                await blockedOn(schema); // the loser's INSERT waits on our uncommitted row
                await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [record.id]);
                return succeeded;
              },
            });
            await winnerHolds;
            const second = await loser.runLocal({
              ...req,
              token: randomUUID(),
              id: randomUUID(),
              work: () => (loserRuns++, succeeded),
            });
            const won = await first$;
            expect([level, won.kind, second.kind, loserRuns]).toEqual([isolation, 'committed', 'existing', 0]);
            expect(second.kind === 'existing' && second.record.token).toBe(req.token);
            expect(loserTrips.map(shape)).toEqual(['BEGIN', first, 'ROLLBACK', 'BEGIN', 'claim: 1', 'ROLLBACK']);
            expect((await pool.query(`SELECT record_id FROM ${ledger}`)).rows).toEqual([{ record_id: req.id }]);
          } finally {
            await own.end();
            await drop();
          }
        });
      }
    });
  }
});
