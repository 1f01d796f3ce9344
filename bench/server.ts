/**
 * @module One benchmark server process. Configured by environment variables (set by `bench/run.ts`):
 *
 * - `BENCH_MODE`: `plain` (the route alone, no key), `idem` (Idem's Express middleware), `floor` (routes doing only
 *   the store's raw conditional write / point read), `ei` (express-idempotency + Redis adapter), `pt` (Powertools
 *   idempotency, CachePersistenceLayer), `ni` (@node-idempotency/core wrapped in an Express middleware).
 * - `BENCH_FRAMEWORK`: `express` (the default: every mode above), or `fastify`, `hono` (Hono on node:http) or
 *   `web` (idem/http's `(Request) => Response` on node:http) for modes `plain` and `idem`: the same route on
 *   another framework, so that Idem's overhead is measured where the framework does not cap the throughput.
 * - `BENCH_STORE`: `memory` | `sqlite` | `postgres` | `redis` (for `idem` and `floor`).
 * - `BENCH_RUN`: the run id; every Redis key and Postgres schema this process creates carries it.
 *
 * Every mode serves the same handler at `POST /pay` on the same Express app. Control endpoints under `/__` report
 * this process's CPU time (`process.cpuUsage()`), the store's round trips and the handler's executions per key.
 * The stores, with the floor's raw routes and the SQL stores' database-local ones, are bench/server-stores.ts.
 */
import express, { type Request, type Response } from 'express';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { IIdempotencyDataAdapter } from 'express-idempotency';
import type { IdempotencyStore } from 'idem';
import { idempotency } from 'idem/express';
import { bridge } from './bridge.js';
import { niRoute } from './ni.js';
import { LEASE_MS, TTL_MS, openStore as openStoreWith, type Opened, type StoreHooks } from './server-stores.js';

const MODE = process.env.BENCH_MODE ?? 'plain';
const FRAMEWORK = process.env.BENCH_FRAMEWORK ?? 'express';
const STORE = process.env.BENCH_STORE ?? 'memory';
const RUN = process.env.BENCH_RUN ?? 'local';
const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
/** Terminal records the cached route keeps in process (`cacheSize`). */
export const CACHE_SIZE = 10_000;

// ---- the handler every mode shares -------------------------------------------------------------------------------
const executions = new Map<string, number>();
let failNext = false;
let delayMs = 0;
let served = 0;

function keyOf(req: Request): string {
  return req.get('idempotency-key') ?? '';
}

/** The work: counts its executions per key, optionally throws once or waits, answers 201 with a Location. */
async function work(key: string): Promise<{ id: string; amount: number }> {
  executions.set(key, (executions.get(key) ?? 0) + 1);
  if (failNext) {
    failNext = false;
    throw new Error('the handler failed (bench: fail-next)');
  }
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  return { id: `ch_${randomUUID().slice(0, 12)}`, amount: 500 };
}

async function handler(req: Request, res: Response): Promise<void> {
  const charge = await work(keyOf(req));
  res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
}

const app = express();
app.disable('x-powered-by');
app.disable('etag');
app.use((_req, _res, next) => {
  served++;
  next();
});

let cpuStart = process.cpuUsage();
let servedAtReset = 0;
let roundTrips: () => number = () => 0;
let sweepState: { running: boolean; deleted: number; ms: number } = { running: false, deleted: 0, ms: 0 };
/** The store's seeding, settling, counting and sweeping, where it has them (bench/server-stores.ts). */
const hooks: StoreHooks = {};
const cleanups: Array<() => Promise<unknown>> = [];
const openStore = (): Promise<Opened> =>
  openStoreWith({
    store: STORE,
    run: RUN,
    pgUrl: PG_URL,
    redisUrl: REDIS_URL,
    cleanups,
    hooks,
    executions,
    keyOf,
    work,
  });

