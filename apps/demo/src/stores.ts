/**
 * @module Opens the store named by `IDEM_STORE`, and the ledger beside it.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import Database from 'better-sqlite3';
import type { PoolClient } from 'pg';
import type { IdempotencyStore, RoundTripObserver } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { mysqlStore } from 'idem/stores/mysql';
import { postgresStore } from 'idem/stores/postgres';
import { redisStore } from 'idem/stores/redis';
import { sqliteStore } from 'idem/stores/sqlite';
import { ConfigError, type DemoConfig } from './config.js';
import { SqliteLedger, type Ledger } from './ledger.js';
import { PostgresLedger } from './ledger-postgres.js';

export interface Backend {
  readonly store: IdempotencyStore<never> | IdempotencyStore<unknown>;
  readonly ledger: Ledger;
  /** The ledger shares the store's database: charges commit in the completion's transaction. */
  readonly sharedLedger: boolean;
  /** A description for the startup line. */
  readonly description: string;
  close(): Promise<void>;
}

function openSqlite(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  return new Database(path);
}

/**
 * Opens the backend for `config.store`: `sqlite:<path>` (records and ledger in one database) or `memory:`
 * (records in memory, ledger in `config.ledger`). `observer.onRoundTrip` sees every store round trip (the model page).
 *
 * @example
 * const backend = await openBackend(loadConfig(process.env))
 */
export async function openBackend(config: DemoConfig, observer: RoundTripObserver = {}): Promise<Backend> {
  const url = config.store;
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length);
    if (!path) throw new ConfigError('IDEM_STORE=sqlite:<path> needs a path, e.g. sqlite:./.idem/idem.db');
    const database = openSqlite(path);
    const store = sqliteStore({ database, ...observer });
    await store.migrate();
    return {
      store,
      ledger: new SqliteLedger(database),
      sharedLedger: true,
      description: `SQLite ${path} (records and ledger, one transaction)`,
      close: async () => {
        await store.close();
        database.close();
      },
    };
  }
  if (url === 'memory:') {
    const ledgerDb = openSqlite(config.ledger);
    const store = memoryStore(observer);
    return {
      store,
      ledger: new SqliteLedger(ledgerDb),
      sharedLedger: false,
      description: `memory (records), SQLite ${config.ledger} (ledger)`,
      close: async () => {
        await store.close();
        ledgerDb.close();
      },
    };
  }
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url, observer);
  if (/^(rediss?|redis-cluster):\/\//.test(url)) return openRedis(url, config.ledger, observer);
  if (url.startsWith('mysql://')) return openMysql(url, config.ledger, observer);
  if (url.startsWith('dynamodb:')) return openDynamo(url, config.ledger, observer);
  throw new ConfigError(`IDEM_STORE must be one of ${ACCEPTED_STORES}; got "${url}".`);
}

/**
 * Runs `load` (a dynamic import of an optional driver), turning "module not found" into a one-line
 * {@link ConfigError} that says what to install.
 */
async function need<T>(load: () => Promise<T>, name: string, forUrl: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: string }).code;
    const message = error instanceof Error ? error.message : '';
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && message.includes(name)) {
      throw new ConfigError(`IDEM_STORE=${forUrl}… needs the "${name}" package: install it (npm install ${name}).`);
    }
    throw error;
  }
}

/** The forms `IDEM_STORE` accepts, for error messages and `--help`. */
export const ACCEPTED_STORES =
  'sqlite:<path>, memory:, postgres://user@host:5432/db[?schema=name], redis://host:6379[/db][?prefix=name:], ' +
  'redis-cluster://host:port[,host:port…][?prefix=name:&replicas=1&replicaTimeoutMs=500], ' +
  'mysql://user[:password]@host:3306/db, ' +
  'dynamodb://host:port[?table=name&region=r], dynamodb:local[?table=name]';

