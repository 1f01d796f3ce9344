/**
 * The first answer is the replayed answer: whatever the record holds is what the first client receives, over a
 * real socket, whatever the handler does after it answered (throws, sets a reason phrase, a header Node refuses).
 */
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** An app with the plugin (`before` adds hooks ahead of it), and a keyed POST over a real socket. */
async function served(before?: (app: FastifyInstance) => void) {
  const store = memoryStore();
  const app = Fastify({ forceCloseConnections: true });
  apps.push(app);
  before?.(app);
  const plugin = idempotency<undefined>({ store, ttlMs: 86_400_000, scope: 'single-tenant' });
  await app.register(plugin);
  const listening = async () => {
    if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    return `http://127.0.0.1:${port}`;
  };
  const post = async (path: string, key: string) => {
    const response = await fetch(`${await listening()}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: '{}',
    });
    return { status: response.status, statusText: response.statusText, body: await response.text() };
  };
  const record = async (key: string) => {
    const kept = await store.get(recordPk('single-tenant', key));
    return [kept?.status, kept?.retryable, kept?.response?.status];
  };
  return { app, post, record, engine: plugin.engine };
}

/** The first client and the retry got the same 201, and the work ran once. */
function expectOneAnswer(first: { status: number; body: string }, retry: typeof first, runs: number): void {
  const answer = [201, '{"id":"ch_1"}'];
  expect([first.status, first.body, retry.status, retry.body, runs]).toEqual([...answer, ...answer, 1]);
}

/** An onSend or preSerialization hook that lets a turn of the event loop pass first, as a logger or a signer does. */
const slowHook = async (_request: unknown, _reply: unknown, payload: unknown) => {
  await new Promise((resolve) => setImmediate(resolve));
  return payload;
};

describe('idem/fastify: a handler that answers and then throws', () => {
  it.each([
    ['behind an async onSend hook registered before the plugin', 'early'],
    ['behind an async preSerialization hook', 'serialize'],
    ['with a stream payload still being read', 'stream'],
  ] as const)('%s: its answer stands, for the first client and every retry', async (_name, shape) => {
    const { app, post, record } = await served((early) => {
      if (shape === 'early') early.addHook('onSend', slowHook);
    });
    if (shape === 'serialize') app.addHook('preSerialization', slowHook);
    let runs = 0;
    app.post('/charges', async (_request, reply) => {
      runs++;
      const body = `{"id":"ch_${runs}"}`;
      reply.code(201).header('content-type', 'application/json');
      if (shape === 'serialize') void reply.send({ id: `ch_${runs}` });
      else void reply.send(shape === 'stream' ? Readable.from([body.slice(0, 5), body.slice(5)]) : body);
      throw new Error('the audit log is down');
    });
    const first = await post('/charges', 'k1');
    const retry = await post('/charges', 'k1');
    expectOneAnswer(first, retry, runs);
    expect(await record('k1')).toEqual(['succeeded', false, 201]);
  });

  it('a handler that throws before it answers: the error is the answer, recorded retryable', async () => {
    const { app, post, record } = await served();
    let runs = 0;
    app.post('/charges', async (_request, reply) => {
      if (++runs === 1) throw new Error('the processor is down');
      return reply.code(201).send({ id: `ch_${runs}` });
    });
    const first = await post('/charges', 'k2');
    expect([first.status, await record('k2')]).toEqual([500, ['failed', true, 500]]);
    const retry = await post('/charges', 'k2');
    expect([retry.status, retry.body, runs]).toEqual([201, '{"id":"ch_2"}', 2]);
  });
});

describe('idem/fastify: what goes on the wire is what the record holds', () => {
  it('a custom reason phrase is normalised for the first client, as a replay has none to give', async () => {
    const { app, post } = await served();
    app.post('/charges', async (_request, reply) => {
      reply.raw.statusMessage = 'Charged';
      return reply.code(201).send({ id: 'ch_1' });
    });
    const first = await post('/charges', 'r1');
    const retry = await post('/charges', 'r1');
    expect([first.status, first.statusText, retry.status, retry.statusText, retry.body]).toEqual([
      201,
      'Created',
      201,
      'Created',
      first.body,
    ]);
  });

  it('an onSend hook after the plugin that fails: the first client and every retry get the recorded answer', async () => {
    const { app, post, record } = await served();
    app.addHook('onSend', async () => {
      throw new Error('signer unavailable');
    });
    let runs = 0;
    app.post('/charges', async (_request, reply) => reply.code(201).send({ id: `ch_${++runs}` }));
    const first = await post('/charges', 'h1');
    const retry = await post('/charges', 'h1');
    expectOneAnswer(first, retry, runs);
    expect(await record('h1')).toEqual(['succeeded', false, 201]);
  });
});

describe('idem/fastify: a reply Node would refuse to write', () => {
  it.each([
    ['a Location with CR LF', (reply: FastifyReply) => reply.header('location', '/v1/charges/ch_1\r\nx-evil: 1')],
    ['a Link list with a newline in one value', (reply: FastifyReply) => reply.header('link', ['<a>', 'b\nc'])],
    ['a header name with a space', (reply: FastifyReply) => reply.header('x trace', 'abc')],
    ['a status Node sends but no record holds (700)', (reply: FastifyReply) => void (reply.raw.statusCode = 700)],
  ])('%s: answered and recorded as the error handler’s 500, retryable; the retry runs', async (_name, spoil) => {
    const { app, post, record, engine } = await served();
    let runs = 0;
    app.post('/charges', async (_request, reply) => {
      reply.code(201);
      if (++runs === 1) spoil(reply);
      return reply.send({ id: `ch_${runs}` });
    });
    const first = await post('/charges', 'v1');
    expect([first.status, await record('v1'), engine.activeLeases]).toEqual([500, ['failed', true, 500], 0]);
    const retry = await post('/charges', 'v1');
    expect([retry.status, retry.body, runs]).toEqual([201, '{"id":"ch_2"}', 2]);
  });

  it('a reason phrase with a newline (which made Fastify reject a promise nobody handled) is dropped', async () => {
    const { app, post, record } = await served();
    app.post('/charges', async (_request, reply) => {
      reply.raw.statusMessage = 'Charged\nx-evil: 1';
      return reply.code(201).send({ id: 'ch_1' });
    });
    const first = await post('/charges', 's1');
    const retry = await post('/charges', 's1');
    expect([first.status, first.statusText, first.body, retry.body]).toEqual([
      201,
      'Created',
      '{"id":"ch_1"}',
      first.body,
    ]);
    expect(await record('s1')).toEqual(['succeeded', false, 201]);
  });
});