app.post('/__reset', (_req, res) => {
  cpuStart = process.cpuUsage();
  servedAtReset = served;
  res.json({ ok: true });
});
app.get('/__cpu', (_req, res) => {
  const { user, system } = process.cpuUsage(cpuStart);
  // The /__cpu request itself is counted in `served`; leave it out.
  res.json({ userUs: user, systemUs: system, requests: served - servedAtReset - 1 });
});
app.get('/__stats', (req, res) => {
  const key = typeof req.query.key === 'string' ? req.query.key : '';
  res.json({ executions: executions.get(key) ?? 0, roundTrips: roundTrips() });
});
app.post('/__fail-next', (_req, res) => {
  failNext = true;
  res.json({ ok: true });
});
app.post('/__delay', (req, res) => {
  delayMs = Number(req.query.ms ?? 0);
  res.json({ ok: true });
});
app.post('/__seed', async (req, res) => {
  const { seed } = hooks;
  if (!seed) {
    res.status(404).json({ error: 'no seeding for this store' });
    return;
  }
  const started = performance.now();
  const count = await seed(Number(req.query.count ?? 0), req.query.expired === '1');
  res.json({ count, ms: Math.round(performance.now() - started) });
});
app.post('/__settle', async (_req, res) => {
  res.json({ ms: hooks.settle ? await hooks.settle() : 0 });
});
app.get('/__count', async (_req, res) => {
  res.json({ count: hooks.countRecords ? await hooks.countRecords() : -1 });
});
app.post('/__sweep', (_req, res) => {
  const run = hooks.sweep;
  if (!run) {
    res.status(404).json({ error: 'no sweep for this store' });
    return;
  }
  sweepState = { running: true, deleted: 0, ms: 0 };
  const started = performance.now();
  void run(Date.now()).then(
    (deleted) => (sweepState = { running: false, deleted, ms: Math.round(performance.now() - started) }),
    (error: unknown) => {
      console.error(error);
      sweepState = { running: false, deleted: -1, ms: 0 };
    },
  );
  res.json({ started: true });
});
app.get('/__sweep', (_req, res) => {
  res.json(sweepState);
});

// ---- modes ---------------------------------------------------------------------------------------------------------
/** For a framework other than Express: the server it answers `/pay` on; `/__` control requests go to Express. */
let frameworkServer: (() => Promise<Server>) | undefined;