/**
 * Client timeouts for the network stores, so that a stalled store (a partition, a hung server) answers 503
 * within a few seconds instead of holding the request: fail closed, and fast.
 *
 * - `connectMs` — opening a connection (pg `connectionTimeoutMillis`, which also bounds the wait for a free pool
 *   connection; ioredis `connectTimeout`; the AWS SDK's `connectionTimeout`). Longer than the others: a burst
 *   that opens a pool's connections at once makes Postgres fork a backend for each, which takes seconds on a
 *   loaded machine; 2 s turned a burst of 200 requests into 503s on a 2-core CI runner.
 * - `statementMs` — pg `statement_timeout`: the server cancels a slow statement first, cleanly.
 * - `requestMs` — the client gives up on a reply (pg `query_timeout`, ioredis `commandTimeout`, the AWS SDK's
 *   `requestTimeout`): the backstop when the server cannot even be told to cancel. Above `statementMs`.
 * - `idleInTransactionMs` — pg `idle_in_transaction_session_timeout`: a transaction whose client vanished
 *   mid-way is rolled back by the server, releasing its row locks.
 */
export const STORE_TIMEOUTS = {
  connectMs: 5_000,
  statementMs: 2_000,
  requestMs: 2_500,
  idleInTransactionMs: 5_000,
} as const;

/** A connection-error logger that prints at most one line every 5 s (a cut store errors on every reconnect). */
function warner(name: string): (error: unknown) => void {
  let last = 0;
  return (error) => {
    const now = Date.now();
    if (now - last < 5_000) return;
    last = now;
    console.error(`demo: ${name} connection error: ${error instanceof Error ? error.message : String(error)}`);
  };
}

/** Parses a store URL; `params` are demo options removed from it before the driver sees it. */
function storeUrl(url: string, params: readonly string[]): { url: URL; options: Map<string, string>; shown: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`IDEM_STORE is not a valid URL: "${url}". Accepted: ${ACCEPTED_STORES}.`);
  }
  const options = new Map<string, string>();
  for (const name of params) {
    const value = parsed.searchParams.get(name);
    if (value !== null) options.set(name, value);
    parsed.searchParams.delete(name);
  }
  const shown = new URL(parsed);
  if (shown.password) shown.password = '***';
  return { url: parsed, options, shown: shown.toString() };
}

/**
 * `postgres://…[?schema=name]`: records and the ledger's `charges` table in one database and schema (default
 * `public`); the charge is written on the completion's transaction (`sharedLedger`). Both tables are migrated
 * at startup (idempotent, safe from several processes at once).
 */
async function openPostgres(raw: string, observer: RoundTripObserver): Promise<Backend> {
  const { url, options, shown } = storeUrl(raw, ['schema']);
  const schema = options.get('schema') ?? 'public';
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,47}$/.test(schema)) {
    throw new ConfigError(`IDEM_STORE ?schema= must be a plain identifier (letters, digits, _), got "${schema}".`);
  }
  const { default: pg } = await need(() => import('pg'), 'pg', 'postgres://');
  const pool = new pg.Pool({
    connectionString: url.toString(),
    connectionTimeoutMillis: STORE_TIMEOUTS.connectMs,
    statement_timeout: STORE_TIMEOUTS.statementMs,
    query_timeout: STORE_TIMEOUTS.requestMs,
    idle_in_transaction_session_timeout: STORE_TIMEOUTS.idleInTransactionMs,
    keepAlive: true,
  });
  const warn = warner('postgres');
  // An idle pooled connection that dies is reported on the pool; one checked out (inside a transaction) on the
  // client itself. Without listeners either would crash the process: the store sees the failure as a rejected
  // query anyway.
  pool.on('error', warn);
  pool.on('connect', (client) => client.on('error', warn));
  const store = postgresStore<PoolClient>({ pool, schema, ...observer });
  const ledger = new PostgresLedger(pool, schema);
  try {
    await store.migrate();
    await ledger.migrate();
  } catch (error) {
    await pool.end();
    throw error;
  }
  return {
    store,
    ledger,
    sharedLedger: true,
    description: `PostgreSQL ${shown} schema ${schema} (records and ledger, one transaction)`,
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}

/**
 * `mysql://user[:password]@host:3306/db`: records in MySQL or MariaDB (table `idempotency_records`, migrated at
 * startup), the ledger in the SQLite file `ledgerPath`, each charge unique on its record's id. The pool is
 * created with `multipleStatements` (the store's claim is one query of two statements).
 */
