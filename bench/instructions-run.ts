/**
 * @module One in-process run for the instruction counter (bench/instructions.ts): `count` requests of one kind
 * through the Web layer, on the memory store or a null store. Deterministic input (fixed keys and ids), no timers
 * left running, no network: under `valgrind --tool=callgrind` with V8 single-threaded the count repeats.
 * Usage: node bench/instructions-run.js <new|replay|mismatch|conflict> <memory|null> <count>
 *
 * With the store `express-null` (Idem's Express middleware on the null store) or `express-plain` (the same Express
 * route without Idem, no key), the requests go through a real Express 5 app on node:http over loopback, one at a
 * time from a keep-alive client in the same process: what the HTTP benchmark's new-key and no-key routes run, counted.
 * `express-redis` is Idem's middleware on the Redis store over node-redis (`fromNodeRedis`), `express-ioredis` the
 * same over ioredis, and `express-ni` @node-idempotency/core on its own Redis adapter (node-redis), wrapped as the
 * HTTP benchmark wraps it (bench/ni.ts), and `express-floor` the route with no layer, only a new key's two commands
 * (SET NX, SET XX) through ioredis: the Express + Redis comparison, on the Redis at BENCH_REDIS_URL, one request
 * at a time, so the server's replies arrive in the same order every run.
 */
