/**
 * The stores the sealed-response tests run on, each with a raw view of what it holds — the response body and
 * headers as the backend keeps them, read and written behind the store's back (SQL, Redis commands, the memory
 * store's own objects) — and its clean-up: a fresh SQLite file, PostgreSQL schema, MySQL table or Redis prefix.
 */
import type { IdempotencyStore } from '../../packages/idem/src/core/record.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import * as mysqlKit from '../fixtures/mysql.js';
import * as postgresKit from '../fixtures/postgres.js';
import * as redisKit from '../fixtures/redis.js';
import { freshStore } from '../fixtures/sqlite.js';
import type { SqlBackend } from '../fixtures/sql.js';

/** What the backend holds for a record, read and written around the store. */
export interface Raw {
  /** The stored response body, as bytes. */
  body(pk: string): Promise<Uint8Array>;
  /** The stored response headers, parsed from the backend's JSON. */
  headers(pk: string): Promise<unknown>;
  /** Overwrites the stored response body. */
  setBody(pk: string, body: Uint8Array): Promise<void>;
}

export interface Opened {
  /** The plain store: the tests wrap it in `sealed()` with the keys of each step. */
  readonly store: IdempotencyStore<unknown>;
  readonly raw: Raw;
  close(): Promise<void>;
}

export interface SealBacking {
  readonly name: string;
  readonly available: boolean;
  open(): Promise<Opened>;
}

const parsed = (value: unknown): unknown =>
  typeof value === 'string' || value instanceof Uint8Array ? JSON.parse(Buffer.from(value).toString('utf8')) : value;

/** The memory store's records are the objects it holds: the raw view reads and replaces their response's body. */
const MEMORY: SealBacking = {
  name: 'memory',
  available: true,
  open: async () => {
    const store = memoryStore();
    const response = async (pk: string) => (await store.get(pk))?.response as { body: Uint8Array; headers: unknown };
    return {
      store,
      raw: {
        body: async (pk) => (await response(pk)).body.slice(),
        headers: async (pk) => (await response(pk)).headers,
        setBody: async (pk, body) => void ((await response(pk)).body = body.slice()),
      },
      close: () => store.close(),
    };
  },
};

const SQLITE: SealBacking = {
  name: 'SQLite',
  available: true,
  open: async () => {
    const store = await freshStore();
    const row = (pk: string) =>
      store.database
        .prepare('SELECT response_body AS b, response_headers AS h FROM idem_records WHERE pk = ?')
        .get(pk) as {
        b: Buffer;
        h: string;
      };
    return {
      store,
      raw: {
        body: async (pk) => new Uint8Array(row(pk).b),
        headers: async (pk) => parsed(row(pk).h),
        setBody: async (pk, body) =>
          void store.database
            .prepare('UPDATE idem_records SET response_body = ? WHERE pk = ?')
            .run(Buffer.from(body), pk),
      },
      close: () => store.close(),
    };
  },
};

/** PostgreSQL (bytea, jsonb) and MySQL (LONGBLOB) through their kits' shared SQL backend. */
function sql(name: string, available: boolean, backend: SqlBackend<unknown>): SealBacking {
  return {
    name,
    available,
    open: async () => {
      const { table, store, drop } = await backend.isolated();
      const p = (n: number) => backend.param(n);
      const row = async (pk: string) =>
        (
          await backend.rows<{ b: Uint8Array; h: unknown }>(
            `SELECT response_body AS b, response_headers AS h FROM ${table} WHERE pk = ${p(1)}`,
            [pk],
          )
        )[0] as { b: Uint8Array; h: unknown };
      return {
        store,
        raw: {
          body: async (pk) => new Uint8Array((await row(pk)).b),
          headers: async (pk) => parsed((await row(pk)).h),
          setBody: async (pk, body) =>
            void (await backend.rows(`UPDATE ${table} SET response_body = ${p(1)} WHERE pk = ${p(2)}`, [
              Buffer.from(body),
              pk,
            ])),
        },
        close: async () => {
          await store.close();
          await drop();
        },
      };
    },
  };
}

/** Redis keeps the body as base64 in the record's hash, the headers as JSON text. */
const REDIS: SealBacking = {
  name: 'Redis',
  available: redisKit.available,
  open: async () => {
    const store = await redisKit.isolated(redisKit.ioredis);
    const field = async (pk: string, name: string) =>
      (await redisKit.admin.hget(redisKit.recordKey(store, pk), name)) ?? '';
    return {
      store,
      raw: {
        body: async (pk) => new Uint8Array(Buffer.from(await field(pk, 'responseBody'), 'base64')),
        headers: async (pk) => parsed(await field(pk, 'responseHeaders')),
        setBody: async (pk, body) =>
          void (await redisKit.admin.hset(
            redisKit.recordKey(store, pk),
            'responseBody',
            Buffer.from(body).toString('base64'),
          )),
      },
      close: () => store.close(),
    };
  },
};

export const BACKINGS: readonly SealBacking[] = [
  MEMORY,
  SQLITE,
  sql('PostgreSQL', postgresKit.available, postgresKit.POSTGRES),
  sql('MySQL', mysqlKit.available, mysqlKit.MYSQL),
  REDIS,
];