async function openMysql(raw: string, ledgerPath: string, observer: RoundTripObserver): Promise<Backend> {
  const { url, shown } = storeUrl(raw, []);
  if (url.pathname.length <= 1)
    throw new ConfigError(`IDEM_STORE=mysql://user@host:3306/db needs a database, got "${shown}".`);
  const { default: mysql } = await need(() => import('mysql2/promise'), 'mysql2', 'mysql://');
  const pool = mysql.createPool({
    uri: url.toString(),
    multipleStatements: true,
    connectTimeout: STORE_TIMEOUTS.connectMs,
    enableKeepAlive: true,
  });
  // An idle pooled connection that dies is reported on its core connection; without a listener it would crash.
  const warn = warner('mysql');
  pool.pool.on('connection', (connection) => connection.on('error', warn));
  const store = mysqlStore({ pool, ...observer });
  let ledgerDb: Database.Database | undefined;
  try {
    await store.migrate();
    ledgerDb = openLedgerDb(ledgerPath);
  } catch (error) {
    await pool.end();
    throw error;
  }
  const db = ledgerDb;
  return {
    store,
    ledger: new SqliteLedger(db),
    sharedLedger: false,
    description: `MySQL ${shown} (records), SQLite ${ledgerPath} (ledger)`,
    close: async () => {
      await store.close();
      await pool.end();
      db.close();
    },
  };
}

/** The ledger beside a store that is not SQL: a SQLite file, WAL so several server processes can share it. */
function openLedgerDb(path: string): Database.Database {
  const db = openSqlite(path);
  if (path !== ':memory:') db.pragma('journal_mode = WAL');
  return db;
}

/**
 * `redis://host:6379[/db][?prefix=name:]`, or `redis-cluster://host:port[,host:port…][?prefix=…]` for a Redis
 * Cluster (ioredis `Cluster`, seeded with those nodes): records in Redis (default prefix `idem:`), the ledger in the
 * SQLite file `ledgerPath`, each charge unique on its record's id. `replicas=N` (default 0) makes every write wait
 * for N replicas (`WAIT`, `replicaTimeoutMs` default 1000) or fail. Scripts are loaded at startup.
 */
