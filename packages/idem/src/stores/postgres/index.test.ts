import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createEngine } from 'idem';
import { describeStoreConformance } from 'idem/testing';
import { recordPk } from '../../core/key.js';
import type { ClaimRequest, IdempotencyStore, Outcome, RoundTrip } from '../contract.js';
import { POSTGRES_URL, serviceAvailable } from '../../../../../test/services.js';
import { postgresSchemaSql, postgresStore, type PostgresStore } from './index.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;
const TABLE = 'idempotency_records';

describe.skipIf(!available)('postgres store', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 20 });
  afterAll(async () => {
    await pool.end();
  });

  /** A fresh schema per store, migrated by the store itself; `drop()` removes it with everything in it. */
  const isolated = async (on: pg.Pool = pool) => {
    const schema = `idem_test_${randomBytes(6).toString('hex')}`;
    const store = postgresStore<pg.PoolClient>({ pool: on, schema });
    await store.migrate();
    const table = `"${schema}"."${TABLE}"`;
    const drop = async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    };
    return { schema, table, store, drop };
  };

  /** The store as the suite sees it, with `close()` also dropping its schema. */
  const dropping = <Tx>(store: IdempotencyStore<Tx>, drop: () => Promise<void>): IdempotencyStore<Tx> => ({
    name: store.name,
    get roundTrips() {
      return store.roundTrips;
    },
    claim: (r) => store.claim(r),
    complete: (r) => store.complete(r),
    renew: (r) => store.renew(r),
    release: (r) => store.release(r),
    get: (pk) => store.get(pk),
    sweep: (r) => store.sweep(r),
    list: (r) => store.list(r),
    close: async () => {
      await store.close();
      await drop();
    },
  });

  describeStoreConformance({
    name: 'postgres',
    contendedClaimExtraTrips: 1,
    create: async () => {
      const { store, drop } = await isolated();
      return dropping(store, drop);
    },
  });

  const scope = 'acct_pg';
  const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => {
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
  const trips = (store: { roundTrips: number }) => {
    let last = store.roundTrips;
    return () => {
      const delta = store.roundTrips - last;
      last = store.roundTrips;
      return delta;
    };
  };
  /** Writes a row as another process would, on `client` (inside its own open transaction). */
  const insertRow = (client: pg.PoolClient, table: string, req: ClaimRequest) =>
    client.query(
      `INSERT INTO ${table} (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at)
       VALUES ($1, $2, $3, 'in_progress', $4, $5, $6, $7, $8, $9)`,
      [
        req.pk,
        req.scope,
        req.key,
        req.fingerprint,
        req.id,
        req.token,
        req.now,
        req.now + req.leaseMs,
        req.now + req.ttlMs,
      ],
    );
  /** Polls until one backend is waiting on a lock in `schema` (a claim blocked behind our open transaction). */
  const blockedOn = async (schema: string) => {
    for (let i = 0; i < 1_000; i++) {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
        [`%${schema}%`],
      );
      if (rows[0]?.n === 1) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`no claim ever waited on a lock in ${schema}`);
  };

  describe('claim under READ COMMITTED', () => {
    it('a claim that waited on a concurrent insert re-runs in a new snapshot and returns the winner: 2 trips', async () => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const winner = request();
        await blocker.query('BEGIN');
        await insertRow(blocker, table, winner);
        const measure = trips(store);
        const pending = store.claim({ ...winner, token: randomUUID(), id: randomUUID() });
        await blockedOn(schema);
        await blocker.query('COMMIT');
        const result = await pending;
        expect(result.kind).toBe('existing');
        expect(result.record.token).toBe(winner.token);
        expect(result.record.id).toBe(winner.id);
        expect(measure()).toBe(2);
      } finally {
        blocker.release();
        await drop();
      }
    });

    it('a claim that waited on a concurrent takeover does not return the stale claimable version: 2 trips', async () => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const first = request();
        await store.claim(first);
        await store.complete({
          pk: first.pk,
          token: first.token,
          now: T0 + 1,
          outcome: { status: 'failed', retryable: true, resultId: null, response: null },
        });
        // Another process reclaims the retryable failure; its transaction is still open.
        const otherToken = randomUUID();
        await blocker.query('BEGIN');
        await blocker.query(
          `UPDATE ${table} SET status = 'in_progress', token = $2, lease_expires_at = $3 WHERE pk = $1`,
          [first.pk, otherToken, T0 + 2 + LEASE],
        );
        const measure = trips(store);
        const pending = store.claim({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + 2 });
        await blockedOn(schema);
        await blocker.query('COMMIT');
        const result = await pending;
        expect(result.kind).toBe('existing');
        expect(result.record.token).toBe(otherToken);
        expect(result.record.status).toBe('in_progress');
        expect(measure()).toBe(2);
      } finally {
        blocker.release();
        await drop();
      }
    });

    it.each([
      { name: 'a dead lease', finish: null, now: T0 + LEASE },
      { name: 'an expired record', finish: succeeded, now: T0 + TTL },
    ])('the same after a concurrent claim of $name: 2 trips, the live claim comes back', async ({ finish, now }) => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const first = request();
        await store.claim(first);
        if (finish) await store.complete({ pk: first.pk, token: first.token, now: T0 + 1, outcome: finish });
        const otherToken = randomUUID();
        await blocker.query('BEGIN');
        await blocker.query(
          `UPDATE ${table} SET status = 'in_progress', token = $2, lease_expires_at = $3, expires_at = $4 WHERE pk = $1`,
          [first.pk, otherToken, now + LEASE, now + TTL],
        );
        const measure = trips(store);
        const pending = store.claim({ ...first, token: randomUUID(), id: randomUUID(), now });
        await blockedOn(schema);
        await blocker.query('COMMIT');
        const result = await pending;
        expect([result.kind, result.record.status, result.record.token]).toEqual([
          'existing',
          'in_progress',
          otherToken,
        ]);
        expect(measure()).toBe(2);
      } finally {
        blocker.release();
        await drop();
      }
    });

    it('a claim that waited on a concurrent insert that rolled back claims in 1 trip', async () => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const loser = request();
        await blocker.query('BEGIN');
        await insertRow(blocker, table, loser);
        const measure = trips(store);
        const mine = { ...loser, token: randomUUID(), id: randomUUID() };
        const pending = store.claim(mine);
        await blockedOn(schema);
        await blocker.query('ROLLBACK');
        const result = await pending;
        expect(result.kind).toBe('claimed');
        expect(result.record.token).toBe(mine.token);
        expect(result.record.id).toBe(mine.id);
        expect(measure()).toBe(1);
      } finally {
        blocker.release();
        await drop();
      }
    });

    it('200 concurrent claims of one key from 3 pools (3 processes): exactly one claims', async () => {
      const { schema, drop } = await isolated();
      const pools = Array.from({ length: 3 }, () => new pg.Pool({ connectionString: POSTGRES_URL, max: 10 }));
      try {
        const stores = pools.map((p) => postgresStore<pg.PoolClient>({ pool: p, schema }));
        const base = request();
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) =>
            (stores[i % 3] as PostgresStore<pg.PoolClient>).claim({ ...base, token: randomUUID(), id: randomUUID() }),
          ),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners.length).toBe(1);
        const token = winners[0]?.record.token;
        expect(results.filter((r) => r.record.token === token).length).toBe(200);
        expect((await postgresStore({ pool, schema }).get(base.pk))?.token).toBe(token);
        const total = stores.reduce((sum, s) => sum + s.roundTrips, 0);
        const extra = total - 200;
        console.log(
          `postgres: 200 contended claims took ${total} round trips; ${extra} re-ran after the READ COMMITTED gap`,
        );
        expect(extra).toBeGreaterThanOrEqual(0);
        expect(extra).toBeLessThanOrEqual(199);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await drop();
      }
    });

    it('under a SERIALIZABLE default the same race raises 40001, and the claim retries it: 2 trips', async () => {
      const strict = new pg.Pool({
        connectionString: POSTGRES_URL,
        max: 2,
        options: '-c default_transaction_isolation=serializable',
      });
      const { schema, table, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const level = await strict.query<{ transaction_isolation: string }>('SHOW transaction_isolation');
        expect(level.rows[0]?.transaction_isolation).toBe('serializable');
        const store = postgresStore<pg.PoolClient>({ pool: strict, schema });
        const winner = request();
        await blocker.query('BEGIN');
        await insertRow(blocker, table, winner);
        const measure = trips(store);
        const pending = store.claim({ ...winner, token: randomUUID(), id: randomUUID() });
        await blockedOn(schema);
        await blocker.query('COMMIT');
        const result = await pending;
        expect(result.kind).toBe('existing');
        expect(result.record.token).toBe(winner.token);
        expect(measure()).toBe(2);
      } finally {
        blocker.release();
        await strict.end();
        await drop();
      }
    });
  });

  describe('refusals are read-only', () => {
    it('a replay, a mismatch and a live lease assign no transaction id and lock no row; a claim does', async () => {
      const { schema, table, store, drop } = await isolated();
      const client = await pool.connect();
      try {
        const done = request();
        await store.claim(done);
        await store.complete({ pk: done.pk, token: done.token, now: T0 + 1, outcome: succeeded });
        const live = request();
        await store.claim(live);
        // The same store, on one connection inside an open transaction, so Postgres can tell whether it wrote.
        const onClient = {
          query: client.query.bind(client),
          connect: () => Promise.reject(new Error('not used by claim')),
        };
        const inTx = postgresStore({ pool: onClient, schema });
        const xid = async () =>
          (await client.query<{ xid: string | null }>('SELECT txid_current_if_assigned()::text AS xid')).rows[0]?.xid;
        await client.query('BEGIN');
        const again = { token: randomUUID(), id: randomUUID(), now: T0 + 2 };
        const replay = await inTx.claim({ ...done, ...again });
        expect([replay.kind, replay.record.status]).toEqual(['existing', 'succeeded']);
        const mismatch = await inTx.claim({ ...done, ...again, fingerprint: 'e'.repeat(64) });
        expect([mismatch.kind, mismatch.record.token]).toEqual(['existing', done.token]);
        const busy = await inTx.claim({ ...live, ...again });
        expect([busy.kind, busy.record.token]).toEqual(['existing', live.token]);
        expect(await xid()).toBeNull();
        expect((await inTx.claim(request({ now: T0 + 2 }))).kind).toBe('claimed');
        expect(await xid()).not.toBeNull();
        await client.query('ROLLBACK');
        // A lock would have left the refusing transaction's id in xmax, even after the rollback.
        const { rows } = await pool.query<{ xmax: string }>(
          `SELECT xmax::text FROM ${table} WHERE pk = ANY($1) ORDER BY pk`,
          [[done.pk, live.pk]],
        );
        expect(rows).toEqual([{ xmax: '0' }, { xmax: '0' }]);
      } finally {
        client.release();
        await drop();
      }
    });

    it('a refusal does not wait for a concurrent writer that holds the row: it answers from its snapshot', async () => {
      const { schema, table, store, drop } = await isolated();
      const blocker = await pool.connect();
      try {
        const holder = request();
        await store.claim(holder);
        // The holder is completing in a transaction (its effects still running): the row is locked, uncommitted.
        await blocker.query('BEGIN');
        await blocker.query(`UPDATE ${table} SET status = 'succeeded' WHERE pk = $1`, [holder.pk]);
        const measure = trips(store);
        let answered = false;
        const claim = store.claim({ ...holder, token: randomUUID(), now: T0 + 1 }).finally(() => (answered = true));
        // Not a timer: the claim either answers, or Postgres shows it waiting on the blocker's row lock.
        const waited = (async () => {
          while (!answered) {
            const { rows } = await pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
              [`%${schema}%`],
            );
            if ((rows[0]?.n ?? 0) > 0) return 'waited on the lock' as const;
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
          return 'answered' as const;
        })();
        const result = await Promise.race([claim, waited]);
        expect(result).not.toBe('waited on the lock');
        expect(result).toMatchObject({ kind: 'existing', record: { status: 'in_progress', token: holder.token } });
        expect(measure()).toBe(1);
      } finally {
        await blocker.query('ROLLBACK');
        blocker.release();
        await drop();
      }
    });
  });

  describe('transactional completion', () => {
    const withLedger = async () => {
      const isolatedStore = await isolated();
      const ledger = `"${isolatedStore.schema}"."ledger"`;
      await pool.query(`CREATE TABLE ${ledger} (record_id text PRIMARY KEY, amount integer NOT NULL)`);
      const charges = async () =>
        (await pool.query<{ record_id: string; amount: number }>(`SELECT record_id, amount FROM ${ledger}`)).rows;
      return { ...isolatedStore, ledger, charges };
    };

    it('commits the effects’ row together with the record, in 3 store round trips', async () => {
      const { store, ledger, charges, drop } = await withLedger();
      try {
        const req = request();
        const record = (await store.claim(req)).record;
        const measure = trips(store);
        const result = await store.complete({
          pk: req.pk,
          token: req.token,
          now: T0 + 1,
          outcome: succeeded,
          effects: (tx) => tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [record.id]),
        });
        expect(result).toEqual({ ok: true });
        expect(measure()).toBe(3); // BEGIN, UPDATE, COMMIT (the effects' INSERT is the work's, not counted)
        expect(await charges()).toEqual([{ record_id: req.id, amount: 500 }]);
        expect((await store.get(req.pk))?.status).toBe('succeeded');
        expect(pool.totalCount).toBe(pool.idleCount); // the connection went back to the pool
      } finally {
        await drop();
      }
    });

    it('with a stale token: ok false, the effects’ row rolled back, the record unchanged', async () => {
      const { store, ledger, charges, drop } = await withLedger();
      try {
        const req = request();
        await store.claim(req);
        const takeover = { ...req, token: randomUUID(), now: T0 + LEASE };
        expect((await store.claim(takeover)).kind).toBe('claimed');
        const measure = trips(store);
        let ran = 0;
        const result = await store.complete({
          pk: req.pk,
          token: req.token,
          now: T0 + LEASE + 1,
          outcome: succeeded,
          effects: async (tx) => {
            ran++;
            await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [req.id]);
          },
        });
        expect(result).toEqual({ ok: false });
        expect(ran).toBe(1);
        expect(measure()).toBe(3); // BEGIN, UPDATE (0 rows), ROLLBACK
        expect(await charges()).toEqual([]);
        const after = await store.get(req.pk);
        expect(after?.status).toBe('in_progress');
        expect(after?.token).toBe(takeover.token);
      } finally {
        await drop();
      }
    });

    it('effects that throw roll back and the error reaches the caller; the record stays in_progress', async () => {
      const { store, ledger, charges, drop } = await withLedger();
      try {
        const req = request();
        await store.claim(req);
        const measure = trips(store);
        const boom = new Error('processor exploded');
        await expect(
          store.complete({
            pk: req.pk,
            token: req.token,
            now: T0 + 1,
            outcome: succeeded,
            effects: async (tx) => {
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [req.id]);
              throw boom;
            },
          }),
        ).rejects.toBe(boom);
        expect(measure()).toBe(2); // BEGIN, ROLLBACK
        expect(await charges()).toEqual([]);
        expect((await store.get(req.pk))?.status).toBe('in_progress');
        // The connection came back clean: the same token completes now.
        expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: succeeded })).toEqual({
          ok: true,
        });
      } finally {
        await drop();
      }
    });

    it('an effects statement that fails in SQL rolls back the whole transaction', async () => {
      const { store, ledger, charges, drop } = await withLedger();
      try {
        const req = request();
        await store.claim(req);
        await expect(
          store.complete({
            pk: req.pk,
            token: req.token,
            now: T0 + 1,
            outcome: succeeded,
            effects: async (tx) => {
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [req.id]);
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [req.id]);
            },
          }),
        ).rejects.toMatchObject({ code: '23505' });
        expect(await charges()).toEqual([]);
        expect((await store.get(req.pk))?.status).toBe('in_progress');
      } finally {
        await drop();
      }
    });

    it('through the engine: one ledger row per key, however many retries', async () => {
      const { store, ledger, charges, drop } = await withLedger();
      try {
        const engine = createEngine({ store, leaseMs: LEASE, ttlMs: 24 * 3_600_000 });
        const run = { scope, key: randomUUID(), fingerprint: 'a'.repeat(64) };
        const work = async ({ id }: { id: string }) => ({
          response: { status: 201, headers: [], body: new TextEncoder().encode(id) },
          effects: (tx: pg.PoolClient) => tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES ($1, 500)`, [id]),
        });
        const first = await engine.run(run, work);
        const again = await engine.run(run, work);
        expect(first.replayed).toBe(false);
        expect(again.replayed).toBe(true);
        expect([...again.response.body]).toEqual([...first.response.body]);
        expect((await charges()).length).toBe(1);
      } finally {
        await drop();
      }
    });
  });

  describe('sweep', () => {
    const expire = (table: string, count: number) =>
      pool.query(
        `INSERT INTO ${table} (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at)
         SELECT 'IDEMPOTENCY#old#' || g || '-' || $2, 'old', g || '-' || $2, 'succeeded', 'f', 'id', 't', $1, $1, $1
         FROM generate_series(1, $3) AS g`,
        [T0, randomUUID(), count],
      );
    const count = async (table: string) =>
      (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n;

    it('deletes 1200 expired records in batches of 500: 3 round trips, the 5 live ones stay', async () => {
      const { table, store, drop } = await isolated();
      try {
        await expire(table, 1200);
        const live = Array.from({ length: 5 }, () => request({ now: T0 + TTL }));
        for (const r of live) await store.claim(r);
        const measure = trips(store);
        expect(await store.sweep({ now: T0 + TTL, batchSize: 500 })).toBe(1200);
        expect(measure()).toBe(3); // 500, 500, 200 (a short batch ends the loop)
        expect(await count(table)).toBe(5);
        for (const r of live) expect((await store.get(r.pk))?.token).toBe(r.token);
      } finally {
        await drop();
      }
    });

    it('stops at limit; a last full batch costs one more, empty, statement', async () => {
      const { table, store, drop } = await isolated();
      try {
        await expire(table, 1200);
        const measure = trips(store);
        expect(await store.sweep({ now: T0 + TTL, batchSize: 500, limit: 700 })).toBe(700);
        expect(measure()).toBe(2); // 500, 200
        expect(await store.sweep({ now: T0 + TTL, batchSize: 500 })).toBe(500);
        expect(measure()).toBe(2); // 500 (full), 0
        expect(await count(table)).toBe(0);
      } finally {
        await drop();
      }
    });

    it('rejects a batch size that is not a positive integer', async () => {
      const { store, drop } = await isolated();
      try {
        await expect(store.sweep({ now: T0, batchSize: 0 })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
      } finally {
        await drop();
      }
    });
  });

  describe('migrate and options', () => {
    it('runs concurrently from several stores, and again, without failing', async () => {
      const schema = `idem_test_${randomBytes(6).toString('hex')}`;
      const pools = Array.from({ length: 2 }, () => new pg.Pool({ connectionString: POSTGRES_URL, max: 2 }));
      try {
        const stores = [...pools, ...pools].map((p) => postgresStore<pg.PoolClient>({ pool: p, schema }));
        await Promise.all(stores.map((s) => s.migrate()));
        await (stores[0] as PostgresStore<pg.PoolClient>).migrate();
        const { rows } = await pool.query<{ indexname: string }>(
          'SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname',
          [schema],
        );
        expect(rows.map((r) => r.indexname)).toEqual([
          'idempotency_records_expires_at_idx',
          'idempotency_records_pkey',
          'idempotency_records_scope_claimed_at_idx',
        ]);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    });

    it('schema.sql holds the same DDL as migrate() for the default names', async () => {
      const file = await readFile(new URL('./schema.sql', import.meta.url), 'utf8');
      const statements = file
        .split('\n')
        .filter((line) => !line.startsWith('--'))
        .join('\n')
        .trim();
      expect(statements).toBe(postgresSchemaSql().trim());
      expect(postgresSchemaSql({ schema: 'payments', table: 'keys' }).split('\n')[0]).toBe(
        'CREATE SCHEMA IF NOT EXISTS "payments";',
      );
    });

    it('validates options, naming the one that is wrong', () => {
      expect(() => postgresStore({ pool, table: 'records; DROP TABLE x' })).toThrow(
        'Expected `table` to be an identifier of letters, digits and _ (not starting with a digit, at most 48 characters), got "records; DROP TABLE x".',
      );
      expect(() => postgresStore({ pool, schema: '1abc' })).toThrow(/^Expected `schema` to be/);
      expect(() => postgresStore({ pool: {} as never })).toThrow(/^Expected `pool` to be a pg\.Pool/);
    });

    it('sends claim, complete, renew, release and get as named statements, once parsed per connection', async () => {
      const { schema, drop } = await isolated();
      const one = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const prepared = async () =>
        (await one.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).rows.map(
          (r) => r.name,
        );
      try {
        const plain = postgresStore({ pool: one, schema, preparedStatements: false });
        const req = request();
        await plain.claim(req);
        await plain.get(req.pk);
        expect(await prepared()).toEqual([]);
        const store = postgresStore({ pool: one, schema });
        for (let i = 0; i < 2; i++) {
          const r = request();
          await store.claim(r);
          await store.renew({ pk: r.pk, token: r.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
          await store.complete({ pk: r.pk, token: r.token, now: T0 + 2, outcome: succeeded });
          await store.release({ pk: r.pk, token: r.token });
          await store.get(r.pk);
        }
        const names = await prepared();
        expect(names.map((name) => name.replace(/_[0-9a-f]{16}$/, ''))).toEqual([
          'idem_claim',
          'idem_complete',
          'idem_get',
          'idem_release',
          'idem_renew',
        ]);
        // Another table on the same pool gets its own names: pg refuses one name for two texts.
        const other = await isolated(one);
        try {
          expect((await other.store.claim(request())).kind).toBe('claimed');
          expect((await prepared()).length).toBe(6);
        } finally {
          await other.drop();
        }
      } finally {
        await one.end();
        await drop();
      }
    });

    it('with preparedStatements false, a pool whose query() takes only (text, values) works', async () => {
      const { schema, drop } = await isolated();
      const textOnly = {
        query: (text: string, values?: unknown[]) => {
          if (typeof text !== 'string') throw new TypeError('text only');
          return pool.query(text, values);
        },
        connect: () => pool.connect(),
      };
      try {
        const store = postgresStore({ pool: textOnly, schema, preparedStatements: false });
        const req = request();
        expect((await store.claim(req)).kind).toBe('claimed');
        expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded })).toEqual({
          ok: true,
        });
        expect((await store.get(req.pk))?.status).toBe('succeeded');
        expect(() => postgresStore({ pool, preparedStatements: 'yes' as never })).toThrow(
          'Expected `preparedStatements` to be a boolean, got "yes".',
        );
      } finally {
        await drop();
      }
    });

    it('close() leaves the pool open unless endPoolOnClose is set', async () => {
      const own = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const store = postgresStore({ pool: own });
      await store.close();
      expect(own.ended).toBe(false);
      await expect(store.get('IDEMPOTENCY#x#y')).rejects.toThrow('postgres store is closed');
      await postgresStore({ pool: own, endPoolOnClose: true }).close();
      expect(own.ended).toBe(true);
    });
  });

  describe('onRoundTrip', () => {
    /** A store on a fresh schema whose trips land in `trips`, from its `migrate()` on. */
    const observed = async (onRoundTrip?: (trip: RoundTrip) => void) => {
      const schema = `idem_test_${randomBytes(6).toString('hex')}`;
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
    const claimedRow = (req: ClaimRequest) => ({
      pk: req.pk,
      scope: req.scope,
      key: req.key,
      status: 'in_progress',
      fingerprint: req.fingerprint,
      id: req.id,
      token: req.token,
      claimed_at: String(req.now),
      lease_expires_at: String(req.now + req.leaseMs),
      expires_at: String(req.now + req.ttlMs),
      retryable: false,
      result_id: null,
      response_status: null,
      response_headers: null,
      response_body: null,
    });
    const claimValues = (req: ClaimRequest) => [
      req.pk,
      req.scope,
      req.key,
      req.fingerprint,
      req.id,
      req.token,
      req.now,
      req.now + req.leaseMs,
      req.now + req.ttlMs,
    ];
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
            response: { rows: [{ ...claimedRow(req), claimed: true }], rowCount: 1 },
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
        const winner = request();
        await store.claim(winner);
        trips.length = 0;
        const loser = request({ key: winner.key, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
        expect((await store.claim(loser)).kind).toBe('existing');
        expect(trips).toEqual([
          {
            op: 'claim',
            request: { text: textOf(trips[0]), values: claimValues(loser) },
            response: { rows: [{ ...claimedRow(winner), claimed: false }], rowCount: 1 },
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
        const winner = request();
        await store.claim(winner);
        await store.complete({ pk: winner.pk, token: winner.token, now: T0 + 1, outcome: succeeded });
        trips.length = 0;
        await store.claim(request({ key: winner.key, token: randomUUID(), now: T0 + 2 }));
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
        await store.claim(req);
        await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
        await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: succeeded });
        await store.get(req.pk);
        await store.list({ scope, limit: 10 });
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
        const req = request();
        const won = await store.claim(req);
        expect([won.kind, won.record.token]).toEqual(['claimed', req.token]);
        const lost = await store.claim(request({ key: req.key, token: randomUUID() }));
        expect([lost.kind, lost.record.token]).toEqual(['existing', req.token]);
        const effects = (tx: pg.PoolClient) => tx.query(`INSERT INTO ${ledger} VALUES ($1)`, [won.record.id]);
        const completed = await store.complete({
          pk: req.pk,
          token: req.token,
          now: T0 + 1,
          outcome: succeeded,
          effects,
        });
        expect(completed).toEqual({ ok: true });
        expect((await store.get(req.pk))?.status).toBe('succeeded');
        expect((await store.list({ scope, limit: 10 })).map((r) => r.pk)).toEqual([req.pk]);
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
