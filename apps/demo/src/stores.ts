/**
 * @module Opens the store named by `IDEM_STORE`, and the ledger beside it.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import Database from 'better-sqlite3';
import type { PoolClient } from 'pg';
import {
  isIdempotencyError,
  parseStoreUrl,
  redact,
  type IdempotencyStore,
  type RoundTripObserver,
  type StoreUrl,
} from 'idem';
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
 * Opens the backend for `config.store` (read by the library's `parseStoreUrl`): `sqlite:<path>` (records and ledger
 * in one database), `memory:` (records in memory, ledger in `config.ledger`) or a network store. A URL refused, or a
 * store that cannot be opened, is one {@link ConfigError} line with no password in it. `observer.onRoundTrip` sees
 * every store round trip (the model page).
 *
 * @example
 * const backend = await openBackend(loadConfig(process.env))
 */
export async function openBackend(config: DemoConfig, observer: RoundTripObserver = {}): Promise<Backend> {
  const url = parseStoreUrl(config.store, 'IDEM_STORE');
  try {
    return await open(url, config.store, config.ledger, observer);
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    // A store that refuses its options or cannot be opened (unreachable, a wrong password): one line, no secret.
    const why = isIdempotencyError(error, 'CONFIG_INVALID') ? '' : 'cannot open the store: ';
    throw new ConfigError(`IDEM_STORE ${url.shown}: ${why}${warning(error, config.store)}`, { cause: error });
  }
}

function open(url: StoreUrl, raw: string, ledger: string, observer: RoundTripObserver): Promise<Backend> {
  switch (url.kind) {
    case 'sqlite':
      return openSqliteBackend(url.path, observer);
    case 'memory': {
      const ledgerDb = openSqlite(ledger);
      const store = memoryStore(observer);
      return Promise.resolve({
        store,
        ledger: new SqliteLedger(ledgerDb),
        sharedLedger: false,
        description: `memory (records), SQLite ${ledger} (ledger)`,
        close: async () => {
          await store.close();
          ledgerDb.close();
        },
      });
    }
    case 'postgres':
      return openPostgres(url, raw, observer);
    case 'redis':
    case 'redis-cluster':
      return openRedis(url, raw, ledger, observer);
    case 'mysql':
      return openMysql(url, raw, ledger, observer);
    case 'dynamodb':
      return openDynamo(url, ledger, observer);
  }
}