async function openRedis(raw: string, ledgerPath: string, observer: RoundTripObserver): Promise<Backend> {
  const seeds = /^redis-cluster:\/\/([^/?#]*)/.exec(raw)?.[1];
  const nodes = seeds?.split(',').map((seed) => ({
    host: seed.slice(0, seed.lastIndexOf(':')),
    port: Number(seed.slice(seed.lastIndexOf(':') + 1)),
  }));
  if (nodes?.some(({ host, port }) => !host || !Number.isInteger(port) || port <= 0)) {
    throw new ConfigError(`IDEM_STORE=redis-cluster://host:port[,host:port…] needs host:port pairs, got "${raw}".`);
  }
  const { url, options, shown } = storeUrl(
    seeds === undefined ? raw : `redis://cluster${raw.slice('redis-cluster://'.length + seeds.length)}`,
    ['prefix', 'replicas', 'replicaTimeoutMs'],
  );
  const prefix = options.get('prefix') ?? 'idem:';
  if (/[{}]/.test(prefix)) throw new ConfigError(`IDEM_STORE ?prefix= must not contain { or }, got "${prefix}".`);
  const replicas = Number(options.get('replicas') ?? 0);
  const replicaTimeoutMs = Number(options.get('replicaTimeoutMs') ?? 1_000);
  if (!Number.isInteger(replicas) || replicas < 0 || !Number.isInteger(replicaTimeoutMs) || replicaTimeoutMs <= 0) {
    throw new ConfigError(`IDEM_STORE ?replicas= must be an integer ≥ 0 and ?replicaTimeoutMs= one > 0, got "${raw}".`);
  }
  const { Cluster, Redis } = await need(() => import('ioredis'), 'ioredis', 'redis://');
  // Fail fast and never resend: a command on a dropped connection is rejected at once (not queued until the
  // connection returns, not sent a second time after it). The engine answers 503; the client retries the key.
  // (A Cluster client does resend a command whose node's connection closed, to the slot's new primary, for up to
  // 16 tries 100 ms apart: the scripts count a resend that meets their own earlier run as applied.)
  const connection = {
    connectTimeout: STORE_TIMEOUTS.connectMs,
    commandTimeout: STORE_TIMEOUTS.requestMs,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
  };
  const client = nodes
    ? new Cluster(nodes, { lazyConnect: true, enableOfflineQueue: false, redisOptions: connection })
    : new Redis(url.toString(), {
        ...connection,
        lazyConnect: true,
        enableOfflineQueue: false,
        retryStrategy: (attempt: number) => Math.min(attempt * 100, 1_000),
      });
  client.on('error', warner('redis'));
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw error;
  }
  const store = redisStore({ client, prefix, replicas, replicaTimeoutMs, ...observer });
  const ledgerDb = openLedgerDb(ledgerPath);
  try {
    await store.load();
  } catch (error) {
    client.disconnect();
    ledgerDb.close();
    throw error;
  }
  return {
    store,
    ledger: new SqliteLedger(ledgerDb),
    sharedLedger: false,
    description: `${nodes ? `Redis Cluster ${seeds}` : `Redis ${shown}`} prefix ${prefix}${replicas ? ` WAIT ${replicas}` : ''} (records), SQLite ${ledgerPath} (ledger)`,
    close: async () => {
      await store.close();
      await client.quit().catch(() => client.disconnect());
      ledgerDb.close();
    },
  };
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

/**
 * `dynamodb://host:port[?table=name&region=r]` (an endpoint: DynamoDB Local, dynalite, or AWS itself over https)
 * or `dynamodb:local[?table=name]` (an in-process dynalite that forgets everything on exit). Table default
 * `idempotency`, created at startup if missing; the ledger in the SQLite file `ledgerPath`.
 */
async function openDynamo(raw: string, ledgerPath: string, observer: RoundTripObserver): Promise<Backend> {
  const { dynamodbStore } = await need(() => import('idem/stores/dynamodb'), '@aws-sdk/client-dynamodb', 'dynamodb:');
  const local = raw === 'dynamodb:local' || raw.startsWith('dynamodb:local?');
  if (!local && !raw.startsWith('dynamodb://')) {
    throw new ConfigError(
      `IDEM_STORE for DynamoDB must be dynamodb://host:port[?table=name] or dynamodb:local, got "${raw}".`,
    );
  }
  const query = new URLSearchParams(raw.includes('?') ? raw.slice(raw.indexOf('?') + 1) : '');
  const table = query.get('table') ?? 'idempotency';
  let client: DynamoDBClient;
  let stop: () => Promise<void>;
  let where: string;
  if (local) {
    const { startLocalDynamo } = await import('./local-dynamo.js');
    const dynalite = await need(() => startLocalDynamo(), 'dynalite', 'dynamodb:local');
    client = dynalite.client;
    stop = () => dynalite.close();
    where = `in-process dynalite ${dynalite.endpoint}`;
  } else {
    const { url } = storeUrl(raw, ['table', 'region']);
    if (!url.hostname) throw new ConfigError(`IDEM_STORE=dynamodb://host:port needs a host, got "${raw}".`);
    const loopback = LOOPBACK.has(url.hostname);
    const endpoint = `${loopback ? 'http' : 'https'}://${url.host}`;
    const sdkModule = await need(() => import('@aws-sdk/client-dynamodb'), '@aws-sdk/client-dynamodb', 'dynamodb://');
    client = new sdkModule.DynamoDBClient({
      endpoint,
      region: query.get('region') ?? process.env.AWS_REGION ?? 'us-east-1',
      maxAttempts: 2,
      requestHandler: { connectionTimeout: STORE_TIMEOUTS.connectMs, requestTimeout: STORE_TIMEOUTS.requestMs },
      // A local engine takes any credentials; elsewhere the SDK's default chain (env, profile, role) applies.
      ...(loopback ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
    });
    const sdk = client;
    stop = async () => sdk.destroy();
    where = endpoint;
  }
  const store = dynamodbStore({ client, table, ...observer });
  let ledgerDb: Database.Database | undefined;
  try {
    await store.createTable();
    ledgerDb = openLedgerDb(ledgerPath);
  } catch (error) {
    await stop();
    throw error;
  }
  const db = ledgerDb;
  return {
    store,
    ledger: new SqliteLedger(db),
    sharedLedger: false,
    description: `DynamoDB ${where} table ${table} (records), SQLite ${ledgerPath} (ledger)`,
    close: async () => {
      await store.close();
      await stop();
      db.close();
    },
  };
}