import { spawn } from 'node:child_process';
import { createServer, request as httpRequest, Agent, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { idempotency as expressIdempotency } from '../packages/idem/src/adapters/express/index.js';
import { idempotency as fastifyIdempotency } from '../packages/idem/src/adapters/fastify/index.js';
import { idempotency as honoIdempotency } from '../packages/idem/src/adapters/hono/index.js';
import { idempotency } from '../packages/idem/src/http/middleware.js';
import type { IdempotencyStore } from '../packages/idem/src/core/record.js';
import { memoryStore } from '../packages/idem/src/stores/memory/index.js';
import { fromNodeRedis, redisStore, type NodeRedisClient } from '../packages/idem/src/stores/redis/index.js';
import { bridge } from './bridge.js';
import { niRoute } from './ni.js';
import { nullStore } from './null-store.js';

const [kind = 'new', storeName = 'memory', countText = '100'] = process.argv.slice(2);
const count = Number(countText);
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

let ids = 0;
if (storeName.startsWith('express-')) {
  await viaExpress(storeName.slice('express-'.length));
  process.exit(0);
}
const framework = /^(fastify|hono|web)-(.+)$/.exec(storeName);
if (framework) {
  await viaFramework(framework[1] as 'fastify' | 'hono' | 'web', framework[2] as string);
  process.exit(0);
}
const store = storeName === 'null' ? nullStore() : memoryStore();
const handle = idempotency({
  store,
  scope: 'single-tenant',
  ttlMs: 3_600_000,
  leaseMs: 60_000,
  generateId: () => `id-${++ids}`,
  onError: () => {},
})(async (request) => {
  await request.arrayBuffer();
  return new Response('{"id":"ch_0123456789ab","amount":500}', {
    status: 201,
    headers: { 'content-type': 'application/json', location: '/v1/charges/ch_0123456789ab' },
  });
});
const body = '{"amount":500,"currency":"usd","source":"tok_visa"}';
const send = (key: string, payload = body) =>
  handle(
    new Request('http://x/v1/charges', {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: payload,
    }),
  );

// Set up what the kind needs: a finished record to replay or mismatch, or one held in flight for the 409s.
if (kind === 'replay' || kind === 'mismatch') await send('hot');
let release: (() => void) | undefined;
if (kind === 'conflict') {
  const held = idempotency({ store, scope: 'single-tenant', ttlMs: 3_600_000, leaseMs: 60_000, renewEveryMs: 59_000 })(
    () => new Promise<Response>((resolve) => (release = () => resolve(new Response('x', { status: 201 })))),
  );
  void held(
    new Request('http://x/v1/charges', {
      method: 'POST',
      headers: { 'idempotency-key': 'busy', 'content-type': 'application/json' },
      body,
    }),
  );
  await new Promise((resolve) => setImmediate(resolve));
}
const expected = { new: 201, replay: 201, mismatch: 400, conflict: 409 }[kind];
for (let i = 0; i < count; i++) {
  const key = kind === 'new' ? `k${i}` : kind === 'conflict' ? 'busy' : 'hot';
  const response = await send(key, kind === 'mismatch' ? '{"amount":501}' : body);
  await response.arrayBuffer();
  if (response.status !== expected) throw new Error(`${kind}: expected ${expected}, got ${response.status}`);
}
release?.();

/** `count` requests of `kind` through Express on node:http (see the module comment). */
async function viaExpress(route: string): Promise<void> {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const charge = { id: 'ch_0123456789ab', amount: 500 };
  const answer = (_req: express.Request, res: express.Response) => {
    res.status(201).location('/v1/charges/ch_0123456789ab').json(charge);
  };
  const options = {
    scope: 'single-tenant' as const,
    ttlMs: 3_600_000,
    leaseMs: 60_000,
    generateId: () => `id-${++ids}`,
  };
  // bench/instructions.ts deletes these keys afterwards, outside the count.
  const prefix = process.env.BENCH_INSTR_PREFIX ?? `instr:${process.pid}:`;
  const cleanups: Array<() => Promise<unknown>> = [];
  if (route === 'plain') {
    app.post('/pay', express.json(), answer);
  } else if (route === 'null') {
    app.post('/pay', expressIdempotency({ ...options, store: nullStore(), onError: () => {} }), express.json(), answer);
  } else if (route === 'redis' || route === 'ioredis') {
    let client;
    if (route === 'redis') {
      const { createClient } = await import('@redis/client');
      const nodeRedis = await createClient({ url: REDIS_URL }).connect();
      cleanups.push(() => nodeRedis.quit());
      client = fromNodeRedis(nodeRedis as unknown as NodeRedisClient);
    } else {
      const { Redis } = await import('ioredis');
      const ioredis = new Redis(REDIS_URL);
      cleanups.push(() => ioredis.quit());
      client = ioredis;
    }
    const store = redisStore({ client, prefix });
    await store.load();
    app.post('/pay', expressIdempotency({ ...options, store, onError: () => {} }), express.json(), answer);
  } else if (route === 'floor') {
    // No idempotency layer: the two commands a new key's budget allows (SET NX, then SET XX), through ioredis.
    const { Redis } = await import('ioredis');
    const redis = new Redis(REDIS_URL);
    cleanups.push(() => redis.quit());
    app.post('/pay', express.json(), async (req, res) => {
      const key = `${prefix}floor:${req.get('idempotency-key') ?? ''}`;
      await redis.set(key, 'in_progress', 'PX', 60_000, 'NX');
      answer(req, res);
      await redis.set(key, 'done', 'PX', 60_000, 'XX');
    });
  } else if (route === 'ni') {
    const { Idempotency } = await import('@node-idempotency/core');
    const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
    const storage = new RedisStorageAdapter({ url: REDIS_URL });
    await storage.connect();
    cleanups.push(() => storage.disconnect());
    const ni = new Idempotency(storage, { cacheKeyPrefix: `${prefix}ni`, cacheTTLMS: 60_000 });
    app.post(
      '/pay',
      express.json(),
      niRoute(ni, () => Promise.resolve(charge)),
    );
  } else {
    throw new Error(`unknown store express-${route}`);
  }
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  await drive(server, route === 'plain', `express ${kind}`);
  for (const cleanup of cleanups) await cleanup();
}

/**
 * Sends `count` requests of `kind` to the server, one at a time from a keep-alive client, then closes it. A `plain`
 * route gets no key; a replay's record is made first.
 */
async function drive(server: Server, plain: boolean, label: string): Promise<void> {
  const { port } = server.address() as AddressInfo;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const body = '{"amount":500,"currency":"usd","source":"tok_visa"}';
  const post = (key: string | undefined) =>
    new Promise<number>((resolve, reject) => {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'content-length': String(body.length),
      };
      if (key !== undefined) headers['idempotency-key'] = key;
      const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/pay', agent, headers }, (res) => {
        res.resume();
        res.once('end', () => resolve(res.statusCode ?? 0));
      });
      req.once('error', reject);
      req.end(body);
    });
  if (!plain && kind === 'replay') await post('hot');
  const expected = kind === 'new' || kind === 'replay' ? 201 : 0;
  // BENCH_INSTR_FROM: valgrind started with instrumentation off (bench/instructions.ts STEADY); on from that request.
  const from = Number(process.env.BENCH_INSTR_FROM ?? 0);
  for (let i = 0; i < count; i++) {
    if (from > 0 && i === from) await instrumentFromHere();
    if (process.env.BENCH_INSTR_TRACE && i % 1000 === 0) console.log(`request ${i}`);
    const status = await post(plain ? undefined : kind === 'new' ? `k${i}` : 'hot');
    if (status !== expected) throw new Error(`${label}: expected ${expected}, got ${status}`);
  }
  agent.destroy();
  server.close();
}

