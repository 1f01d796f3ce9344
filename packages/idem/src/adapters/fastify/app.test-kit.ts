/**
 * @module For the Fastify plugin's own tests (not part of the library): a charges app behind the plugin, a guarded
 * app on a given store with a keyed POST through inject and one over a real socket, and what the cases read of an
 * answer. Every app made here is closed after each case.
 */
import { connect, type AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { afterEach } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyStore } from '../../core/record.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

export const DAY = 86_400_000;
const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** Closes `app` after the case. */
export function closedAfter(app: FastifyInstance): FastifyInstance {
  apps.push(app);
  return app;
}

interface Authed extends FastifyRequest {
  account: string;
}

/**
 * A charges app: auth in onRequest → the plugin → routes. What every adapter must do is checked by the
 * conformance suite (`conformance.test.ts`); these cases are Fastify's own.
 */
export async function chargesApp() {
  const store = memoryStore();
  const runs: Record<string, number> = {};
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

  const app = closedAfter(Fastify({ forceCloseConnections: true }));
  app.decorateRequest('account', '');
  app.addHook('onRequest', async (request) => {
    (request as Authed).account = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')?.[1] ?? 'acct_anonymous';
  });
  await app.register(idempotency<undefined>({ store, ttlMs: DAY, scope: (request) => (request as Authed).account }));

  app.post('/v1/charges', async (request, reply) => {
    const n = count('json');
    const { amount } = request.body as { amount: number };
    return reply
      .code(201)
      .header('location', `/v1/charges/ch_${n}`)
      .send({ id: `ch_${n}`, amount });
  });
  app.post('/web-response', async () => {
    const n = count('web-response');
    return new Response(`{"id":"re_${n}"}`, {
      status: 201,
      headers: { 'content-type': 'application/json', location: `/v1/refunds/re_${n}` },
    });
  });
  app.post('/hijacked', async (_request, reply) => {
    const n = count('hijacked');
    reply.hijack();
    reply.raw.writeHead(201, { 'content-type': 'application/json' });
    reply.raw.end(`{"id":"ch_h${n}"}`);
  });
  app.post('/declined', async () => {
    count('declined');
    throw Object.assign(new Error('card_declined'), { statusCode: 402 });
  });
  app.post('/required', { config: { idempotency: { required: true } } }, async (request, reply) => {
    count('required');
    return reply.code(201).send({ protected: request.idempotency?.protected ?? null });
  });
  app.post('/opted-out', { config: { idempotency: false } }, async (request, reply) => {
    count('opted-out');
    return reply.code(201).send({ context: request.idempotency });
  });

  const post = (url: string, { key, body = { amount: 50000, currency: 'usd' }, headers = {} }: PostOptions = {}) =>
    app.inject({
      method: 'POST',
      url,
      headers: {
        'content-type': 'application/json',
        ...(key === undefined ? {} : { 'idempotency-key': key }),
        ...headers,
      },
      payload: typeof body === 'string' ? body : JSON.stringify(body),
    });
  return { app, store, post, runs, record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)) };
}

interface PostOptions {
  key?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

type Injected = Awaited<ReturnType<FastifyInstance['inject']>>;
export const problemOf = (response: Injected) => ({
  status: response.statusCode,
  type: response.headers['content-type'],
  body: response.json<{ type: string; status: number }>(),
});
export const replayed = (response: Injected) =>
  Object.fromEntries(['content-type', 'location', 'idempotent-replayed'].map((h) => [h, response.headers[h] ?? null]));

/** One guarded app on `store` (single tenant), and a keyed POST to it through inject. */
export async function guardedApp(store: IdempotencyStore<undefined>, before?: (app: FastifyInstance) => void) {
  const app = closedAfter(Fastify({ forceCloseConnections: true }));
  before?.(app);
  const plugin = idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant' });
  await app.register(plugin);
  const post = (url: string, key: string) =>
    app.inject({
      method: 'POST',
      url,
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      payload: '{}',
    });
  const record = (key: string) => store.get(recordPk('single-tenant', key));
  /** Sends a keyed POST over a real socket, then leaves once the handler has `started`. */
  const abandon = async (url: string, key: string, started: Promise<void>) => {
    await app.listen({ port: 0, host: '127.0.0.1' });
    const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write(
      `POST ${url} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\ncontent-length: 2\r\n\r\n{}`,
    );
    await started;
    socket.destroy();
  };
  return { app, post, record, abandon, engine: plugin.engine };
}
