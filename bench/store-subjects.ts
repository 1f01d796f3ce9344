/**
 * @module The subjects of bench/store-work.ts: each store's backend with Idem's store on it (and, with
 * `BENCH_STORE_BEFORE=<a copy of packages/idem/src>`, that copy's store beside it), the floor on the same backend,
 * and on Redis @node-idempotency. Each reports its requests, the statements or commands its backend ran, and the
 * CPU of the process or thread serving it (/proc/<id>/schedstat, ns).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateTableCommand, DynamoDBClient, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { Idempotency } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import Database from 'better-sqlite3';
import type { ClaimRequest, IdempotencyStore, Outcome } from 'idem';
import type * as Dynamo from 'idem/stores/dynamodb';
import type * as Mysql from 'idem/stores/mysql';
import type * as Postgres from 'idem/stores/postgres';
import type * as RedisStores from 'idem/stores/redis';
import type * as Sqlite from 'idem/stores/sqlite';
import type { SqliteDatabase } from 'idem/stores/sqlite';
import { Redis } from 'ioredis';
import mysql from 'mysql2/promise';
import pg from 'pg';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL_URL = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const RUN = randomUUID().slice(0, 8);
const TTL_MS = 3_600_000;
const LEASE_MS = 10_000;
/** The charge the bench's route answers: a 201 with two headers and a small JSON body. */
const BODY = Buffer.from(JSON.stringify({ id: `ch_${'x'.repeat(24)}`, amount: 500, currency: 'usd', status: 'ok' }));
const OUTCOME: Outcome = {
  status: 'succeeded',
  retryable: false,
  resultId: `ch_${'x'.repeat(24)}`,
  response: {
    status: 201,
    headers: [
      ['content-type', 'application/json; charset=utf-8'],
      ['location', `/v1/charges/ch_${'x'.repeat(24)}`],
    ],
    body: new Uint8Array(BODY),
  },
};

/** Server versions, filled in as the backends are reached. */
export const machine: Record<string, string> = {};
/** What the run must undo, last first. */
export const cleanups: Array<() => Promise<unknown>> = [];

/** One layer on one backend, driven one new key at a time. */
export interface Subject {
  readonly store: string;
  readonly layer: string;
  /** One new key: the claim, then the completion. */
  newKey(): Promise<void>;
  /** Requests sent to the backend so far. */
  requests(): number;
  /** Statements (SQL), commands (Redis, scripts' own included) or calls (DynamoDB) run so far. */
  statements(): Promise<number>;
  /** CPU of what serves this subject so far, ns (the server process, the connection's backend or thread). */
  cpuNs(): Promise<number>;
  /** Redis only: per command, calls and µs so far (`INFO commandstats`), and which commands the layer sends. */
  commandstats?(): Promise<Map<string, { calls: number; usec: number }>>;
  readonly sends?: readonly string[];
}

/** Where Idem's stores are loaded from: this tree, or (`BENCH_STORE_BEFORE=<src dir>`) an older copy's sources. */
interface Lib {
  readonly layer: string;
  load<T>(store: string): Promise<T>;
}
const LIBS: Lib[] = [
  { layer: 'Idem', load: (store) => import(`idem/stores/${store}`) },
  ...(process.env.BENCH_STORE_BEFORE
    ? [
        {
          layer: 'Idem before',
          load: (store: string) => import(`${process.env.BENCH_STORE_BEFORE}/stores/${store}/index.ts`),
        },
      ]
    : []),
] as Lib[];

const schedNs = (path: string) => Number(readFileSync(path, 'utf8').split(' ')[0]);
let subjects = 0;
/** Idem's store: one claim and its completion per new key, counted by the store's own meter. */
function idemSubject(
  store: IdempotencyStore<never>,
  name: string,
  layer: string,
  statements: () => Promise<number>,
  cpuNs: () => Promise<number>,
): Subject {
  const scope = `acct_${RUN}_${subjects++}`;
  cleanups.push(() => store.close());
  return {
    store: name,
    layer,
    async newKey() {
      const key = randomUUID();
      const now = Date.now();
      const request: ClaimRequest = {
        pk: `IDEMPOTENCY#${scope}#${key}`,
        scope,
        key,
        fingerprint: 'f'.repeat(64),
        token: randomUUID(),
        id: randomUUID(),
        now,
        leaseMs: LEASE_MS,
        ttlMs: TTL_MS,
      };
      if ((await store.claim(request)).kind !== 'claimed') throw new Error(`${name}: a new key was not claimed`);
      const done = await store.complete({ pk: request.pk, token: request.token, now: now + 1, outcome: OUTCOME });
      if (!done.ok) throw new Error(`${name}: a claimed key was not completed`);
    },
    requests: () => store.roundTrips,
    statements,
    cpuNs,
  };
}
/** The floor: one conditional write and one update, each one request and one statement. */
function floorSubject(
  name: string,
  write: (key: string) => Promise<unknown>,
  update: (key: string) => Promise<unknown>,
  cpuNs: () => Promise<number>,
): Subject {
  let sent = 0;
  return {
    store: name,
    layer: 'floor',
    async newKey() {
      const key = randomUUID();
      await write(key);
      await update(key);
      sent += 2;
    },
    requests: () => sent,
    statements: async () => sent,
    cpuNs,
  };
}