async function mount(): Promise<void> {
  if (FRAMEWORK !== 'express') {
    frameworkServer = await mountFramework();
    return;
  }
  if (MODE === 'plain') {
    app.post('/pay', express.json(), handler);
    return;
  }
  if (MODE === 'idem' || MODE === 'floor') {
    const ops = await openStore();
    const { store } = ops;
    roundTrips = () => store.roundTrips;
    cleanups.unshift(() => store.close());
    if (MODE === 'idem') {
      app.post(
        '/pay',
        idempotency({ store, scope: 'single-tenant', ttlMs: TTL_MS, leaseMs: LEASE_MS, onError: () => {} }),
        express.json(),
        handler,
      );
      // The same route with the engine's cache of terminal records: a hot replay costs no store round trip.
      const cached = idempotency({
        store,
        scope: 'single-tenant',
        ttlMs: TTL_MS,
        leaseMs: LEASE_MS,
        cacheSize: CACHE_SIZE,
        onError: () => {},
      });
      app.post('/pay-cached', cached, express.json(), handler);
      if (ops.local) app.post('/pay-local', ...ops.local);
      // The raw transaction the local route replaces, with no layer (SQL stores).
      if (ops.rawTx) app.post('/floor/tx', ...ops.rawTx);
    }
    // The floor, on the same backend and the same Express app. A new key: the raw conditional write only
    // (`write`), or the raw conditional write and the conditional terminal update around the work (`write2`: the
    // two trips Idem's budget allows). A replay: the point read, then the stored answer (`read`).
    app.post('/floor/write', express.json(), async (req, res) => {
      await ops.claim(keyOf(req));
      await handler(req, res);
    });
    app.post('/floor/write2', express.json(), async (req, res) => {
      const charge = await floorWork(ops, keyOf(req));
      res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
    });
    app.post('/floor/read', express.json(), async (req, res) => {
      await ops.read(keyOf(req));
      res.status(201).location('/v1/charges/ch_floor').json({ id: 'ch_floor', amount: 500 });
    });
    return;
  }
  if (MODE === 'ei') {
    const { idempotency: expressIdempotency, getSharedIdempotencyService } = await import('express-idempotency');
    type AdapterClass = new (options: object) => IIdempotencyDataAdapter & {
      connect(): Promise<void>;
      disconnect(): Promise<void>;
    };
    // A CommonJS module with `exports.default`: Node and tsx differ on how many `default`s wrap it.
    const loaded = (await import('express-idempotency-redis-adapter')) as unknown as {
      default: AdapterClass | { default: AdapterClass };
    };
    const Adapter = typeof loaded.default === 'function' ? loaded.default : loaded.default.default;
    const dataAdapter = new Adapter({ connectionConfig: { url: REDIS_URL }, ttl: TTL_MS / 1000 });
    await dataAdapter.connect();
    cleanups.push(() => dataAdapter.disconnect());
    // Its documented use: the handler checks isHit() and does nothing when the middleware already answered.
    app.post('/pay', express.json(), expressIdempotency({ dataAdapter }), async (req, res) => {
      if (getSharedIdempotencyService().isHit(req)) return;
      await handler(req, res);
    });
    return;
  }
  if (MODE === 'pt') {
    const { makeIdempotent, IdempotencyConfig } = await import('@aws-lambda-powertools/idempotency');
    const { CachePersistenceLayer } = await import('@aws-lambda-powertools/idempotency/cache');
    const { createClient } = await import('@redis/client');
    const client = await createClient({ url: REDIS_URL }).connect();
    cleanups.push(() => client.quit());
    const config = new IdempotencyConfig({
      eventKeyJmesPath: 'key',
      // No payloadValidationJmesPath: with it, CachePersistenceLayer drops the payload hash when it stores the
      // result (_updateRecord writes status, expiry and data only), so every replay fails validation (a 500).
      expiresAfterSeconds: TTL_MS / 1000,
    });
    // A fixed in-progress lease: Powertools takes it from the Lambda context's remaining time.
    config.registerLambdaContext({ getRemainingTimeInMillis: () => LEASE_MS });
    const persistenceStore = new CachePersistenceLayer({ client: client });
    const run = makeIdempotent(
      async (event: { key: string; body: unknown }) => {
        const charge = await work(event.key);
        return { status: 201, location: `/v1/charges/${charge.id}`, body: charge };
      },
      { persistenceStore, config, keyPrefix: `bench:${RUN}:pt` },
    );
    app.post('/pay', express.json(), async (req, res) => {
      let result: Awaited<ReturnType<typeof run>>;
      try {
        result = await run({ key: keyOf(req), body: req.body });
      } catch (error) {
        // The in-progress answer is a 409, as every other layer here answers it.
        if (error instanceof Error && error.name === 'IdempotencyAlreadyInProgressError') {
          res.status(409).json({ error: error.message });
          return;
        }
        throw error;
      }
      res.status(result.status).location(result.location).json(result.body);
    });
    return;
  }
  if (MODE === 'ni') {
    const { Idempotency } = await import('@node-idempotency/core');
    const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
    const storage = new RedisStorageAdapter({ url: REDIS_URL });
    await storage.connect();
    cleanups.push(() => storage.disconnect());
    const idem = new Idempotency(storage, { cacheKeyPrefix: `bench:${RUN}:ni`, cacheTTLMS: TTL_MS });
    // Wrapped as its NestJS interceptor does (bench/ni.ts).
    app.post('/pay', express.json(), niRoute(idem, work));
    return;
  }
  throw new Error(`unknown BENCH_MODE ${MODE}`);
}

await mount();
app.use((error: unknown, _req: Request, res: Response, _next: unknown) => {
  void _next;
  // Like Express's final handler: a status already set to 4xx/5xx by a middleware stands, anything else is a 500.
  if (!res.headersSent)
    res
      .status(res.statusCode >= 400 ? res.statusCode : 500)
      .json({ error: error instanceof Error ? error.message : String(error) });
});
app.post('/__close', async (_req, res) => {
  for (const cleanup of cleanups) await cleanup().catch((error: unknown) => console.error(error));
  res.json({ ok: true });
  setTimeout(() => process.exit(0), 50);
});

const server = frameworkServer ? await frameworkServer() : app.listen(0, '127.0.0.1');
if (!server.listening) await new Promise((resolve) => server.once('listening', resolve));
process.stdout.write(`READY ${(server.address() as AddressInfo).port}\n`);
server.keepAliveTimeout = 60_000;

// ---- other frameworks ----------------------------------------------------------------------------------------------
/** The charge every framework answers: 201, a Location, a small JSON body. */
async function charge(key: string): Promise<{ status: number; location: string; body: string }> {
  return answerFor(await work(key));
}

function answerFor(made: { id: string; amount: number }): { status: number; location: string; body: string } {
  return { status: 201, location: `/v1/charges/${made.id}`, body: JSON.stringify(made) };
}

