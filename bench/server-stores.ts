/**
 * @module The bench server's stores (bench/server.ts, `BENCH_STORE`): each opened with the floor's raw operations on
 * the same backend, and for the SQL stores the database-local routes — Idem's (`/pay-local`) and the raw
 * transaction it replaces (`/floor/tx`: BEGIN, the key's INSERT, the business row's INSERT, COMMIT).
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type Request } from 'express';
import type { PoolClient } from 'pg';
import type { ClaimRequest, IdempotencyStore } from 'idem';
import { idempotency, idempotencyContext } from 'idem/express';
import type { NodeRedisClient, RedisClient } from 'idem/stores/redis';

/** Same TTL and in-progress lease for Idem and every peer. */
export const TTL_MS = 3_600_000;
export const LEASE_MS = 10_000;

/** What a store's bench routes need from the server: its settings, its cleanups, the handler's work. */
export interface StoreEnv {
  store: string;
  run: string;
  pgUrl: string;
  redisUrl: string;
  /** Run in order at `/__close`. */
  cleanups: Array<() => Promise<unknown>>;
  /** Set by the stores that have them: the scale runs' seeding, settling, counting and sweeping. */
  hooks: StoreHooks;
  executions: Map<string, number>;
  keyOf(req: Request): string;
  work(key: string): Promise<{ id: string; amount: number }>;
}

export interface StoreHooks {
  sweep?: (now: number) => Promise<number>;
  seed?: (count: number, expired: boolean) => Promise<number>;
  countRecords?: () => Promise<number>;
  /** After a bulk seed: the maintenance it triggers (vacuum, checkpoint) done now, not during a measurement. */
  settle?: () => Promise<number>;
}

export interface Opened {
  store: IdempotencyStore<never>;
  /** The floor's raw ops on the same backend: conditional write of a new key, then terminal update, and a point read. */
  claim(key: string): Promise<unknown>;
  update(key: string): Promise<unknown>;
  read(key: string): Promise<unknown>;
  /**
   * SQL stores: the route's handlers for database-local work (`/pay-local`) — the claim, a ledger row written by
   * the handler and the record in one transaction. PostgreSQL: Idem's `local: true` route option; SQLite, whose
   * local work must be synchronous: `runLocal` called inside the handler, with the work inlined.
   */
  local?: express.RequestHandler[];
  /**
   * SQL stores: the raw transaction a local route replaces (`/floor/tx`), with no layer: BEGIN, the key's
   * conditional INSERT into the floor's table, the handler's ledger INSERT, COMMIT (a taken key rolls back, 409).
   */
  rawTx?: express.RequestHandler[];
}

