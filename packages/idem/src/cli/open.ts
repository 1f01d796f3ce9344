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

/** A URL or driver problem the operator fixes: the CLI prints the message and exits 2. */
export class StoreUrlError extends Error {
  override readonly name = 'StoreUrlError';
}

/** The forms `--store` accepts, for error messages and `--help`. */
export const ACCEPTED_STORES =
  'sqlite:<path>, memory:, postgres://user@host:5432/db[?schema=name], mysql://user@host:3306/db[?table=name], ' +
  'redis://host:6379[/db][?prefix=name:], redis-cluster://host:port[,host:port…][?prefix=name:], ' +
  'dynamodb://host:port[?table=name&region=r]';

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
 * Imports an optional peer, or throws a {@link StoreUrlError} saying which package to install.
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
      throw new StoreUrlError(`${forUrl} stores need the "${pkg}" package: install it (npm install ${pkg}).`);
    }
    throw error;
  }
}

function parseUrl(raw: string, params: readonly string[]): { url: URL; options: Map<string, string>; shown: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new StoreUrlError(`--store is not a valid URL: "${raw}". Accepted: ${ACCEPTED_STORES}.`);
  }
  const options = new Map<string, string>();
  for (const name of params) {
    const value = url.searchParams.get(name);
    if (value !== null) options.set(name, value);
    url.searchParams.delete(name);
  }
  const shown = new URL(url);
  if (shown.password) shown.password = '***';
  return { url, options, shown: shown.toString() };
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
  if (raw === 'memory:') {
    const { memoryStore } = await import('../stores/memory/index.js');
    const store = memoryStore();
    return { store, description: 'memory (a fresh, empty store)', close: () => store.close() };
  }
  if (raw.startsWith('sqlite:')) {
    const path = raw.slice('sqlite:'.length);
    if (!path) throw new StoreUrlError('sqlite:<path> needs a path, e.g. sqlite:./.idem/idem.db');
    const { default: Database } = await driver<{ default: typeof BetterSqlite3 }>('better-sqlite3', 'sqlite:');
    if (create && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    const database = new Database(path, { fileMustExist: !create && path !== ':memory:' });
    const { sqliteStore } = await import('../stores/sqlite/index.js');
    const store = sqliteStore({ database, closeDatabase: true });
    return { store, description: `SQLite ${path}`, close: () => store.close() };
  }
  if (/^postgres(ql)?:\/\//.test(raw)) {
    const { url, options, shown } = parseUrl(raw, ['schema', 'table']);
    const { default: pg } = await driver<{ default: typeof Pg }>('pg', 'postgres://');
    const pool = new pg.Pool({
      connectionString: url.toString(),
      connectionTimeoutMillis: CONNECT_MS,
      query_timeout: REQUEST_MS,
      max: 2,
    });
    pool.on('error', () => undefined);
    const { postgresStore } = await import('../stores/postgres/index.js');
    const schema = options.get('schema');
    const table = options.get('table');
    let store;
    try {
      store = postgresStore({ pool, endPoolOnClose: true, ...(schema ? { schema } : {}), ...(table ? { table } : {}) });
    } catch (error) {
      await pool.end();
      throw new StoreUrlError((error as Error).message);
    }
    return { store, description: `PostgreSQL ${shown} schema ${schema ?? 'public'}`, close: () => store.close() };
  }
  if (raw.startsWith('mysql://')) {
    const { url, options, shown } = parseUrl(raw, ['table']);
    if (url.pathname.length <= 1)
      throw new StoreUrlError(`mysql://user@host:3306/db needs a database, got "${shown}".`);
    const { default: mysql } = await driver<{ default: typeof Mysql }>('mysql2/promise', 'mysql://');
    // The store's claim is one query of two statements.
    const pool = mysql.createPool({
      uri: url.toString(),
      multipleStatements: true,
      connectTimeout: CONNECT_MS,
      connectionLimit: 2,
    });
    const { mysqlStore } = await import('../stores/mysql/index.js');
    const table = options.get('table');
    let store;
    try {
      store = mysqlStore({ pool, endPoolOnClose: true, ...(table ? { table } : {}) });
    } catch (error) {
      await pool.end();
      throw new StoreUrlError((error as Error).message);
    }
    return { store, description: `MySQL ${shown}`, close: () => store.close() };
  }
  if (/^(rediss?|redis-cluster):\/\//.test(raw)) {
    // redis-cluster://host:port[,host:port…]: the seed nodes of a Redis Cluster (as the demo reads them).
    const seeds = /^redis-cluster:\/\/([^/?#]*)/.exec(raw)?.[1];
    const nodes = seeds?.split(',').map((seed) => ({
      host: seed.slice(0, seed.lastIndexOf(':')),
      port: Number(seed.slice(seed.lastIndexOf(':') + 1)),
    }));
    if (nodes?.some(({ host, port }) => !host || !Number.isInteger(port) || port <= 0)) {
      throw new StoreUrlError(`redis-cluster://host:port[,host:port…] needs host:port pairs, got "${raw}".`);
    }
    const { url, options, shown } = parseUrl(
      seeds === undefined ? raw : `redis://cluster${raw.slice('redis-cluster://'.length + seeds.length)}`,
      ['prefix', 'replicas', 'replicaTimeoutMs'],
    );
    const { Cluster, Redis } = await driver<typeof IORedis>('ioredis', 'redis://');
    const connection = { connectTimeout: CONNECT_MS, commandTimeout: REQUEST_MS, maxRetriesPerRequest: 1 };
    const client = nodes
      ? new Cluster(nodes, { lazyConnect: true, redisOptions: connection })
      : new Redis(url.toString(), { ...connection, lazyConnect: true });
    client.on('error', () => undefined);
    const { redisStore } = await import('../stores/redis/index.js');
    const prefix = options.get('prefix') ?? 'idem:';
    let store;
    try {
      store = redisStore({ client, prefix });
    } catch (error) {
      client.disconnect();
      throw new StoreUrlError((error as Error).message);
    }
    try {
      await client.connect();
      await store.load();
    } catch (error) {
      client.disconnect();
      throw error;
    }
    return {
      store,
      description: `${nodes ? `Redis Cluster ${seeds}` : `Redis ${shown}`} prefix ${prefix}`,
      close: async () => {
        await store.close();
        await client.quit().catch(() => client.disconnect());
      },
    };
  }
  if (raw.startsWith('dynamodb:')) {
    if (!raw.startsWith('dynamodb://')) {
      throw new StoreUrlError(`DynamoDB stores are dynamodb://host:port[?table=name&region=r], got "${raw}".`);
    }
    const { url, options } = parseUrl(raw, ['table', 'region']);
    if (!url.hostname) throw new StoreUrlError(`dynamodb://host:port needs a host, got "${raw}".`);
    const sdk = await driver<typeof DynamoDB>('@aws-sdk/client-dynamodb', 'dynamodb://');
    const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
    const endpoint = `${loopback ? 'http' : 'https'}://${url.host}`;
    const client = new sdk.DynamoDBClient({
      endpoint,
      region: options.get('region') ?? process.env.AWS_REGION ?? 'us-east-1',
      maxAttempts: 2,
      requestHandler: { connectionTimeout: CONNECT_MS, requestTimeout: REQUEST_MS },
      ...(loopback ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
    });
    const { dynamodbStore } = await import('../stores/dynamodb/index.js');
    const table = options.get('table') ?? 'idempotency';
    const store = dynamodbStore({ client, table });
    return {
      store,
      description: `DynamoDB ${endpoint} table ${table}`,
      close: async () => {
        await store.close();
        client.destroy();
      },
    };
  }
  throw new StoreUrlError(`--store must be one of ${ACCEPTED_STORES}; got "${raw}".`);
}