/**
 * The same charge on Fastify 5 (Idem's plugin) or on Hono 4 / idem/http's `idempotency()(handler)` served from
 * node:http through one bridge (a Web `Request` over the message, the `Response` written back), as the HTTP
 * benchmark serves them (bench/server.ts): `plain` is the route without Idem, `null` Idem on a store that keeps
 * nothing, `ioredis` Idem on Redis through ioredis.
 */
async function viaFramework(name: 'fastify' | 'hono' | 'web', route: string): Promise<void> {
  const options = {
    scope: 'single-tenant' as const,
    ttlMs: 3_600_000,
    leaseMs: 60_000,
    generateId: () => `id-${++ids}`,
    onError: () => {},
  };
  const cleanups: Array<() => Promise<unknown>> = [];
  let store: IdempotencyStore | undefined;
  if (route === 'null') store = nullStore();
  else if (route === 'ioredis') {
    const { Redis } = await import('ioredis');
    const ioredis = new Redis(REDIS_URL);
    cleanups.push(() => ioredis.quit());
    const redis = redisStore({ client: ioredis, prefix: process.env.BENCH_INSTR_PREFIX ?? `instr:${process.pid}:` });
    await redis.load();
    store = redis;
  } else if (route !== 'plain') throw new Error(`unknown store ${name}-${route}`);
  const charge = '{"id":"ch_0123456789ab","amount":500}';
  const headers = { location: '/v1/charges/ch_0123456789ab', 'content-type': 'application/json; charset=utf-8' };
  let server: Server;
  if (name === 'fastify') {
    const { default: Fastify } = await import('fastify');
    const app = Fastify();
    if (store) await app.register(fastifyIdempotency({ ...options, store }));
    app.post('/pay', async (_request, reply) => reply.code(201).headers(headers).send(charge));
    await app.listen({ port: 0, host: '127.0.0.1' });
    server = app.server;
  } else {
    let handle: (request: Request) => Promise<Response>;
    if (name === 'hono') {
      const { Hono } = await import('hono');
      const app = new Hono();
      if (store) app.post('/pay', honoIdempotency({ ...options, store }));
      app.post('/pay', async (c) => {
        await c.req.json();
        return c.body(charge, 201, headers);
      });
      handle = async (request) => app.fetch(request);
    } else {
      const web = async (request: Request) => {
        await request.json();
        return new Response(charge, { status: 201, headers });
      };
      handle = store ? idempotency({ ...options, store })(web) : web;
    }
    server = createServer((req, res) => void bridge(handle, req, res));
    server.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
  }
  await drive(server, route === 'plain', `${name}-${route} ${kind}`);
  for (const cleanup of cleanups) await cleanup();
}

/**
 * Switches callgrind's instrumentation on for this process (`callgrind_control -i on`), once it has answered.
 * `BENCH_INSTR_TRACE=1` prints where each thousandth request starts and skips callgrind, for `--trace-gc` runs
 * without valgrind (bench/instructions.ts NODE_FLAGS).
 */
function instrumentFromHere(): Promise<void> {
  if (process.env.BENCH_INSTR_TRACE) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const control = spawn('callgrind_control', ['-i', 'on', String(process.pid)], { stdio: 'ignore' });
    control.once('error', reject);
    control.once('exit', (status) =>
      status === 0 ? resolve() : reject(new Error(`callgrind_control exited with ${status}`)),
    );
  });
}