// ---- Redis: a private server, so INFO sees only this run ------------------------------------------------------------
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}
/** A `redis-server` of the run's own with `options`: its URL, `INFO commandstats`, and its CPU. */
async function privateRedis(options: string[] = []) {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...options], {
    stdio: 'ignore',
  });
  cleanups.push(async () => child.kill());
  const url = `redis://127.0.0.1:${port}`;
  const admin = new Redis(url, { retryStrategy: () => 20 });
  const starting = () => {}; // refused connections until redis-server listens: retried
  admin.on('error', starting);
  await new Promise((resolve) => admin.once('ready', resolve));
  admin.off('error', starting);
  cleanups.push(async () => admin.disconnect());
  machine.redis = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?';
  const stats = async () => {
    const found = new Map<string, { calls: number; usec: number }>();
    for (const [, name, calls, usec] of (await admin.info('commandstats')).matchAll(
      /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm,
    )) {
      if (name !== 'info') found.set(name as string, { calls: Number(calls), usec: Number(usec) });
    }
    return found;
  };
  const commands = async () => [...(await stats()).values()].reduce((sum, { calls }) => sum + calls, 0);
  const cpuNs = async () => schedNs(`/proc/${child.pid}/schedstat`);
  return { url, stats, commands, cpuNs };
}

/**
 * Idem's store on a server of its own (and the earlier copy's, with `BENCH_STORE_BEFORE`), @node-idempotency on
 * another, and Idem again on a third with `hash-max-listpack-value 1024`: a record with its response then stays a
 * listpack (Redis's default, 64 bytes, turns it into a hash table at the completion).
 */
export async function redisSubjects(): Promise<Subject[]> {
  const found: Subject[] = [];
  const servers = [
    ...LIBS.map((lib) => ({ lib, layer: lib.layer, options: [] as string[] })),
    {
      lib: LIBS[0] as Lib,
      layer: 'Idem, hash-max-listpack-value 1024',
      options: ['--hash-max-listpack-value', '1024'],
    },
  ];
  for (const { lib, layer, options } of servers) {
    const { redisStore } = await lib.load<typeof RedisStores>('redis');
    const server = await privateRedis(options);
    const client = new Redis(server.url);
    cleanups.push(async () => client.disconnect());
    const store = redisStore({ client, prefix: `bench:${RUN}:` });
    await store.load();
    const idem = idemSubject(store, 'redis', layer, server.commands, server.cpuNs);
    found.push({ ...idem, commandstats: server.stats, sends: ['evalsha', 'eval'] });
  }

  const { url, stats, commands, cpuNs } = await privateRedis();
  const storage = new RedisStorageAdapter({ url });
  await storage.connect();
  cleanups.push(() => storage.disconnect());
  const peer = new Idempotency(storage, { cacheKeyPrefix: `bench:${RUN}:ni`, cacheTTLMS: TTL_MS });
  const body = JSON.parse(BODY.toString()) as Record<string, unknown>;
  let sent = 0;
  found.push({
    store: 'redis',
    layer: '@node-idempotency',
    async newKey() {
      // What its NestJS interceptor (and bench/ni.ts) does around a new key: onRequest, the work, onResponse.
      const params = { headers: { 'idempotency-key': randomUUID() }, path: '/pay', method: 'POST', body };
      if ((await peer.onRequest(params)) !== undefined) throw new Error('@node-idempotency: a new key was cached');
      await peer.onResponse(params, { body, additional: { status: 201, location: '/v1/charges/ch_1' } });
      sent += 2; // its adapter's setIfNotExists (SET NX PX), then set (SET PX)
    },
    requests: () => sent,
    statements: commands,
    cpuNs,
    commandstats: stats,
    sends: ['set', 'get'],
  });
  return found;
}