async function openSqliteBackend(path: string, observer: RoundTripObserver): Promise<Backend> {
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

/**
 * A connection-error logger that prints at most one line every 5 s (a cut store errors on every reconnect). Quiet
 * until `opened()`: an error while the store opens is the start-up's own one line.
 */
function warner(name: string, url: string): ((error: unknown) => void) & { opened(): void } {
  let last = Infinity;
  const warn = (error: unknown) => {
    const now = Date.now();
    if (now - last < 5_000) return;
    last = now;
    console.error(`demo: ${name} connection error: ${warning(error, url)}`);
  };
  return Object.assign(warn, { opened: () => void (last = 0) });
}

/** A driver's error as one line, with the store URL's secrets masked wherever the driver repeated them. */
function warning(error: unknown, url: string): string {
  return redact(error instanceof Error ? error.message : String(error), url).replace(/\s+/g, ' ');
}

type Url<K extends StoreUrl['kind']> = Extract<StoreUrl, { kind: K }>;

/**
 * `postgres://…[?schema=name]`: records and the ledger's `charges` table in one database and schema (default
 * `public`); the charge is written on the completion's transaction (`sharedLedger`). Both tables are migrated
 * at startup (idempotent, safe from several processes at once).
 */
async function openPostgres(url: Url<'postgres'>, raw: string, observer: RoundTripObserver): Promise<Backend> {
  const { schema = 'public' } = url.options;
  const { default: pg } = await need(() => import('pg'), 'pg', 'postgres://');
  const pool = new pg.Pool({
    connectionString: url.connectionString,
    connectionTimeoutMillis: STORE_TIMEOUTS.connectMs,
    statement_timeout: STORE_TIMEOUTS.statementMs,
    query_timeout: STORE_TIMEOUTS.requestMs,
    idle_in_transaction_session_timeout: STORE_TIMEOUTS.idleInTransactionMs,
    keepAlive: true,
  });
  const warn = warner('postgres', raw);
  // An idle pooled connection that dies is reported on the pool; one checked out (inside a transaction) on the
  // client itself. Without listeners either would crash the process: the store sees the failure as a rejected
  // query anyway.
  pool.on('error', warn);
  pool.on('connect', (client) => client.on('error', warn));
  const { store, ledger } = await closingOnError(
    async () => {
      const store = postgresStore<PoolClient>({ pool, ...url.options, ...observer });
      const ledger = new PostgresLedger(pool, schema);
      await store.migrate();
      await ledger.migrate();
      return { store, ledger };
    },
    () => pool.end(),
  );
  warn.opened();
  return {
    store,
    ledger,
    sharedLedger: true,
    description: `PostgreSQL ${url.shown} schema ${schema} (records and ledger, one transaction)`,
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
async function openMysql(
  url: Url<'mysql'>,
  raw: string,
  ledgerPath: string,
  observer: RoundTripObserver,
): Promise<Backend> {
  const { default: mysql } = await need(() => import('mysql2/promise'), 'mysql2', 'mysql://');
  const pool = mysql.createPool({
    uri: url.uri,
    multipleStatements: true,
    connectTimeout: STORE_TIMEOUTS.connectMs,
    enableKeepAlive: true,
  });
  // An idle pooled connection that dies is reported on its core connection; without a listener it would crash.
  const warn = warner('mysql', raw);
  pool.pool.on('connection', (connection) => connection.on('error', warn));
  const { store, db } = await closingOnError(
    async () => {
      const store = mysqlStore({ pool, ...url.options, ...observer });
      await store.migrate();
      return { store, db: openLedgerDb(ledgerPath) };
    },
    () => pool.end(),
  );
  warn.opened();
  return {
    store,
    ledger: new SqliteLedger(db),
    sharedLedger: false,
    description: `MySQL ${url.shown} (records), SQLite ${ledgerPath} (ledger)`,
    close: async () => {
      await store.close();
      await pool.end();
      db.close();
    },
  };
}

/** Runs `open`; if it throws, runs `cleanUp` (the pool or client it was given) and rethrows. */
async function closingOnError<T>(open: () => Promise<T>, cleanUp: () => unknown): Promise<T> {
  try {
    return await open();
  } catch (error) {
    await cleanUp();
    throw error;
  }
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
async function openRedis(
  url: Url<'redis' | 'redis-cluster'>,
  raw: string,
  ledgerPath: string,
  observer: RoundTripObserver,
): Promise<Backend> {
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
  const client =
    url.kind === 'redis-cluster'
      ? new Cluster([...url.nodes], {
          lazyConnect: true,
          enableOfflineQueue: false,
          redisOptions: { ...url.redisOptions, ...connection },
        })
      : new Redis(url.url, {
          ...connection,
          lazyConnect: true,
          enableOfflineQueue: false,
          retryStrategy: (attempt: number) => Math.min(attempt * 100, 1_000),
        });
  const warn = warner('redis', raw);
  client.on('error', warn);
  const { prefix = 'idem:', replicas = 0 } = url.options;
  const { store, ledgerDb } = await closingOnError(
    async () => {
      const store = redisStore({ client, ...url.options, ...observer });
      await client.connect();
      await store.load();
      return { store, ledgerDb: openLedgerDb(ledgerPath) };
    },
    () => client.disconnect(),
  );
  warn.opened();
  const name = url.kind === 'redis-cluster' ? 'Redis Cluster' : 'Redis';
  return {
    store,
    ledger: new SqliteLedger(ledgerDb),
    sharedLedger: false,
    description: `${name} ${url.shown} prefix ${prefix}${replicas ? ` WAIT ${replicas}` : ''} (records), SQLite ${ledgerPath} (ledger)`,
    close: async () => {
      await store.close();
      await client.quit().catch(() => client.disconnect());
      ledgerDb.close();
    },
  };
}

/**
 * `dynamodb://host:port[?table=name&region=r]` (an endpoint: DynamoDB Local, dynalite, or AWS itself over https)
 * or `dynamodb:local[?table=name]` (an in-process dynalite that forgets everything on exit). Table default
 * `idempotency`, created at startup if missing; the ledger in the SQLite file `ledgerPath`.
 */
async function openDynamo(url: Url<'dynamodb'>, ledgerPath: string, observer: RoundTripObserver): Promise<Backend> {
  const { dynamodbStore } = await need(() => import('idem/stores/dynamodb'), '@aws-sdk/client-dynamodb', 'dynamodb:');
  const { table = 'idempotency' } = url.options;
  let client: DynamoDBClient;
  let stop: () => Promise<void>;
  let where: string;
  if (!url.client) {
    const { startLocalDynamo } = await import('./local-dynamo.js');
    const dynalite = await need(() => startLocalDynamo(), 'dynalite', 'dynamodb:local');
    client = dynalite.client;
    stop = () => dynalite.close();
    where = `in-process dynalite ${dynalite.endpoint}`;
  } else {
    const sdkModule = await need(() => import('@aws-sdk/client-dynamodb'), '@aws-sdk/client-dynamodb', 'dynamodb://');
    client = new sdkModule.DynamoDBClient({
      region: process.env.AWS_REGION ?? 'us-east-1',
      ...url.client,
      maxAttempts: 2,
      requestHandler: { connectionTimeout: STORE_TIMEOUTS.connectMs, requestTimeout: STORE_TIMEOUTS.requestMs },
    });
    const sdk = client;
    stop = async () => sdk.destroy();
    where = url.client.endpoint;
  }
  const { store, db } = await closingOnError(async () => {
    const store = dynamodbStore({ client, table, ...observer });
    await store.createTable();
    return { store, db: openLedgerDb(ledgerPath) };
  }, stop);
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
