import { connect, type AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyStore } from '../../core/record.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

const DAY = 86_400_000;
const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

interface Authed extends FastifyRequest {
  account: string;
}

/**
 * A charges app: auth in onRequest → the plugin → routes. What every adapter must do is checked by the
 * conformance suite (`conformance.test.ts`); these cases are Fastify's own.
 */
async function chargesApp() {
  const store = memoryStore();
  const runs: Record<string, number> = {};
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

  const app = Fastify({ forceCloseConnections: true });
  apps.push(app);
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
const problemOf = (response: Injected) => ({
  status: response.statusCode,
  type: response.headers['content-type'],
  body: response.json<{ type: string; status: number }>(),
});
const replayed = (response: Injected) =>
  Object.fromEntries(['content-type', 'location', 'idempotent-replayed'].map((h) => [h, response.headers[h] ?? null]));

describe('idem/fastify', () => {
  it('replays a Web Response returned by the handler, with its Location', async () => {
    const app = await chargesApp();
    const first = await app.post('/web-response', { key: 'k1' });
    const retry = await app.post('/web-response', { key: 'k1' });
    expect([first.statusCode, first.body, first.headers.location]).toEqual([201, '{"id":"re_1"}', '/v1/refunds/re_1']);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      201,
      '{"id":"re_1"}',
      { 'content-type': 'application/json', location: '/v1/refunds/re_1', 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ 'web-response': 1 });
  });

  it('a hijacked reply is recorded as a final 500 problem: the work never runs twice for its key', async () => {
    const app = await chargesApp();
    const first = await app.post('/hijacked', { key: 'h1' });
    expect([first.statusCode, first.body]).toEqual([201, '{"id":"ch_h1"}']);
    // The record is written after the hijacked answer went out: wait for it to leave in_progress.
    for (let i = 0; i < 200 && (await app.record('h1'))?.status === 'in_progress'; i++)
      await new Promise((resolve) => setImmediate(resolve));
    const record = await app.record('h1');
    expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', false, 500]);
    const retry = await app.post('/hijacked', { key: 'h1' });
    expect([retry.statusCode, retry.json<{ type: string }>().type, retry.headers['idempotent-replayed']]).toEqual([
      500,
      'urn:idem:problem:response-not-recorded',
      'true',
    ]);
    expect(app.runs).toEqual({ hijacked: 1 });
  });

  it("replays a final refusal written by Fastify's error handler", async () => {
    const app = await chargesApp();
    const first = await app.post('/declined', { key: 'k1' });
    const retry = await app.post('/declined', { key: 'k1' });
    const body = '{"statusCode":402,"error":"Payment Required","message":"card_declined"}';
    expect([first.statusCode, first.body]).toEqual([402, body]);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      402,
      body,
      { 'content-type': 'application/json; charset=utf-8', location: null, 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ declined: 1 });
    const record = await app.record('k1');
    expect([record?.status, record?.retryable]).toEqual(['failed', false]);
  });

  it('scopes keys by the account authenticated in onRequest', async () => {
    const app = await chargesApp();
    const alice = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_alice' } });
    const bob = await app.post('/v1/charges', {
      key: 'k1',
      headers: { authorization: 'Bearer acct_bob' },
      body: { amount: 7 },
    });
    expect([alice.body, bob.body]).toEqual(['{"id":"ch_1","amount":50000}', '{"id":"ch_2","amount":7}']);
    expect((await app.record('k1', 'acct_alice'))?.scope).toBe('acct_alice');
    expect((await app.record('k1', 'acct_bob'))?.scope).toBe('acct_bob');
    expect(app.runs).toEqual({ json: 2 });
  });

  it('requires keys on routes configured with required: true, and leaves opted-out routes alone', async () => {
    const app = await chargesApp();
    const refused = problemOf(await app.post('/required'));
    expect([refused.status, refused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-missing']);
    const keyed = await app.post('/required', { key: 'k1' });
    expect([keyed.statusCode, keyed.body]).toEqual([201, '{"protected":true}']);
    await app.post('/v1/charges');
    await app.post('/v1/charges');
    for (let i = 0; i < 2; i++) expect((await app.post('/opted-out', { key: 'k2' })).body).toBe('{"context":null}');
    expect(app.runs).toEqual({ required: 1, json: 2, 'opted-out': 2 });
    expect(await app.record('k2')).toBeNull();
  });

  it("hands the exact bytes to Fastify's parser, and fingerprints reordered JSON as equal", async () => {
    const app = await chargesApp();
    const note = 'x'.repeat(300_000);
    const first = await app.post('/v1/charges', { key: 'k1', body: { amount: 42, note } });
    expect([first.statusCode, first.body]).toEqual([201, '{"id":"ch_1","amount":42}']);
    const retry = await app.post('/v1/charges', { key: 'k1', body: `{ "note": "${note}", "amount": 42 }` });
    expect([retry.statusCode, retry.headers['idempotent-replayed']]).toEqual([201, 'true']);
    expect(app.runs).toEqual({ json: 1 });
  });

  it('validates its options by name', () => {
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', required: 'yes' as never })).toThrow(
      'Expected `required` to be a boolean or a function, got "yes".',
    );
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', mismatchStatus: 409 as 400 })).toThrow(
      'Expected `mismatchStatus` to be 400 or 422, got 409.',
    );
  });
});