// ---- PostgreSQL: one connection, so its backend's CPU is the subject's ----------------------------------------------
export async function postgresSubjects(): Promise<Subject[]> {
  const schema = `idem_bench_${RUN}`;
  // One connection, never closed for idling, so one backend serves the whole run.
  const pool = new pg.Pool({ connectionString: PG_URL, max: 1, idleTimeoutMillis: 0 });
  cleanups.push(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool.end();
  });
  const { rows } = await pool.query<{ pid: number; version: string }>(
    `SELECT pg_backend_pid() AS pid, current_setting('server_version') AS version`,
  );
  machine.postgres = rows[0]?.version ?? '?';
  const cpuNs = async () => {
    const now = (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
    if (now !== rows[0]?.pid) throw new Error(`postgres: the pool's one backend changed (${rows[0]?.pid}, now ${now})`);
    return schedNs(`/proc/${now}/schedstat`);
  };
  await pool.query(`CREATE SCHEMA ${schema}`);
  const found: Subject[] = [];
  for (const lib of LIBS) {
    const { postgresStore } = await lib.load<typeof Postgres>('postgres');
    let statements = 0;
    const table = `records_${subjects}`;
    const store = postgresStore({ pool, schema, table, onRoundTrip: () => void statements++ });
    await store.migrate();
    found.push(idemSubject(store, 'postgres', lib.layer, async () => statements, cpuNs));
  }
  const floor = `${schema}.floor`;
  await pool.query(`CREATE TABLE ${floor} (k text PRIMARY KEY, v text NOT NULL, body bytea)`);
  found.push(
    floorSubject(
      'postgres',
      (k) => pool.query(`INSERT INTO ${floor} (k, v) VALUES ($1, 'in_progress') ON CONFLICT DO NOTHING`, [k]),
      (k) => pool.query(`UPDATE ${floor} SET v = 'done', body = $2 WHERE k = $1 AND v = 'in_progress'`, [k, BODY]),
      cpuNs,
    ),
  );
  return found;
}

// ---- MariaDB / MySQL: one connection, so its server thread's CPU is the subject's -----------------------------------
export async function mysqlSubjects(): Promise<Subject[]> {
  const database = `idem_bench_${RUN}`;
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  await admin.query(`CREATE DATABASE \`${database}\``);
  const uri = new URL(MYSQL_URL);
  uri.pathname = `/${database}`;
  const pool = mysql.createPool({
    uri: uri.toString(),
    multipleStatements: true,
    connectionLimit: 1,
    idleTimeout: 3_600_000, // its one connection (and server thread) stays the same for the whole run
  });
  cleanups.push(async () => {
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
  });
  const thread = async () => {
    const [found] = await pool.query(
      'SELECT tid, VERSION() AS version FROM information_schema.processlist WHERE id = CONNECTION_ID()',
    );
    return (found as Array<{ tid: number; version: string }>)[0] as { tid: number; version: string };
  };
  const { tid, version } = await thread();
  machine.mysql = version;
  const cpuNs = async () => {
    const now = await thread();
    if (now.tid !== tid) throw new Error(`mysql: the pool's one connection changed (thread ${tid}, now ${now.tid})`);
    return schedNs(`/proc/${tid}/schedstat`);
  };
  const subjectsHere: Subject[] = [];
  for (const lib of LIBS) {
    const { mysqlStore } = await lib.load<typeof Mysql>('mysql');
    let statements = 0;
    // The claim is one query of two statements (the upsert, then the row's read).
    const counted = ({ request }: { request: unknown }) =>
      void (statements += (request as { sql: string }).sql.split(/;\s*\n/).length);
    const store = mysqlStore({ pool, table: `records_${subjects}`, onRoundTrip: counted });
    await store.migrate();
    subjectsHere.push(idemSubject(store, 'mysql', lib.layer, async () => statements, cpuNs));
  }
  await pool.query('CREATE TABLE floor (k varchar(64) PRIMARY KEY, v varchar(16) NOT NULL, body blob)');
  subjectsHere.push(
    floorSubject(
      'mysql',
      (k) => pool.execute(`INSERT IGNORE INTO floor (k, v) VALUES (?, 'in_progress')`, [k]),
      (k) => pool.execute(`UPDATE floor SET v = 'done', body = ? WHERE k = ? AND v = 'in_progress'`, [BODY, k]),
      cpuNs,
    ),
  );
  return subjectsHere;
}

