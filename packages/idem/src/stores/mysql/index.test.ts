import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from 'idem';
import { describeStoreConformance } from 'idem/testing';
import { recordPk } from '../../core/key.js';
import type { ClaimRequest, IdempotencyStore, Outcome, RoundTrip } from '../contract.js';
import { MYSQL_URL, serviceAvailable } from '../../../../../test/services.js';
import { mysqlSchemaSql, mysqlStore, type MysqlPool, type MysqlStore } from './index.js';

const available = await serviceAvailable('MySQL', MYSQL_URL);
/** SIMULTANEOUS_ASSIGNMENT is MariaDB's alone. */
const mariadb = available && (await serverVersion()).includes('MariaDB');
const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;
const hex = () => randomBytes(6).toString('hex');

describe.skipIf(!available)('mysql store', () => {
  /** A database of this file's own, created and dropped here: every store gets its own table in it. */
  const database = `idem_test_${hex()}`;
  const url = (() => {
    const u = new URL(MYSQL_URL);
    u.pathname = `/${database}`;
    return u.toString();
  })();
  const newPool = (options: mysql.PoolOptions = {}) =>
    mysql.createPool({ uri: url, multipleStatements: true, connectionLimit: 20, ...options });
  let pool: mysql.Pool;

  beforeAll(async () => {
    const admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`CREATE DATABASE \`${database}\``);
    await admin.end();
    pool = newPool();
  });
  afterAll(async () => {
    await pool?.end();
    const admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
  });

  /** A fresh table per store, made by the store's own `migrate()`; `drop()` removes it. */
  const isolated = async (
    on: MysqlPool<mysql.PoolConnection> = pool,
    options: { preparedStatements?: boolean } = {},
  ) => {
    const table = `idem_${hex()}`;
    const store = mysqlStore<mysql.PoolConnection>({ pool: on, table, ...options });
    await store.migrate();
    const drop = async () => {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
    };
    return { table, store, drop };
  };

  /** The store as the suite sees it, with `close()` also dropping its table. */
  const dropping = <Tx>(store: IdempotencyStore<Tx>, drop: () => Promise<void>): IdempotencyStore<Tx> => ({
    name: store.name,
    get roundTrips() {
      return store.roundTrips;
    },
    ...(store.maxResponseBytes === undefined ? {} : { maxResponseBytes: store.maxResponseBytes }),
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
    name: 'mysql',
    // A claim runs again when InnoDB picks it as a deadlock's victim (see the comment on `claim`).
    contendedClaimExtraTrips: 1,
    create: async () => {
      const { store, drop } = await isolated();
      return dropping(store, drop);
    },
  });

  describe('under READ COMMITTED (the server default here is REPEATABLE READ)', () => {
    let committed: mysql.Pool;
    beforeAll(async () => {
      committed = newPool({ connectionLimit: 5 });
      committed.pool.on('connection', (connection) => {
        connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
      });
      // tx_isolation on MariaDB, transaction_isolation on MySQL 8.
      const [rows] = await committed.query<mysql.RowDataPacket[]>(
        `SHOW SESSION VARIABLES WHERE Variable_name IN ('tx_isolation', 'transaction_isolation')`,
      );
      expect(new Set(rows.map((row) => String(row.Value)))).toEqual(new Set(['READ-COMMITTED']));
    });
    afterAll(async () => {
      await committed?.end();
    });
    describeStoreConformance({
      name: 'mysql (READ COMMITTED)',
      contendedClaimExtraTrips: 1,
      create: async () => {
        const { store, drop } = await isolated(committed);
        return dropping(store, drop);
      },
    });
  });

  describe.runIf(mariadb)('with MariaDB’s SIMULTANEOUS_ASSIGNMENT (every assignment sees the old row)', () => {
    // Sessions of this pool evaluate ON DUPLICATE KEY UPDATE assignments all against the old row, not left to
    // right: the claim must decide the same way. The mode exists on MariaDB only.
    let simultaneous: mysql.Pool;
    beforeAll(async () => {
      simultaneous = newPool({ connectionLimit: 5 });
      simultaneous.pool.on('connection', (connection) => {
        connection.query(`SET SESSION sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')`);
      });
      const [rows] = await simultaneous.query<mysql.RowDataPacket[]>('SELECT @@SESSION.sql_mode AS mode');
      expect(String(rows[0]?.mode)).toContain('SIMULTANEOUS_ASSIGNMENT');
    });
    afterAll(async () => {
      await simultaneous?.end();
    });
    describeStoreConformance({
      name: 'mysql (SIMULTANEOUS_ASSIGNMENT)',
      contendedClaimExtraTrips: 1,
      create: async () => {
        const { store, drop } = await isolated(simultaneous);
        return dropping(store, drop);
      },
    });
  });

  const scope = 'acct_my';
  const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => {
    const key = overrides.key ?? randomUUID();
    return {
      pk: recordPk(overrides.scope ?? scope, key),
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
  /** Writes a row as another process would, on `connection` (inside its own open transaction). */
  const insertRow = (connection: mysql.PoolConnection, table: string, req: ClaimRequest) =>
    connection.query(
      `INSERT INTO \`${table}\` (pk, scope, \`key\`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at)
       VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?, ?, ?)`,
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
  /**
   * Polls until a claim on `table` is executing its upsert (state `Update`) while our transaction holds the row:
   * from there it can only wait for our lock. (MariaDB's INNODB_TRX does not always show such a wait as
   * `LOCK WAIT`; the process list always shows the statement.)
   */
  const blockedOn = async (table: string) => {
    for (let i = 0; i < 1_000; i++) {
      const [rows] = await pool.query<mysql.RowDataPacket[]>(
        `SELECT count(*) AS n FROM information_schema.PROCESSLIST WHERE command = 'Query' AND state = 'Update' AND info LIKE ?`,
        [`INSERT INTO \`${table}\`%`],
      );
      if (Number(rows[0]?.n) === 1) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`no claim ever waited on a lock in ${table}`);
  };
  const rowOf = async (table: string, pk: string) => {
    const [rows] = await pool.query<mysql.RowDataPacket[]>(`SELECT * FROM \`${table}\` WHERE pk = ?`, [pk]);
    return rows[0];
  };

  describe('the claim decides on the latest committed row, under its lock', () => {
    it('a claim that waited on a concurrent insert returns the winner, in 1 trip', async () => {
      const { table, store, drop } = await isolated();
      const blocker = await pool.getConnection();
      try {
        const winner = request();
        await blocker.query('START TRANSACTION');
        await insertRow(blocker, table, winner);
        const measure = trips(store);
        const pending = store.claim({ ...winner, token: randomUUID(), id: randomUUID() });
        await blockedOn(table);
        await blocker.query('COMMIT');
        const result = await pending;
        expect([result.kind, result.record.token, result.record.id]).toEqual(['existing', winner.token, winner.id]);
        expect(measure()).toBe(1);
      } finally {
        await blocker.query('ROLLBACK'); // a no-op after COMMIT; frees the row if the test failed half-way
        blocker.release();
        await drop();
      }
    });

    it('a claim that waited on a concurrent insert that rolled back claims, in 1 trip', async () => {
      const { table, store, drop } = await isolated();
      const blocker = await pool.getConnection();
      try {
        const loser = request();
        await blocker.query('START TRANSACTION');
        await insertRow(blocker, table, loser);
        const measure = trips(store);
        const mine = { ...loser, token: randomUUID(), id: randomUUID() };
        const pending = store.claim(mine);
        await blockedOn(table);
        await blocker.query('ROLLBACK');
        const result = await pending;
        expect([result.kind, result.record.token, result.record.id]).toEqual(['claimed', mine.token, mine.id]);
        expect(measure()).toBe(1);
      } finally {
        await blocker.query('ROLLBACK'); // a no-op after COMMIT; frees the row if the test failed half-way
        blocker.release();
        await drop();
      }
    });

    it.each([
      { name: 'a dead lease', finish: null, now: T0 + LEASE },
      {
        name: 'a retryable failure',
        finish: { status: 'failed' as const, retryable: true, resultId: null, response: null },
        now: T0 + 2,
      },
      { name: 'an expired record', finish: succeeded, now: T0 + TTL },
    ])(
      'a claim that waited on a concurrent takeover of $name sees the live claim, not the version it queued behind',
      async ({ finish, now }) => {
        const { table, store, drop } = await isolated();
        const blocker = await pool.getConnection();
        try {
          const first = request();
          await store.claim(first);
          if (finish) await store.complete({ pk: first.pk, token: first.token, now: T0 + 1, outcome: finish });
          // Another process takes the record over; its transaction is still open.
          const otherToken = randomUUID();
          await blocker.query('START TRANSACTION');
          await blocker.query(
            `UPDATE \`${table}\` SET status = 'in_progress', token = ?, lease_expires_at = ?, expires_at = ? WHERE pk = ?`,
            [otherToken, now + LEASE, now + TTL, first.pk],
          );
          const measure = trips(store);
          const pending = store.claim({ ...first, token: randomUUID(), id: randomUUID(), now });
          await blockedOn(table);
          await blocker.query('COMMIT');
          const result = await pending;
          expect([result.kind, result.record.status, result.record.token]).toEqual([
            'existing',
            'in_progress',
            otherToken,
          ]);
          expect(measure()).toBe(1);
          expect((await store.get(first.pk))?.token).toBe(otherToken);
        } finally {
          await blocker.query('ROLLBACK'); // a no-op after COMMIT; frees the row if the test failed half-way
          blocker.release();
          await drop();
        }
      },
    );

    /**
     * The pool sends the claim's two statements as two queries, with `between` run on another connection in the
     * gap: what the one-query claim allows whenever another connection commits between its INSERT and its SELECT.
     */
    const splitting = (between: () => Promise<void>): MysqlPool<mysql.PoolConnection> => {
      let pending: (() => Promise<void>) | undefined = between;
      return {
        query: async (sql: string, values?: unknown[]) => {
          const at = sql.indexOf(';\nSELECT');
          if (at < 0 || pending === undefined || values === undefined) return pool.query(sql, values);
          const run = pending;
          pending = undefined;
          const [upsert] = await pool.query(sql.slice(0, at), values.slice(0, -1));
          await run();
          const [rows] = await pool.query(sql.slice(at + 2), values.slice(-1));
          return [[upsert, rows], undefined];
        },
        execute: (sql: string, values?: unknown[]) => pool.execute(sql, values as never),
        getConnection: () => pool.getConnection(),
      } as unknown as MysqlPool<mysql.PoolConnection>;
    };

    it('a refused claim whose record was released before its SELECT runs again, and claims: 2 trips', async () => {
      const { table, store, drop } = await isolated();
      try {
        const holder = request();
        await store.claim(holder);
        const split = mysqlStore({
          pool: splitting(async () => void (await store.release({ pk: holder.pk, token: holder.token }))),
          table,
        });
        const mine = { ...holder, token: randomUUID(), id: randomUUID(), now: T0 + 1 };
        const result = await split.claim(mine);
        expect([result.kind, result.record.token, result.record.id]).toEqual(['claimed', mine.token, mine.id]);
        expect(split.roundTrips).toBe(2);
      } finally {
        await drop();
      }
    });

    it('a refused claim whose record completed before its SELECT replays the completion: 1 trip', async () => {
      const { table, store, drop } = await isolated();
      try {
        const holder = request();
        await store.claim(holder);
        const split = mysqlStore({
          pool: splitting(
            async () =>
              void (await store.complete({ pk: holder.pk, token: holder.token, now: T0 + 1, outcome: succeeded })),
          ),
          table,
        });
        const result = await split.claim({ ...holder, token: randomUUID(), now: T0 + 1 });
        expect([result.kind, result.record.status, result.record.token, result.record.resultId]).toEqual([
          'existing',
          'succeeded',
          holder.token,
          'ch_1',
        ]);
        expect(split.roundTrips).toBe(1);
      } finally {
        await drop();
      }
    });

    it('a claim picked as a deadlock victim runs again: 2 trips', async () => {
      const { table, drop } = await isolated();
      let failures = 0;
      const deadlocking = {
        query: (sql: string, values?: unknown[]) => {
          if (sql.includes('ON DUPLICATE KEY UPDATE') && failures++ === 0) {
            return Promise.reject(
              Object.assign(new Error('Deadlock found when trying to get lock'), {
                errno: 1213,
                code: 'ER_LOCK_DEADLOCK',
              }),
            );
          }
          return pool.query(sql, values);
        },
        getConnection: () => pool.getConnection(),
      } as unknown as MysqlPool<mysql.PoolConnection>;
      try {
        const store = mysqlStore({ pool: deadlocking, table, preparedStatements: false });
        const req = request();
        const result = await store.claim(req);
        expect([result.kind, result.record.token, store.roundTrips, failures]).toEqual(['claimed', req.token, 2, 2]);
      } finally {
        await drop();
      }
    });

    it('200 concurrent claims of one key from 3 pools (3 processes): exactly one claims', async () => {
      const { table, drop } = await isolated();
      const pools = Array.from({ length: 3 }, () => newPool({ connectionLimit: 10 }));
      try {
        const deadlocks: unknown[] = [];
        const stores = pools.map((p) =>
          mysqlStore<mysql.PoolConnection>({
            pool: p,
            table,
            onRoundTrip: (trip) => void (trip.error && deadlocks.push(trip.error)),
          }),
        );
        const base = request();
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) =>
            (stores[i % 3] as MysqlStore<mysql.PoolConnection>).claim({
              ...base,
              token: randomUUID(),
              id: randomUUID(),
            }),
          ),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners.length).toBe(1);
        const token = winners[0]?.record.token;
        expect(results.filter((r) => r.record.token === token).length).toBe(200);
        expect((await mysqlStore({ pool, table }).get(base.pk))?.token).toBe(token);
        const total = stores.reduce((sum, s) => sum + s.roundTrips, 0);
        console.log(
          `mysql: 200 contended claims took ${total} round trips; ${deadlocks.length} deadlock victims ran again`,
        );
        expect(deadlocks.every((error) => (error as { errno?: number }).errno === 1213)).toBe(true);
        expect(total).toBe(200 + deadlocks.length);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await drop();
      }
    });
  });

  describe('refusals change nothing', () => {
    it('a replay, a mismatch and a live lease leave the row byte for byte as it was', async () => {
      const { table, store, drop } = await isolated();
      try {
        const done = request();
        await store.claim(done);
        await store.complete({ pk: done.pk, token: done.token, now: T0 + 1, outcome: succeeded });
        const live = request();
        await store.claim(live);
        const before = [await rowOf(table, done.pk), await rowOf(table, live.pk)];
        const again = { token: randomUUID(), id: randomUUID(), now: T0 + 2 };
        const replay = await store.claim({ ...done, ...again });
        const mismatch = await store.claim({ ...done, ...again, fingerprint: 'e'.repeat(64) });
        const busy = await store.claim({ ...live, ...again });
        expect([
          replay.kind,
          replay.record.status,
          mismatch.kind,
          mismatch.record.token,
          busy.kind,
          busy.record.token,
        ]).toEqual(['existing', 'succeeded', 'existing', done.token, 'existing', live.token]);
        expect([await rowOf(table, done.pk), await rowOf(table, live.pk)]).toEqual(before);
      } finally {
        await drop();
      }
    });
  });

  describe('keys are bytes', () => {
    it('keys differing only in case, in trailing spaces or beyond ASCII are different records', async () => {
      const { store, drop } = await isolated();
      try {
        const keys = ['k', 'K', 'k ', 'ké', 'ke\u0301', 'k\u{1F4B3}'];
        for (const key of keys) expect((await store.claim(request({ key }))).kind).toBe('claimed');
        const records = await store.list({ scope, limit: 10 });
        expect(records.map((r) => r.key).sort()).toEqual([...keys].sort());
        for (const key of keys) expect((await store.get(recordPk(scope, key)))?.key).toBe(key);
      } finally {
        await drop();
      }
    });

    it('a value longer than its column is refused before it is sent, never truncated', async () => {
      const { store, drop } = await isolated();
      try {
        const measure = trips(store);
        const key = 'k'.repeat(1100);
        await expect(store.claim(request({ key }))).rejects.toThrow(
          `mysql store: pk is ${Buffer.byteLength(recordPk(scope, key))} bytes, longer than its column (1024 bytes)`,
        );
        const req = request();
        await store.claim(req);
        await expect(
          store.complete({
            pk: req.pk,
            token: req.token,
            now: T0 + 1,
            outcome: { ...succeeded, resultId: 'r'.repeat(1025) },
          }),
        ).rejects.toThrow('mysql store: resultId is 1025 bytes, longer than its column (1024 bytes)');
        expect(measure()).toBe(1);
      } finally {
        await drop();
      }
    });
  });

  describe('transactional completion', () => {
    const withLedger = async () => {
      const isolatedStore = await isolated();
      const ledger = `\`${isolatedStore.table}_ledger\``;
      await pool.query(
        `CREATE TABLE ${ledger} (record_id VARCHAR(64) PRIMARY KEY, amount INT NOT NULL) ENGINE = InnoDB`,
      );
      const charges = async () =>
        (await pool.query<mysql.RowDataPacket[]>(`SELECT record_id, amount FROM ${ledger}`))[0];
      const drop = async () => {
        await pool.query(`DROP TABLE IF EXISTS ${ledger}`);
        await isolatedStore.drop();
      };
      return { ...isolatedStore, ledger, charges, drop };
    };
    /** Connections the pool has open, and those of them idle: equal when every connection went back. */
    const poolCounts = (p: mysql.Pool) => {
      const core = p.pool as unknown as { _allConnections: { length: number }; _freeConnections: { length: number } };
      return [core._allConnections.length, core._freeConnections.length];
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
          effects: (tx) => tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [record.id]),
        });
        expect(result).toEqual({ ok: true });
        expect(measure()).toBe(3); // START TRANSACTION, UPDATE, COMMIT (the effects' INSERT is the work's, not counted)
        expect(await charges()).toEqual([{ record_id: req.id, amount: 500 }]);
        expect((await store.get(req.pk))?.status).toBe('succeeded');
        const [open, idle] = poolCounts(pool);
        expect(idle).toBe(open); // the connection went back to the pool
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
            await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [req.id]);
          },
        });
        expect([result, ran, measure()]).toEqual([{ ok: false }, 1, 3]); // START TRANSACTION, UPDATE (0 rows), ROLLBACK
        expect(await charges()).toEqual([]);
        const after = await store.get(req.pk);
        expect([after?.status, after?.token]).toEqual(['in_progress', takeover.token]);
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
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [req.id]);
              throw boom;
            },
          }),
        ).rejects.toBe(boom);
        expect(measure()).toBe(2); // START TRANSACTION, ROLLBACK
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
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [req.id]);
              await tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [req.id]);
            },
          }),
        ).rejects.toMatchObject({ code: 'ER_DUP_ENTRY', errno: 1062 });
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
          effects: (tx: mysql.PoolConnection) =>
            tx.query(`INSERT INTO ${ledger} (record_id, amount) VALUES (?, 500)`, [id]),
        });
        const first = await engine.run(run, work);
        const again = await engine.run(run, work);
        expect([first.replayed, again.replayed]).toEqual([false, true]);
        expect([...again.response.body]).toEqual([...first.response.body]);
        expect((await charges()).length).toBe(1);
      } finally {
        await drop();
      }
    });
  });

  describe('sweep and list', () => {
    const expire = async (table: string, count: number, at = T0, scope = 'old') => {
      const tag = randomUUID();
      const rows = Array.from({ length: count }, (_, g) => [
        `IDEMPOTENCY#${scope}#${g}-${tag}`,
        scope,
        `${g}-${tag}`,
        'succeeded',
        'f',
        'id',
        't',
        at,
        at,
        at,
      ]);
      await pool.query(
        `INSERT INTO \`${table}\` (pk, scope, \`key\`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at) VALUES ?`,
        [rows],
      );
    };
    const count = async (table: string) =>
      Number((await pool.query<mysql.RowDataPacket[]>(`SELECT count(*) AS n FROM \`${table}\``))[0][0]?.n);

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
        await expect(store.sweep({ now: T0, batchSize: 0 })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
      } finally {
        await drop();
      }
    });

    it('list reads the (scope, claimed_at) index and sweep the expires_at index, in their order', async () => {
      const { table, store, drop } = await isolated();
      try {
        await expire(table, 50);
        await expire(table, 2_000, T0 + 100 * TTL, 'live');
        await pool.query(`ANALYZE TABLE \`${table}\``);
        const explain = async (sql: string, values: unknown[]) => {
          const [rows] = await pool.query<mysql.RowDataPacket[]>(`EXPLAIN ${sql}`, values);
          return rows.map((r) => [String(r.key), String(r.Extra ?? '').includes('filesort')]);
        };
        expect(
          await explain(`SELECT pk FROM \`${table}\` WHERE scope = ? ORDER BY claimed_at DESC, pk DESC LIMIT 10`, [
            Buffer.from('old'),
          ]),
        ).toEqual([[`${table}_scope_claimed_at_idx`, false]]);
        expect(
          await explain(`DELETE FROM \`${table}\` WHERE expires_at <= ? ORDER BY expires_at LIMIT 500`, [T0]),
        ).toEqual([[`${table}_expires_at_idx`, false]]);
        // And the statements the store sends are those.
        const seen: string[] = [];
        const observed = mysqlStore({
          pool,
          table,
          onRoundTrip: (trip) => void seen.push((trip.request as { sql: string }).sql),
        });
        await observed.list({ scope: 'old', limit: 10 });
        await observed.sweep({ now: T0 - 1 });
        expect(seen).toEqual([
          `SELECT pk, scope, \`key\`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, result_id, response_status, response_headers, response_body FROM \`${table}\` WHERE scope = ? ORDER BY claimed_at DESC, pk DESC LIMIT ?`,
          `DELETE FROM \`${table}\` WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`,
        ]);
        expect(await store.list({ scope: 'old', limit: 3 })).toHaveLength(3);
      } finally {
        await drop();
      }
    });
  });

  describe('migrate and options', () => {
    it('runs concurrently from several stores, and again, without failing', async () => {
      const table = `idem_${hex()}`;
      const pools = Array.from({ length: 2 }, () => newPool({ connectionLimit: 2 }));
      try {
        const stores = [...pools, ...pools].map((p) => mysqlStore<mysql.PoolConnection>({ pool: p, table }));
        await Promise.all(stores.map((s) => s.migrate()));
        await (stores[0] as MysqlStore<mysql.PoolConnection>).migrate();
        const [rows] = await pool.query<mysql.RowDataPacket[]>(
          `SELECT DISTINCT index_name AS name FROM information_schema.STATISTICS WHERE table_schema = ? AND table_name = ? ORDER BY index_name`,
          [database, table],
        );
        expect(rows.map((r) => String(r.name)).sort()).toEqual([
          'PRIMARY',
          `${table}_expires_at_idx`,
          `${table}_scope_claimed_at_idx`,
        ]);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      }
    });

    it('schema.sql holds the same DDL as migrate() for the default table', async () => {
      const file = await readFile(new URL('./schema.sql', import.meta.url), 'utf8');
      const ddl = file
        .split('\n')
        .filter((line) => !line.startsWith('--'))
        .join('\n')
        .trim();
      expect(ddl).toBe(mysqlSchemaSql().trim());
      expect(mysqlSchemaSql({ table: 'keys' }).split('\n')[0]).toBe('CREATE TABLE IF NOT EXISTS `keys` (');
    });

    it('refuses a maxResponseBytes the server’s max_allowed_packet cannot carry, naming both', async () => {
      const [rows] = await pool.query<mysql.RowDataPacket[]>('SELECT @@max_allowed_packet AS p');
      const packet = Number(rows[0]?.p);
      const table = `idem_${hex()}`;
      try {
        const fits = Math.floor((packet - 1024 * 1024) / 2);
        await mysqlStore({ pool, table, maxResponseBytes: fits }).migrate();
        await expect(mysqlStore({ pool, table, maxResponseBytes: fits + 1 }).migrate()).rejects.toThrow(
          `Expected \`maxResponseBytes\` to be at most (max_allowed_packet − 1 MiB) / 2 = ${fits} bytes on this server ` +
            `(max_allowed_packet is ${packet}; raise it to ${2 * (fits + 1) + 1024 * 1024} or more, or lower maxResponseBytes), got ${fits + 1}.`,
        );
        expect(mysqlStore({ pool }).maxResponseBytes).toBe(4 * 1024 * 1024);
      } finally {
        await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      }
    });

    it('validates options, naming the one that is wrong', async () => {
      expect(() => mysqlStore({ pool, table: 'records; DROP TABLE x' })).toThrow(
        'Expected `table` to be an identifier of letters, digits and _ (not starting with a digit, at most 40 characters), got "records; DROP TABLE x".',
      );
      expect(() => mysqlStore({ pool: {} as never })).toThrow(/^Expected `pool` to be a mysql2\/promise Pool/);
      expect(() => mysqlStore({ pool, maxResponseBytes: 0 })).toThrow(
        'Expected `maxResponseBytes` to be a positive integer, got 0.',
      );
      expect(() => mysqlStore({ pool, onRoundTrip: 'log' as never })).toThrow(
        'Expected `onRoundTrip` to be a function, got "log".',
      );
      const single = mysql.createPool({ uri: url, connectionLimit: 1 });
      try {
        expect(() => mysqlStore({ pool: single })).toThrow(
          'Expected `pool` to be a pool created with multipleStatements: true (a claim is one round trip of two statements).',
        );
      } finally {
        await single.end();
      }
      const noExecute = {
        query: pool.query.bind(pool),
        getConnection: pool.getConnection.bind(pool),
      } as unknown as MysqlPool;
      expect(() => mysqlStore({ pool: noExecute })).toThrow(/^Expected `pool` to be a pool with execute\(\)/);
      expect(mysqlStore({ pool: noExecute, preparedStatements: false }).name).toBe('mysql');
    });

    it('sends complete, renew, release and get as prepared statements, parsed once per connection', async () => {
      const { table, drop } = await isolated();
      const one = newPool({ connectionLimit: 1 });
      const prepares = async () =>
        Number((await one.query<mysql.RowDataPacket[]>(`SHOW SESSION STATUS LIKE 'Com_stmt_prepare'`))[0][0]?.Value);
      try {
        const start = await prepares();
        const plain = mysqlStore({ pool: one, table, preparedStatements: false });
        const p = request();
        await plain.claim(p);
        await plain.renew({ pk: p.pk, token: p.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
        await plain.complete({ pk: p.pk, token: p.token, now: T0 + 2, outcome: succeeded });
        await plain.get(p.pk);
        expect(await prepares()).toBe(start);
        const store = mysqlStore({ pool: one, table });
        for (let i = 0; i < 3; i++) {
          const r = request();
          await store.claim(r);
          await store.renew({ pk: r.pk, token: r.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
          await store.complete({ pk: r.pk, token: r.token, now: T0 + 2, outcome: succeeded });
          await store.release({ pk: r.pk, token: r.token });
          await store.get(r.pk);
        }
        expect((await store.get(p.pk))?.response?.body).toEqual(new Uint8Array([0x7b, 0x7d]));
        expect(await prepares()).toBe(start + 4); // renew, complete, release, get: once each on the one connection
      } finally {
        await one.end();
        await drop();
      }
    });

    it('close() leaves the pool open unless endPoolOnClose is set', async () => {
      const own = newPool({ connectionLimit: 1 });
      const store = mysqlStore({ pool: own });
      await store.close();
      await expect(store.get('IDEMPOTENCY#x#y')).rejects.toThrow('mysql store is closed');
      expect((await own.query<mysql.RowDataPacket[]>('SELECT 1 AS one'))[0]).toEqual([{ one: 1 }]);
      await mysqlStore({ pool: own, endPoolOnClose: true }).close();
      await expect(own.query('SELECT 1')).rejects.toThrow('Pool is closed.');
    });
  });

  describe('onRoundTrip', () => {
    it('a claim is one trip: the upsert’s header and the row, in one response; then each op reports once', async () => {
      const { table, drop } = await isolated();
      const seen: RoundTrip[] = [];
      try {
        const store = mysqlStore<mysql.PoolConnection>({ pool, table, onRoundTrip: (trip) => void seen.push(trip) });
        const req = request();
        await store.claim(req);
        const [claim] = seen;
        const [header, rows] = claim?.response as [{ affectedRows: number }, Array<Record<string, unknown>>];
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

      const { table, drop } = await isolated();
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

async function serverVersion(): Promise<string> {
  const connection = await mysql.createConnection({ uri: MYSQL_URL });
  try {
    const [rows] = await connection.query<mysql.RowDataPacket[]>('SELECT VERSION() AS v');
    return String(rows[0]?.v);
  } finally {
    await connection.end();
  }
}