export async function openStore(env: StoreEnv): Promise<Opened> {
  const { hooks } = env;
  if (env.store === 'memory') {
    const { memoryStore } = await import('idem/stores/memory');
    const map = new Map<string, string>();
    return {
      store: memoryStore(),
      claim: async (key) => (map.has(key) ? false : (map.set(key, 'in_progress'), true)),
      update: async (key) => map.set(key, 'done'),
      read: async (key) => map.get(key),
    };
  }
  if (env.store === 'null') {
    // Claims every key at once and accepts every write, keeping nothing: Idem's own CPU without a store client's.
    let trips = 0;
    const ok = async () => (trips++, { ok: true });
    const store = {
      name: 'null',
      get roundTrips() {
        return trips;
      },
      async claim(r: ClaimRequest) {
        trips++;
        const lease = { claimedAt: r.now, leaseExpiresAt: r.now + r.leaseMs, expiresAt: r.now + r.ttlMs };
        const record = {
          pk: r.pk,
          scope: r.scope,
          key: r.key,
          fingerprint: r.fingerprint,
          id: r.id,
          token: r.token,
          ...lease,
        };
        return {
          kind: 'claimed',
          record: { ...record, status: 'in_progress', retryable: false, resultId: null, response: null },
        };
      },
      complete: ok,
      renew: ok,
      release: ok,
      get: async () => (trips++, null),
      sweep: async () => 0,
      list: async () => [],
      close: async () => {},
    };
    return {
      store: store as unknown as IdempotencyStore<never>,
      claim: async () => true,
      update: async () => true,
      read: async () => undefined,
    };
  }
  if (env.store === 'sqlite') {
    const { default: Database } = await import('better-sqlite3');
    const { sqliteStore } = await import('idem/stores/sqlite');
    const file = join(tmpdir(), `idem-bench-${env.run}-${process.pid}.db`);
    const database = new Database(file);
    env.cleanups.push(async () => {
      database.close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true });
    });
    const store = sqliteStore({ database });
    await store.migrate();
    database.exec(
      'CREATE TABLE IF NOT EXISTS floor (k TEXT PRIMARY KEY, v TEXT NOT NULL, expires_at INTEGER NOT NULL)',
    );
    const insert = database.prepare('INSERT OR IGNORE INTO floor (k, v, expires_at) VALUES (?, ?, ?)');
    const update = database.prepare("UPDATE floor SET v = 'done' WHERE k = ? AND v = 'in_progress'");
    const select = database.prepare('SELECT v FROM floor WHERE k = ?');
    hooks.sweep = (now) => store.sweep({ now });
    hooks.countRecords = async () =>
      Number((database.prepare('SELECT count(*) AS n FROM idem_records').get() as { n: number }).n);
    hooks.settle = async () => {
      const started = performance.now();
      database.pragma('wal_checkpoint(TRUNCATE)');
      database.exec('ANALYZE idem_records');
      return Math.round(performance.now() - started);
    };
    hooks.seed = async (count, expired) => {
      const base = expired ? Date.now() - TTL_MS * 2 : Date.now();
      // One statement: a recursive CTE generates the rows inside SQLite.
      database
        .prepare(
          `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
           INSERT INTO idem_records (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at,
             expires_at, retryable, result_id, response_status, response_headers, response_body)
           SELECT 'IDEMPOTENCY#seed#' || ? || '-' || i, 'seed', ? || '-' || i, 'succeeded', 'f', 'id' || i, 't', ?, ?, ?, 0,
             NULL, 201, '[["content-type","application/json"]]', X'7B7D' FROM n`,
        )
        .run(
          count,
          `${expired ? 'x' : 'l'}${Date.now()}`,
          `${expired ? 'x' : 'l'}${Date.now()}`,
          base,
          base,
          base + TTL_MS,
        );
      return count;
    };
    database.exec('CREATE TABLE IF NOT EXISTS ledger (ref TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
    const ledger = database.prepare('INSERT INTO ledger (ref, amount) VALUES (?, ?)');
    const { createEngine, fingerprint, parseKey, runLocal } = await import('idem');
    const { problemFor } = await import('idem/http');
    const engine = createEngine({ store, ttlMs: TTL_MS, leaseMs: LEASE_MS });
    const local: express.RequestHandler = (req, res) => {
      const bytes = req.body as Buffer;
      const key = env.keyOf(req);
      const print = fingerprint({
        method: req.method,
        path: req.path,
        query: '',
        contentType: req.get('content-type') ?? null,
        body: bytes,
        headers: [],
      });
      const send = ({
        status,
        headers,
        body,
      }: {
        status: number;
        headers: ReadonlyArray<readonly [string, string]>;
        body: Uint8Array;
      }) => {
        res.status(status);
        for (const [name, value] of headers) res.setHeader(name, value);
        res.end(body);
      };
      runLocal(engine, { scope: 'single-tenant', key: parseKey(key), fingerprint: print }, (db, { id }) => {
        const { amount } = JSON.parse(bytes.toString('utf8')) as { amount: number };
        env.executions.set(key, (env.executions.get(key) ?? 0) + 1);
        ledger.run(id, amount);
        const charge = { id: `ch_${id.slice(0, 12)}`, amount };
        return {
          response: {
            status: 201,
            headers: [
              ['content-type', 'application/json; charset=utf-8'],
              ['location', `/v1/charges/${charge.id}`],
            ],
            body: Buffer.from(JSON.stringify(charge)),
          },
          resultId: charge.id,
        };
      }).then(
        ({ response }) => send(response),
        async (error: unknown) => {
          const problem = problemFor(error as never);
          send({
            status: problem.status,
            headers: [...problem.headers],
            body: new Uint8Array(await problem.arrayBuffer()),
          });
        },
      );
    };
    // The raw transaction, as `runLocal` runs it on SQLite: one `BEGIN IMMEDIATE`, the work inside it.
    const rawTx = database.transaction((key: string, amount: number) => {
      if (insert.run(key, 'in_progress', Date.now() + TTL_MS).changes === 0) return undefined;
      env.executions.set(key, (env.executions.get(key) ?? 0) + 1);
      const charge = { id: `ch_${randomUUID().slice(0, 12)}`, amount };
      ledger.run(charge.id, amount);
      return charge;
    });
    return {
      store: store as unknown as IdempotencyStore<never>,
      local: [express.raw({ type: '*/*' }), local],
      rawTx: [
        express.json(),
        (req, res) => {
          const charge = rawTx.immediate(env.keyOf(req), (req.body as { amount: number }).amount);
          if (charge) res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
          else res.status(409).json({ error: 'the key is taken' });
        },
      ],
      claim: async (key) => insert.run(key, 'in_progress', Date.now() + TTL_MS).changes,
      update: async (key) => update.run(key).changes,
      read: async (key) => select.get(key),
    };
  }
  if (env.store === 'postgres') {
    const { default: pg } = await import('pg');
    const { postgresStore } = await import('idem/stores/postgres');
    const schema = `bench_${env.run}_${process.pid}`;
    const pool = new pg.Pool({ connectionString: env.pgUrl, max: 10 });
    const store = postgresStore({ pool, schema });
    await store.migrate();
    const floor = `"${schema}".floor`;
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${floor} (k text PRIMARY KEY, v text NOT NULL, expires_at bigint NOT NULL)`,
    );
    // The local route's own pool, pipelined: BEGIN travels with the claim, the UPDATE with COMMIT (docs/STORES.md).
    const pipelined = new pg.Pool({ connectionString: env.pgUrl, max: 10, pipeline: true });
    const localStore = postgresStore({ pool: pipelined, schema });
    env.cleanups.push(() => pipelined.end());
    const insertLedger = `INSERT INTO "${schema}".ledger (ref, amount) VALUES ($1, $2)`;
    await pool.query(`CREATE TABLE IF NOT EXISTS "${schema}".ledger (ref text PRIMARY KEY, amount integer NOT NULL)`);
    env.cleanups.push(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    });
    hooks.sweep = (now) => store.sweep({ now });
    hooks.settle = async () => {
      const started = performance.now();
      await pool.query(`VACUUM (ANALYZE) "${schema}".idempotency_records`);
      await pool.query('CHECKPOINT');
      return Math.round(performance.now() - started);
    };
    hooks.countRecords = async () => {
      const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".idempotency_records`);
      return Number(rows[0]?.n);
    };
    hooks.seed = async (count, expired) => {
      const base = expired ? Date.now() - TTL_MS * 2 : Date.now();
      const tag = `${expired ? 'x' : 'l'}${Date.now()}`;
      await pool.query(
        `INSERT INTO "${schema}".idempotency_records (pk, scope, key, status, fingerprint, id, token, claimed_at,
           lease_expires_at, expires_at, retryable, result_id, response_status, response_headers, response_body)
         SELECT 'IDEMPOTENCY#seed#' || $2 || '-' || i, 'seed', $2 || '-' || i, 'succeeded', 'f', 'id' || i, 't', $3, $3, $4,
           false, NULL, 201, '[["content-type","application/json"]]'::jsonb, '\\x7b7d'::bytea
         FROM generate_series(1, $1::int) AS i`,
        [count, tag, base, base + TTL_MS],
      );
      await pool.query(`ANALYZE "${schema}".idempotency_records`);
      return count;
    };
    const local: express.RequestHandler = async (req, res) => {
      const context = idempotencyContext<PoolClient>(res);
      const charge = await env.work(env.keyOf(req));
      await context?.tx?.query({ name: 'bench_ledger', text: insertLedger, values: [charge.id, charge.amount] });
      res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
    };
    // The raw transaction on the local route's own pool (pipelined, so BEGIN goes out with the key's INSERT, as
    // the store sends BEGIN with its claim): BEGIN + INSERT, the ledger INSERT, COMMIT — three round trips, as many
    // as the local route's (whose last one carries the record's UPDATE with the COMMIT).
    const insertKey = `INSERT INTO ${floor} (k, v, expires_at) VALUES ($1, 'in_progress', $2) ON CONFLICT DO NOTHING`;
    const rawTx: express.RequestHandler = async (req, res) => {
      const key = env.keyOf(req);
      const client = await pipelined.connect();
      let broken: unknown;
      try {
        const [, claimed] = await Promise.all([
          client.query('BEGIN'),
          client.query({ name: 'bench_raw_key', text: insertKey, values: [key, Date.now() + TTL_MS] }),
        ]);
        if (claimed.rowCount === 0) {
          await client.query('ROLLBACK');
          res.status(409).json({ error: 'the key is taken' });
          return;
        }
        const charge = await env.work(key);
        await client.query({ name: 'bench_ledger', text: insertLedger, values: [charge.id, charge.amount] });
        await client.query('COMMIT');
        res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
      } catch (error) {
        broken = error;
        throw error;
      } finally {
        client.release(broken instanceof Error ? broken : undefined);
      }
    };
    return {
      store: store as unknown as IdempotencyStore<never>,
      rawTx: [express.json(), rawTx],
      local: [
        idempotency({
          store: localStore,
          scope: 'single-tenant',
          ttlMs: TTL_MS,
          leaseMs: LEASE_MS,
          local: true,
          onError: () => {},
        }) as express.RequestHandler,
        express.json(),
        local,
      ],
      claim: (key) =>
        pool.query(`INSERT INTO ${floor} (k, v, expires_at) VALUES ($1, 'in_progress', $2) ON CONFLICT DO NOTHING`, [
          key,
          Date.now() + TTL_MS,
        ]),
      update: (key) => pool.query(`UPDATE ${floor} SET v = 'done' WHERE k = $1 AND v = 'in_progress'`, [key]),
      read: (key) => pool.query(`SELECT v FROM ${floor} WHERE k = $1`, [key]),
    };
  }
  if (env.store === 'redis') {
    const { Redis } = await import('ioredis');
    const { redisStore, fromNodeRedis } = await import('idem/stores/redis');
    const prefix = `bench:${env.run}:${process.pid}:`;
    // ioredis with auto-pipelining (commands issued in the same tick share one socket write, as node-redis always
    // does; BENCH_AUTOPIPELINE=0 turns it off). BENCH_REDIS_CLIENT=node-redis serves the store on @redis/client 6
    // through fromNodeRedis instead: callgrind counts its two commands at 194k instructions more per new key.
    const admin = new Redis(env.redisUrl);
    env.cleanups.push(async () => {
      await deleteByPattern(admin, `${prefix}*`);
      admin.disconnect();
    });
    let client: RedisClient;
    let raw: (...args: string[]) => Promise<unknown>;
    if (process.env.BENCH_REDIS_CLIENT === 'node-redis') {
      const { createClient } = await import('@redis/client');
      const nodeRedis = await createClient({ url: env.redisUrl }).connect();
      env.cleanups.unshift(() => nodeRedis.quit());
      client = fromNodeRedis(nodeRedis as unknown as NodeRedisClient);
      raw = (...args) => nodeRedis.sendCommand(args);
    } else {
      const ioredis = new Redis(env.redisUrl, { enableAutoPipelining: process.env.BENCH_AUTOPIPELINE !== '0' });
      env.cleanups.unshift(async () => ioredis.disconnect());
      client = ioredis;
      raw = (command, ...args) => ioredis.call(command, ...args);
    }
    const store = redisStore({ client, prefix });
    await store.load();
    return {
      store: store as unknown as IdempotencyStore<never>,
      // The floor on the same client as the store.
      claim: (key) => raw('SET', `${prefix}floor:${key}`, 'in_progress', 'PX', String(TTL_MS), 'NX'),
      update: (key) => raw('SET', `${prefix}floor:${key}`, 'done', 'PX', String(TTL_MS), 'XX'),
      read: (key) => raw('GET', `${prefix}floor:${key}`),
    };
  }
  throw new Error(`unknown BENCH_STORE ${env.store}`);
}

interface ScanDel {
  scan(cursor: string, match: 'MATCH', pattern: string, count: 'COUNT', n: number): Promise<[string, string[]]>;
  del(...keys: string[]): Promise<number>;
}

export async function deleteByPattern(client: ScanDel, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== '0');
}