/** A promise and the function that resolves it: events are ordered by these, never by sleeping. */
function signal<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** One guarded app on `store` (single tenant), and a keyed POST to it through inject. */
async function guardedApp(store: IdempotencyStore<undefined>, before?: (app: FastifyInstance) => void) {
  const app = Fastify({ forceCloseConnections: true });
  apps.push(app);
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

const TIMEOUT_BODY =
  /^\{"statusCode":503,"code":"FST_ERR_HANDLER_TIMEOUT","error":"Service Unavailable","message":"Request timed out after 50 ms on route '\/slow'"\}$/;

describe('idem/fastify: handlerTimeout and replies that bypass onSend', () => {
  it.each(['ignores', 'rejects on'])(
    'a handler that %s the timeout signal: its 503 is recorded final, and no retry runs the work beside it',
    async (mode) => {
      const { app, post, record } = await guardedApp(memoryStore());
      let runs = 0;
      const held = signal();
      const done = signal();
      app.post('/slow', { handlerTimeout: 50 }, async (request, reply) => {
        runs++;
        const aborted = new Promise<void>((resolve, reject) =>
          request.signal.addEventListener('abort', () =>
            mode === 'ignores' ? resolve() : reject(request.signal.reason as Error),
          ),
        );
        try {
          await (mode === 'ignores' ? held.promise : Promise.race([held.promise, aborted]));
        } finally {
          done.resolve();
        }
        return reply.code(201).send({ id: 'ch_slow' });
      });
      const first = await post('/slow', 't1');
      const retry = await post('/slow', 't1');
      held.resolve();
      await done.promise;
      const late = await post('/slow', 't1');
      expect([first.statusCode, first.body]).toEqual([503, expect.stringMatching(TIMEOUT_BODY)]);
      for (const again of [retry, late])
        expect([again.statusCode, again.body, again.headers['idempotent-replayed']]).toEqual([503, first.body, 'true']);
      const kept = await record('t1');
      expect([kept?.status, kept?.retryable, runs]).toEqual(['failed', false, 1]);
    },
  );

  it('a timeout while the claim is on its way frees the key: the handler never ran, and the retry runs it once', async () => {
    const inner = memoryStore();
    const claimed = signal();
    let first = true;
    const store: IdempotencyStore<undefined> = {
      ...inner,
      claim: async (request) => {
        if (first) {
          first = false;
          await claimed.promise;
        }
        return inner.claim(request);
      },
    };
    const { app, post, record } = await guardedApp(store);
    let runs = 0;
    app.post('/slow', { handlerTimeout: 50 }, async (_request, reply) => reply.code(201).send({ id: `ch_${++runs}` }));
    const answered = await post('/slow', 't2');
    claimed.resolve();
    await expect.poll(async () => (await record('t2'))?.status, { timeout: 5_000, interval: 10 }).toBe('failed');
    const retry = await post('/slow', 't2');
    expect([answered.statusCode, retry.statusCode, retry.body, runs]).toEqual([503, 201, '{"id":"ch_1"}', 1]);
  });

  it('a timeout while the answer is being recorded: the client gets the recorded answer, not the 503', async () => {
    const inner = memoryStore();
    const timedOut = signal();
    const store: IdempotencyStore<undefined> = {
      ...inner,
      complete: async (request) => {
        await timedOut.promise;
        return inner.complete(request);
      },
    };
    const { app, post, record } = await guardedApp(store);
    app.addHook('onError', async (_request, _reply, error) => {
      if ((error as { code?: string }).code === 'FST_ERR_HANDLER_TIMEOUT') timedOut.resolve();
    });
    let runs = 0;
    app.post('/slow', { handlerTimeout: 50 }, async (_request, reply) => reply.code(201).send({ id: `ch_${++runs}` }));
    const first = await post('/slow', 't3');
    const retry = await post('/slow', 't3');
    expect([first.statusCode, first.body, retry.statusCode, retry.body, runs]).toEqual([
      201,
      '{"id":"ch_1"}',
      201,
      '{"id":"ch_1"}',
      1,
    ]);
    expect((await record('t3'))?.status).toBe('succeeded');
  });

  it.each(['while it answers', 'after'])(
    'a handler that hijacks %s its client left is recorded final: never 409 for good',
    async (when) => {
      const store = memoryStore();
      const { app, post, record, abandon } = await guardedApp(store);
      let runs = 0;
      const started = signal();
      app.post('/hijacked', async (_request, reply) => {
        runs++;
        const left = new Promise((resolve) => reply.raw.once('close', resolve));
        started.resolve();
        if (when === 'after') await left;
        reply.hijack();
        reply.raw.writeHead(201, { 'content-type': 'application/json' });
        // The client goes away in the middle of the answer; the handler never ends it.
      });
      await abandon('/hijacked', 'h2', started.promise);
      await expect.poll(async () => (await record('h2'))?.status, { timeout: 5_000, interval: 10 }).toBe('failed');
      const kept = await record('h2');
      expect([kept?.retryable, kept?.response?.status]).toEqual([false, 500]);
      const retry = await post('/hijacked', 'h2');
      expect([retry.statusCode, retry.json<{ type: string }>().type, runs]).toEqual([
        500,
        'urn:idem:problem:response-not-recorded',
        1,
      ]);
    },
  );

  it.each(['returns reply', 'sends behind an async app onSend hook'])(
    'a handler that %s while its client leaves still has its later answer recorded',
    async (shape) => {
      const { app, post, record, abandon } = await guardedApp(memoryStore(), (early) => {
        if (shape !== 'returns reply')
          early.addHook('onSend', async (_request, _reply, payload) => {
            await new Promise((resolve) => setImmediate(resolve));
            return payload;
          });
      });
      let runs = 0;
      const started = signal();
      const charge = async (reply: FastifyReply) => {
        await new Promise((resolve) => reply.raw.once('close', resolve));
        // The provider answers after Fastify has settled `reply` (it does on close) and the handler has returned.
        await new Promise((resolve) => setImmediate(resolve));
        return reply.code(201).send({ id: `ch_${runs}` });
      };
      app.post('/late', async (_request, reply) => {
        runs++;
        started.resolve();
        if (shape === 'returns reply') {
          void charge(reply);
          return reply;
        }
        await charge(reply);
      });
      await abandon('/late', 'l1', started.promise);
      await expect
        .poll(async () => (await record('l1'))?.status, { timeout: 5_000, interval: 10 })
        .not.toBe('in_progress');
      const retry = await post('/late', 'l1');
      expect([(await record('l1'))?.status, retry.statusCode, retry.body, runs]).toEqual([
        'succeeded',
        201,
        '{"id":"ch_1"}',
        1,
      ]);
    },
  );

  it('reply.callNotFound() answers the 404 under the same claim: recorded, replayed, the lease ended', async () => {
    const { app, post, record, engine } = await guardedApp(memoryStore());
    let runs = 0;
    app.post('/v1/charges/:id/capture', async (_request, reply) => {
      runs++;
      return reply.callNotFound(); // no such charge
    });
    const first = await post('/v1/charges/ch_nope/capture', 'n1');
    const retry = await post('/v1/charges/ch_nope/capture', 'n1');
    const kept = await record('n1');
    expect([first.statusCode, retry.statusCode, retry.body, retry.headers['idempotent-replayed']]).toEqual([
      404,
      404,
      first.body,
      'true',
    ]);
    expect([kept?.status, kept?.retryable, runs, engine.activeLeases]).toEqual(['failed', false, 1, 0]);
  });
});

/** A request's framing header, the body's first piece, and the rest. */
type Framed = readonly [header: string, first: string, rest: string];

describe('idem/fastify: the request body over a real socket', () => {
  /**
   * The body's second half is sent only once onRequest has run, so the request is not complete when the plugin
   * reads it: it waits for the rest, fingerprints the whole body, and Fastify's parser still gets every byte.
   */
  it.each([
    ['content-length', (body: string): Framed => [`content-length: ${body.length}`, body.slice(0, 9), body.slice(9)]],
    [
      'chunked',
      (body: string): Framed => {
        const chunk = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;
        return ['transfer-encoding: chunked', chunk(body.slice(0, 9)), `${chunk(body.slice(9))}0\r\n\r\n`];
      },
    ],
  ] as const)('a %s body that arrives in two pieces is read whole, parsed whole and replayed', async (_, frame) => {
    const store = memoryStore();
    let seen = signal();
    let runs = 0;
    const { app } = await guardedApp(store, (app) => {
      app.addHook('onRequest', async () => seen.resolve());
      app.post('/echo', async (request, reply) => {
        runs++;
        return reply.code(201).send({ run: runs, got: request.body });
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const send = async (key: string, body: string) => {
      seen = signal();
      const [header, first, rest] = frame(body);
      const socket = connect(port, '127.0.0.1');
      const answer = new Promise<string>((resolve, reject) => {
        let text = '';
        socket.on('data', (chunk: Buffer) => {
          text += chunk.toString();
          if (text.includes('\r\n\r\n{') && text.endsWith('}')) resolve(text);
        });
        socket.on('error', reject);
      });
      socket.write(
        `POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\n${header}\r\n\r\n${first}`,
      );
      await seen.promise;
      socket.write(rest);
      const text = await answer;
      socket.destroy();
      return { status: Number(text.slice(9, 12)), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
    };
    const body = '{"amount":50000,"currency":"usd"}';
    const first = await send('k1', body);
    const retry = await send('k1', body);
    const other = await send('k1', '{"amount":50001,"currency":"usd"}');
    expect([first, retry, other.status, runs]).toEqual([
      { status: 201, body: '{"run":1,"got":{"amount":50000,"currency":"usd"}}' },
      { status: 201, body: '{"run":1,"got":{"amount":50000,"currency":"usd"}}' },
      400,
      1,
    ]);
  });
  it('a body whose encoding an earlier preParsing hook set is read as that text; it used to crash the process', async () => {
    const store = memoryStore();
    let runs = 0;
    const { app } = await guardedApp(store, (app) => {
      app.addHook('preParsing', async (_request, _reply, payload) => {
        payload.setEncoding('utf8');
        return payload;
      });
      app.post('/echo', async (request, reply) => {
        runs++;
        return reply.code(201).send({ run: runs, got: request.body });
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/echo`;
    const send = async (body: string) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' },
        body,
      });
      return [response.status, await response.text()];
    };
    expect([
      await send('{"name":"café"}'),
      await send('{"name":"café"}'),
      (await send('{"name":"cafe"}'))[0],
      runs,
    ]).toEqual([[201, '{"run":1,"got":{"name":"café"}}'], [201, '{"run":1,"got":{"name":"café"}}'], 400, 1]);
  });
  it('a body over the limit that is still arriving gets 413, and the next request on the connection is answered', async () => {
    const store = memoryStore();
    let runs = 0;
    const app = Fastify({ forceCloseConnections: true });
    apps.push(app);
    let seen = signal();
    app.addHook('onRequest', async () => seen.resolve());
    await app.register(idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant', maxBodyBytes: 1_000 }));
    app.post('/echo', async (_request, reply) => reply.code(201).send({ run: ++runs }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    let text = '';
    let arrived = signal();
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.endsWith('}')) arrived.resolve();
    });
    const head = (key: string, length: number) =>
      `POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\ncontent-length: ${length}\r\n\r\n`;
    const big = `{"pad":"${'x'.repeat(200_000)}"}`;
    socket.write(head('big', big.length) + big.slice(0, 500));
    await seen.promise;
    socket.write(big.slice(500, 5_000));
    await arrived.promise;
    const tooLarge = text;
    [text, arrived, seen] = ['', signal(), signal()];
    socket.write(big.slice(5_000) + head('small', 2) + '{}');
    await arrived.promise;
    socket.destroy();
    expect([
      tooLarge.slice(0, 12),
      /request-too-large/.test(tooLarge),
      text.slice(0, 12),
      text.endsWith('{"run":1}'),
    ]).toEqual(['HTTP/1.1 413', true, 'HTTP/1.1 201', true]);
  });
});
