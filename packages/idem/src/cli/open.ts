/**
 * @module Opens the store a URL names, for `idem migrate` and `idem records`. Drivers are optional peers of the
 * package, loaded by dynamic import only for the URL given: a missing one is a one-line "install X" message.
 *
 * Opening runs no DDL: only `migrate` creates Idem's own table (and nothing else), so `records list|show|sweep`
 * work under a role with SELECT, INSERT, UPDATE and DELETE on that table alone.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type * as DynamoDB from '@aws-sdk/client-dynamodb';
import type BetterSqlite3 from 'better-sqlite3';
import type * as IORedis from 'ioredis';
import type Mysql from 'mysql2/promise';
import type Pg from 'pg';
import type { IdempotencyStore } from '../core/record.js';
import { parseStoreUrl } from '../core/store-url.js';
import { MissingDriverError } from './args.js';

/** A store URL the CLI cannot open as asked (dynamodb:local, a DynamoDB URL without a host): exit 2. */
export class StoreUrlError extends Error {
  override readonly name = 'StoreUrlError';
}

/** A store opened from its URL, with `migrate` (SQL) or `createTable` (DynamoDB) when the store has one. */
export interface OpenedStore {
  readonly store: IdempotencyStore<unknown> & {
    migrate?: () => Promise<void>;
    createTable?: () => Promise<{ readonly created: boolean; readonly timeToLive: string }>;
  };
  readonly description: string;
  close(): Promise<void>;
}

/** Client timeouts: an unreachable store fails the command within seconds rather than hanging it. */
const CONNECT_MS = 5_000;
const REQUEST_MS = 10_000;

/**
 * Imports an optional peer, or throws a {@link MissingDriverError} saying which package to install (exit 3).
 *
 * @example
 * const { default: pg } = await driver<{ default: typeof Pg }>('pg', 'postgres://')
 */
async function driver<T>(name: string, forUrl: string): Promise<T> {
  try {
    return (await import(name)) as T;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      const pkg = name.split('/')[0] as string;
      throw new MissingDriverError(`${forUrl} stores need the "${pkg}" package: install it (npm install ${pkg}).`);
    }
    throw error;
  }
}

/**
 * Opens the store named by `url`. `create`: a SQLite file may be created (migrate); otherwise it must exist.
 *
 * @example
 * const { store, close } = await openStore('sqlite:./.idem/idem.db')
 */
export async function openStore(
  raw: string,
  { create = false }: { readonly create?: boolean } = {},
): Promise<OpenedStore> {
  const url = parseStoreUrl(raw, '--store');
  const { shown } = url;
  switch (url.kind) {
    case 'memory': {
      const { memoryStore } = await import('../stores/memory/index.js');
      const store = memoryStore();
      return { store, description: 'memory (a fresh, empty store)', close: () => store.close() };
    }
    case 'sqlite': {
      const { path } = url;
      const { default: Database } = await driver<{ default: typeof BetterSqlite3 }>('better-sqlite3', 'sqlite:');
      if (create && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
      const database = new Database(path, { fileMustExist: !create && path !== ':memory:' });
      const { sqliteStore } = await import('../stores/sqlite/index.js');
      const store = sqliteStore({ database, closeDatabase: true });
      return { store, description: `SQLite ${path}`, close: () => store.close() };
    }
    case 'postgres': {
      const { default: pg } = await driver<{ default: typeof Pg }>('pg', 'postgres://');
      const pool = new pg.Pool({
        connectionString: url.connectionString,
        connectionTimeoutMillis: CONNECT_MS,
        query_timeout: REQUEST_MS,
        max: 2,
      });
      pool.on('error', () => undefined);
      const { postgresStore } = await import('../stores/postgres/index.js');
      const store = await closingOnError(
        () => postgresStore({ pool, endPoolOnClose: true, ...url.options }),
        () => pool.end(),
      );
      const schema = url.options.schema ?? 'public';
      return { store, description: `PostgreSQL ${shown} schema ${schema}`, close: () => store.close() };
    }
    case 'mysql': {
      const { default: mysql } = await driver<{ default: typeof Mysql }>('mysql2/promise', 'mysql://');
      // The store's claim is one query of two statements.
      const pool = mysql.createPool({
        uri: url.uri,
        multipleStatements: true,
        connectTimeout: CONNECT_MS,
        connectionLimit: 2,
      });
      const { mysqlStore } = await import('../stores/mysql/index.js');
      const store = await closingOnError(
        () => mysqlStore({ pool, endPoolOnClose: true, ...url.options }),
        () => pool.end(),
      );
      return { store, description: `MySQL ${shown}`, close: () => store.close() };
    }
    case 'redis':
    case 'redis-cluster': {
      const { Cluster, Redis } = await driver<typeof IORedis>('ioredis', 'redis://');
      const connection = { connectTimeout: CONNECT_MS, commandTimeout: REQUEST_MS, maxRetriesPerRequest: 1 };
      const client =
        url.kind === 'redis-cluster'
          ? new Cluster([...url.nodes], { lazyConnect: true, redisOptions: { ...url.redisOptions, ...connection } })
          : new Redis(url.url, { ...connection, lazyConnect: true });
      client.on('error', () => undefined);
      const { redisStore } = await import('../stores/redis/index.js');
      const { prefix = 'idem:' } = url.options;
      const store = await closingOnError(
        async () => {
          const store = redisStore({ client, prefix });
          await client.connect();
          await store.load();
          return store;
        },
        async () => client.disconnect(),
      );
      return {
        store,
        description: `${url.kind === 'redis-cluster' ? 'Redis Cluster' : 'Redis'} ${shown} prefix ${prefix}`,
        close: async () => {
          await store.close();
          await client.quit().catch(() => client.disconnect());
        },
      };
    }
    case 'dynamodb': {
      if (!url.client) {
        throw new StoreUrlError(`DynamoDB stores are dynamodb://host:port[?table=name&region=r], got "${shown}".`);
      }
      const sdk = await driver<typeof DynamoDB>('@aws-sdk/client-dynamodb', 'dynamodb://');
      const client = new sdk.DynamoDBClient({
        region: process.env.AWS_REGION ?? 'us-east-1',
        ...url.client,
        maxAttempts: 2,
        requestHandler: { connectionTimeout: CONNECT_MS, requestTimeout: REQUEST_MS },
      });
      const { dynamodbStore } = await import('../stores/dynamodb/index.js');
      const { table = 'idempotency' } = url.options;
      const store = dynamodbStore({ client, table });
      return {
        store,
        description: `DynamoDB ${url.client.endpoint} table ${table}`,
        close: async () => {
          await store.close();
          client.destroy();
        },
      };
    }
  }
}

/** Runs `open`; if it throws, runs `cleanUp` (the pool or client it was given) and rethrows. */
async function closingOnError<T>(open: () => T | Promise<T>, cleanUp: () => Promise<unknown>): Promise<T> {
  try {
    return await open();
  } catch (error) {
    await cleanUp();
    throw error;
  }
}