/** The floor's new key: the store's raw conditional write, the work, then the raw conditional terminal update. */
async function floorWork(ops: Opened, key: string): Promise<{ id: string; amount: number }> {
  await ops.claim(key);
  const made = await work(key);
  await ops.update(key);
  return made;
}

/** Counts a request as Express's counter does, and sends `/__` control requests to the Express app. */
function control(req: IncomingMessage, res: ServerResponse): boolean {
  if (!req.url?.startsWith('/__')) {
    served++;
    return false;
  }
  app(req as Request, res as Response);
  return true;
}

async function mountFramework(): Promise<() => Promise<Server>> {
  const idem = MODE === 'idem';
  if (MODE !== 'plain' && MODE !== 'floor' && !idem)
    throw new Error(`BENCH_FRAMEWORK=${FRAMEWORK} serves BENCH_MODE plain, idem or floor`);
  let store: IdempotencyStore<never> | undefined;
  let opened: Opened | undefined;
  if (idem || MODE === 'floor') {
    opened = await openStore();
    store = opened.store;
    roundTrips = () => (store as IdempotencyStore<never>).roundTrips;
    cleanups.unshift(() => (store as IdempotencyStore<never>).close());
  }
  // BENCH_CACHE=1: the engine's cache of terminal records, so a hot replay costs no store round trip.
  const options = {
    store: store as IdempotencyStore<never>,
    scope: 'single-tenant' as const,
    ttlMs: TTL_MS,
    leaseMs: LEASE_MS,
    onError: () => {},
    ...(process.env.BENCH_CACHE === '1' ? { cacheSize: CACHE_SIZE } : {}),
  };
  // The floor (BENCH_MODE=floor): no layer, only the two raw commands a new key's budget allows around the same
  // work (the conditional write, then the conditional terminal update): what any layer keeping the key in that
  // store pays at least, on this framework.
  const ops = MODE === 'floor' ? opened : undefined;
  const pay = ops ? async (key: string) => answerFor(await floorWork(ops, key)) : charge;
  if (FRAMEWORK === 'fastify') {
    const { default: Fastify } = await import('fastify');
    let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
    const fastify = Fastify({
      serverFactory: (handle) => {
        handler = handle;
        return createServer((req, res) => {
          if (!control(req, res)) handle(req, res);
        });
      },
    });
    if (idem) {
      const { idempotency: fastifyIdempotency } = await import('idem/fastify');
      await fastify.register(fastifyIdempotency(options));
    }
    fastify.post('/pay', async (request, reply) => {
      const made = await pay(String(request.headers['idempotency-key'] ?? ''));
      return reply
        .code(made.status)
        .header('location', made.location)
        .header('content-type', 'application/json; charset=utf-8')
        .send(made.body);
    });
    return async () => {
      await fastify.listen({ port: 0, host: '127.0.0.1' });
      void handler;
      return fastify.server;
    };
  }
  let fetchHandler: (request: Request_) => Promise<Response_>;
  if (FRAMEWORK === 'hono') {
    const { Hono } = await import('hono');
    const hono = new Hono();
    if (idem) {
      const { idempotency: honoIdempotency } = await import('idem/hono');
      hono.post('/pay', honoIdempotency(options));
    }
    hono.post('/pay', async (c) => {
      await c.req.json();
      const made = await pay(c.req.header('idempotency-key') ?? '');
      return c.body(made.body, 201, { location: made.location, 'content-type': 'application/json; charset=utf-8' });
    });
    fetchHandler = async (request) => hono.fetch(request);
  } else if (FRAMEWORK === 'web') {
    const handle = async (request: Request_): Promise<Response_> => {
      await request.json();
      const made = await pay(request.headers.get('idempotency-key') ?? '');
      return new Response(made.body, {
        status: 201,
        headers: { location: made.location, 'content-type': 'application/json; charset=utf-8' },
      });
    };
    if (idem) {
      const { idempotency: webIdempotency } = await import('idem/http');
      fetchHandler = webIdempotency(options)(handle);
    } else {
      fetchHandler = handle;
    }
  } else {
    throw new Error(`unknown BENCH_FRAMEWORK ${FRAMEWORK}`);
  }
  const http = createServer((req, res) => {
    if (!control(req, res)) void bridge(fetchHandler, req, res);
  });
  return async () => {
    http.listen(0, '127.0.0.1');
    return http;
  };
}

type Request_ = globalThis.Request;
type Response_ = globalThis.Response;