// ---- SQLite: in this process, so the CPU is the store's code and SQLite's together -----------------------------------
/** `database` seen through a counter of every statement run: prepared ones, and a transaction's BEGIN and COMMIT. */
function countingDatabase(database: Database.Database, count: (statements: number) => void): SqliteDatabase {
  const counted =
    <A extends unknown[], R>(run: (...args: A) => R, statements = 1) =>
    (...args: A): R => {
      count(statements);
      return run(...args);
    };
  return {
    prepare: (source) => {
      const statement = database.prepare(source);
      return {
        run: counted((...args: unknown[]) => statement.run(...args)),
        get: counted((...args: unknown[]) => statement.get(...args)),
        all: counted((...args: unknown[]) => statement.all(...args)),
      };
    },
    exec: (source) => database.exec(source),
    pragma: (source, options) => database.pragma(source, options),
    transaction: <A extends unknown[], R>(fn: (...args: A) => R) => {
      const tx = database.transaction(fn);
      return { immediate: counted((...args: A) => tx.immediate(...args), 2) };
    },
    close: () => database.close(),
  };
}
export async function sqliteSubjects(): Promise<Subject[]> {
  const dir = join(tmpdir(), `idem-bench-store-${RUN}`);
  mkdirSync(dir, { recursive: true });
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  const cpuNs = async () => schedNs(`/proc/${process.pid}/task/${process.pid}/schedstat`);
  const found: Subject[] = [];
  for (const lib of LIBS) {
    const { sqliteStore } = await lib.load<typeof Sqlite>('sqlite');
    const database = new Database(join(dir, `idem-${subjects}.db`));
    let statements = 0;
    const counting = countingDatabase(database, (n) => void (statements += n));
    const store = sqliteStore({ database: counting, closeDatabase: true });
    await store.migrate();
    found.push(idemSubject(store, 'sqlite', lib.layer, async () => statements, cpuNs));
  }
  const database = new Database(join(dir, 'floor.db'));
  database.pragma('journal_mode = WAL');
  cleanups.push(async () => database.close());
  database.exec('CREATE TABLE floor (k TEXT PRIMARY KEY, v TEXT NOT NULL, body BLOB)');
  const write = database.prepare(`INSERT OR IGNORE INTO floor (k, v) VALUES (?, 'in_progress')`);
  const update = database.prepare(`UPDATE floor SET v = 'done', body = ? WHERE k = ? AND v = 'in_progress'`);
  found.push(
    floorSubject(
      'sqlite',
      async (k) => write.run(k),
      async (k) => update.run(BODY, k),
      cpuNs,
    ),
  );
  return found;
}

// ---- DynamoDB: dynalite in a child process of its own ---------------------------------------------------------------
export async function dynamoSubjects(): Promise<Subject[]> {
  const listen = `require('dynalite')({ createTableMs: 0 }).listen(0, '127.0.0.1', function () { console.log(this.address().port) })`;
  const child = spawn(process.execPath, ['-e', listen], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(async () => child.kill());
  const port = await new Promise<number>((resolve) => child.stdout?.once('data', (data) => resolve(Number(`${data}`))));
  const client = new DynamoDBClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: 'local',
    credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
  });
  cleanups.push(async () => client.destroy());
  const cpuNs = async () => schedNs(`/proc/${child.pid}/schedstat`);
  const found: Subject[] = [];
  for (const lib of LIBS) {
    const { dynamodbStore } = await lib.load<typeof Dynamo>('dynamodb');
    const store = dynamodbStore({ client, table: `idem-bench-${RUN}-${subjects}` });
    await store.createTable({ pollMs: 10 });
    found.push(idemSubject(store, 'dynamodb', lib.layer, async () => store.roundTrips, cpuNs));
  }
  const floor = `floor-${RUN}`;
  const attribute = { AttributeName: 'k', AttributeType: 'S' } as const;
  await client.send(
    new CreateTableCommand({
      TableName: floor,
      AttributeDefinitions: [attribute],
      KeySchema: [{ AttributeName: 'k', KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
    }),
  );
  const values = { ':done': { S: 'done' }, ':inProgress': { S: 'in_progress' }, ':body': { B: BODY } };
  found.push(
    floorSubject(
      'dynamodb',
      (k) =>
        client.send(
          new PutItemCommand({
            TableName: floor,
            Item: { k: { S: k }, v: { S: 'in_progress' } },
            ConditionExpression: 'attribute_not_exists(k)',
          }),
        ),
      (k) =>
        client.send(
          new UpdateItemCommand({
            TableName: floor,
            Key: { k: { S: k } },
            UpdateExpression: 'SET v = :done, body = :body',
            ConditionExpression: 'v = :inProgress',
            ExpressionAttributeValues: values,
          }),
        ),
      cpuNs,
    ),
  );
  return found;
}
