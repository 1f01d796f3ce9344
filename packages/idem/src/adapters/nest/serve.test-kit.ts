/**
 * Serving the `idem/nest` test app (app.test-kit.ts) on Express or Fastify, over real HTTP against PostgreSQL: a
 * schema of its own with a ledger table, made before a file's cases and dropped after them. The store reaches the
 * interceptor through dependency injection, made from a pg pool that is another provider, as in a real app.
 */
import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Module, type DynamicModule, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyRecord } from '../../core/record.js';
import { postgresStore, type PostgresStore } from '../../stores/postgres/index.js';
import { POSTGRES_URL, serviceAvailable } from '../../../../../test/services.js';
import {
  ACCOUNT,
  API_KEY,
  ChargesController,
  WORK,
  Work,
  type AuthedRequest,
  type ChargeBody,
  type Platform,
  type Tx,
} from './app.test-kit.js';
import { IdempotencyModule } from './index.js';

export const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const PG_POOL = Symbol('pg pool');
const IDEM_STORE = Symbol('idem store');

type Controllers = Array<new (...args: never[]) => unknown>;
export interface StartOptions {
  readonly rawBody?: boolean;
  /** Counts Fastify's send pipeline runs per `x-ref` request header. */
  readonly sends?: Map<string, number>;
  readonly controllers?: Controllers;
}

/** The database of one test file. */
interface Database {
  readonly pool: pg.Pool;
  schema: string;
  ledgerTable: string;
}

/**
 * Makes the file's schema and ledger before its cases and drops them after; call it inside the file's `describe`.
 * `start` serves the app on a platform; `appModule` is the app's module, for a case that builds the app itself.
 */
export function useNestApps() {
  const db: Database = { pool: new pg.Pool({ connectionString: POSTGRES_URL, max: 10 }), schema: '', ledgerTable: '' };
  beforeAll(async () => {
    db.schema = `idem_nest_${randomBytes(5).toString('hex')}`;
    db.ledgerTable = `"${db.schema}".ledger`;
    const store = postgresStore({ pool: db.pool, schema: db.schema });
    await store.migrate();
    await db.pool.query(`CREATE TABLE ${db.ledgerTable} (ref text NOT NULL UNIQUE, record_id text NOT NULL)`);
  });
  afterAll(async () => {
    await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}" CASCADE`);
    await db.pool.end();
  });
  return {
    start: (platform: Platform, options: StartOptions = {}) => start(db, platform, options),
    /** Registers `cases` under `on express` and `on fastify`, with one app served per platform for all of them. */
    onEachPlatform: (cases: (served: Served) => void) =>
      describe.each(['express', 'fastify'] as const)('on %s', (platform) => {
        const served = {} as Served;
        beforeAll(async () => {
          Object.assign(served, await start(db, platform, {}));
        });
        afterAll(async () => served.close());
        cases(served);
      }),
    appModule: (work: Work, errors: unknown[], routeOptions: { controllers?: Controllers } = {}) =>
      appModule(db, work, errors, routeOptions),
  };
}

export type Served = Awaited<ReturnType<typeof start>>;

/** The store comes from a provider of the app (made from the pool, another provider), as in a real app. */
function storeModule(db: Database): DynamicModule {
  class StoreModule {}
  return {
    module: StoreModule,
    providers: [
      { provide: PG_POOL, useValue: db.pool },
      {
        provide: IDEM_STORE,
        inject: [PG_POOL],
        useFactory: async (on: pg.Pool) => {
          const store = postgresStore<Tx>({ pool: on, schema: db.schema });
          await store.migrate();
          return store;
        },
      },
    ],
    exports: [IDEM_STORE],
  };
}

function appModule(db: Database, work: Work, errors: unknown[], routeOptions: { controllers?: Controllers } = {}) {
  class AppModule {}
  Module({
    imports: [
      IdempotencyModule.forRootAsync({
        imports: [storeModule(db)],
        inject: [IDEM_STORE],
        useFactory: (store: PostgresStore<Tx>) => ({
          store,
          scope: (request: AuthedRequest) => request.account ?? '',
          onError: (error: unknown) => errors.push(error),
        }),
      }),
    ],
    controllers: routeOptions.controllers ?? [ChargesController],
    providers: [{ provide: WORK, useValue: work }],
  })(AppModule);
  return AppModule;
}

async function start(db: Database, platform: Platform, { rawBody = true, sends, controllers }: StartOptions) {
  const work = new Work(db.ledgerTable);
  const errors: unknown[] = [];
  const AppModule = appModule(db, work, errors, controllers ? { controllers } : {});
  let app: INestApplication;
  if (platform === 'express') {
    app = await NestFactory.create<NestExpressApplication>(AppModule, { rawBody, logger: false });
  } else {
    const fastify = await NestFactory.create<NestFastifyApplication>(
      AppModule,
      new FastifyAdapter({ forceCloseConnections: true }),
      {
        rawBody,
        logger: false,
      },
    );
    if (sends) {
      // How many times Fastify runs its send pipeline per request: once, whatever Idem holds meanwhile.
      fastify
        .getHttpAdapter()
        .getInstance()
        .addHook('onSend', async (request, _reply, payload) => {
          const ref = request.headers['x-ref'] as string;
          sends.set(ref, (sends.get(ref) ?? 0) + 1);
          return payload;
        });
    }
    app = fastify;
  }
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const store = app.get<PostgresStore<Tx>>(IDEM_STORE, { strict: false });
  return {
    app,
    work,
    errors,
    store,
    post: (path: string, body: ChargeBody, headers: Record<string, string> = {}, signal?: AbortSignal) =>
      post(`${url}${path}`, body, headers, signal),
    record: (key: string): Promise<IdempotencyRecord | null> => store.get(recordPk(ACCOUNT, key)),
    /** A new ref and key, one keyed POST of `amount` to `path` sent twice, and the record after both. */
    twice: async (path: string, amount: number) => {
      const ref = newRef();
      const key = randomUUID();
      const first = await post(`${url}${path}`, { ref, amount }, { 'idempotency-key': key });
      const retry = await post(`${url}${path}`, { ref, amount }, { 'idempotency-key': key });
      return { ref, first, retry, record: await store.get(recordPk(ACCOUNT, key)) };
    },
    ledger: async (ref: string) =>
      Number(
        (await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${db.ledgerTable} WHERE ref = $1`, [ref]))
          .rows[0]?.n,
      ),
    close: async () => {
      work.openAll();
      server.closeAllConnections();
      await app.close();
    },
  };
}

export const newRef = (): string => `ref_${randomUUID()}`;

async function post(url: string, body: ChargeBody, headers: Record<string, string>, signal?: AbortSignal) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(10_000)]) : AbortSignal.timeout(10_000),
  });
  const bytes = new Uint8Array(await response.arrayBuffer());
  const text = new TextDecoder().decode(bytes);
  let problem: unknown;
  if (response.headers.get('content-type') === 'application/problem+json')
    problem = (JSON.parse(text) as { type: unknown }).type;
  return { status: response.status, headers: response.headers, bytes, text, problem };
}
