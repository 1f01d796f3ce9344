import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyStore } from '../../core/record.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, type FastifyIdempotencyOptions } from './index.js';

const DAY = 86_400_000;
const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

interface Authed extends FastifyRequest {
  account: string;
}

/** A charges app: auth in onRequest → the plugin → routes answering in every way Fastify can. */
async function chargesApp(options: Partial<FastifyIdempotencyOptions<undefined>> = {}, store: IdempotencyStore<undefined> = memoryStore()) {
  const runs: Record<string, number> = {};
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);
  let release = (): void => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const started: Array<() => void> = [];

  const app = Fastify({ forceCloseConnections: true });
  apps.push(app);
  app.decorateRequest('account', '');
  app.addHook('onRequest', async (request) => {
    (request as Authed).account = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')?.[1] ?? 'acct_anonymous';
  });
  await app.register(idempotency<undefined>({ store, ttlMs: DAY, scope: (request) => (request as Authed).account, ...options }));

  app.post('/v1/charges', async (request, reply) => {
    const n = count('json');
    const { amount } = request.body as { amount: number };
    return reply.code(201).header('location', `/v1/charges/ch_${n}`).send({ id: `ch_${n}`, amount });
  });
  app.post('/empty', async (_request, reply) => {
    count('empty');
    return reply.code(201).send();
  });
  app.post('/no-content', async (_request, reply) => {
    count('no-content');
    return reply.code(204).send();
  });
  app.post('/stream', async (_request, reply) => {
    count('stream');
    return reply.type('text/plain').send(Readable.from(['one,', 'two,', 'three']));
  });
  app.post('/web-response', async () => {
    const n = count('web-response');
    return new Response(`{"id":"re_${n}"}`, { status: 201, headers: { 'content-type': 'application/json', location: `/v1/refunds/re_${n}` } });
  });
  app.post('/declined', async () => {
    count('declined');
    throw Object.assign(new Error('card_declined'), { statusCode: 402 });
  });
  app.post('/boom', async () => {
    count('boom');
    throw new Error('boom');
  });
  app.post('/slow', async (_request, reply) => {
    const n = count('slow');
    for (const notify of started.splice(0)) notify();
    await held;
    return reply.code(201).send({ id: `ch_${n}` });
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
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
      payload: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const handlerStarted = () => new Promise<void>((resolve) => started.push(resolve));
  return { app, store, post, runs, release, handlerStarted, record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)) };
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
  it('replays a serialized object: status, Location, content type and exact bytes, marked as replayed', async () => {
    const app = await chargesApp();
    const first = await app.post('/v1/charges', { key: 'k1' });
    const retry = await app.post('/v1/charges', { key: 'k1' });
    expect(app.runs).toEqual({ json: 1 });
    expect([first.statusCode, first.body, replayed(first)]).toEqual([
      201,
      '{"id":"ch_1","amount":50000}',
      { 'content-type': 'application/json; charset=utf-8', location: '/v1/charges/ch_1', 'idempotent-replayed': null },
    ]);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      201,
      '{"id":"ch_1","amount":50000}',
      { 'content-type': 'application/json; charset=utf-8', location: '/v1/charges/ch_1', 'idempotent-replayed': 'true' },
    ]);
    const record = await app.record('k1');
    expect([record?.status, record?.response?.status, Buffer.from(record?.response?.body ?? []).toString()]).toEqual([
      'succeeded',
      201,
      '{"id":"ch_1","amount":50000}',
    ]);
  });

  it('replays an empty reply.send() and a 204', async () => {
    const app = await chargesApp();
    for (const [path, status] of [['/empty', 201], ['/no-content', 204]] as const) {
      const first = await app.post(path, { key: `k${path}` });
      const retry = await app.post(path, { key: `k${path}` });
      expect([first.statusCode, first.body, first.headers['idempotent-replayed']]).toEqual([status, '', undefined]);
      expect([retry.statusCode, retry.body, retry.headers['idempotent-replayed']]).toEqual([status, '', 'true']);
    }
    expect(app.runs).toEqual({ empty: 1, 'no-content': 1 });
    expect((await app.record('k/no-content'))?.response).toEqual({ status: 204, headers: [], body: new Uint8Array(0) });
  });

  it('buffers a stream payload, answers it, and replays the same bytes', async () => {
    const app = await chargesApp();
    const first = await app.post('/stream', { key: 'k1' });
    const retry = await app.post('/stream', { key: 'k1' });
    expect([first.statusCode, first.body]).toEqual([200, 'one,two,three']);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      200,
      'one,two,three',
      { 'content-type': 'text/plain', location: null, 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ stream: 1 });
  });

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

  it('records a thrown error (answered 500 by Fastify) as failed and retryable; the retry runs again', async () => {
    const app = await chargesApp();
    const first = await app.post('/boom', { key: 'k1' });
    expect([first.statusCode, first.body]).toEqual([500, '{"statusCode":500,"error":"Internal Server Error","message":"boom"}']);
    const record = await app.record('k1');
    expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', true, 500]);
    const retry = await app.post('/boom', { key: 'k1' });
    expect([retry.statusCode, retry.headers['idempotent-replayed']]).toEqual([500, undefined]);
    expect(app.runs).toEqual({ boom: 2 });
  });

  it('ends the key failed and retryable when the client disconnects before the reply', async () => {
    const app = await chargesApp();
    const address = await app.app.listen({ port: 0, host: '127.0.0.1' });
    const abort = new AbortController();
    const started = app.handlerStarted();
    const attempt = fetch(`${address}/slow`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' },
      body: '{"amount":1}',
      signal: abort.signal,
    }).catch((e: unknown) => e);
    await started;
    abort.abort();
    expect(await attempt).toBeInstanceOf(Error);
    await expect.poll(async () => (await app.record('k1'))?.status).toBe('failed');
    const record = await app.record('k1');
    expect([record?.retryable, record?.response]).toEqual([true, null]);
    app.release();
    const retry = await app.post('/slow', { key: 'k1', body: { amount: 1 } });
    expect([retry.statusCode, retry.body]).toEqual([201, '{"id":"ch_2"}']);
    expect(app.runs).toEqual({ slow: 2 });
  });

  it('answers 503 when the store is down, running nothing and never hanging', async () => {
    const store = memoryStore();
    await store.close();
    const app = await chargesApp({}, store);
    const answer = problemOf(await app.post('/v1/charges', { key: 'k1' }));
    expect([answer.status, answer.type, answer.body.type]).toEqual([503, 'application/problem+json', 'urn:idem:problem:idempotency-store-unavailable']);
    expect(app.runs).toEqual({});
  });

  it('answers 503 in place of the reply when the record cannot be completed', async () => {
    const inner = memoryStore();
    const store: IdempotencyStore<undefined> = { ...inner, complete: async () => Promise.reject(new Error('connection reset')) };
    const app = await chargesApp({}, store);
    const response = await app.post('/v1/charges', { key: 'k1' });
    const answer = problemOf(response);
    expect([answer.status, answer.body.type, response.headers.location]).toEqual([503, 'urn:idem:problem:idempotency-store-unavailable', undefined]);
    expect(app.runs).toEqual({ json: 1 });
  });

  it('leaves the record untouched when it answers 409 (in flight) or 400 (reused key, invalid key)', async () => {
    const app = await chargesApp();
    const started = app.handlerStarted();
    const first = app.post('/slow', { key: 'k1' });
    await started;
    const inFlight = await app.record('k1');
    const conflict = await app.post('/slow', { key: 'k1' });
    expect([conflict.statusCode, conflict.headers['retry-after'], problemOf(conflict).body.type]).toEqual([
      409,
      '10',
      'urn:idem:problem:idempotency-key-in-use',
    ]);
    expect(await app.record('k1')).toEqual(inFlight);
    app.release();
    expect((await first).statusCode).toBe(201);

    const done = await app.record('k1');
    const reused = problemOf(await app.post('/slow', { key: 'k1', body: { amount: 1 } }));
    expect([reused.status, reused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
    const invalid = problemOf(await app.post('/slow', { key: 'two words' }));
    expect([invalid.status, invalid.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-invalid']);
    expect(await app.record('k1')).toEqual(done);
    expect((await app.store.list({ scope: 'acct_anonymous', limit: 10 })).length).toBe(1);
    expect(app.runs).toEqual({ slow: 1 });
  });

  it('costs 2 store round trips for a new key, 1 for a replay, a conflict or a mismatch', async () => {
    const app = await chargesApp();
    const trips = async (send: () => Promise<unknown>) => {
      const before = app.store.roundTrips;
      await send();
      return app.store.roundTrips - before;
    };
    const started = app.handlerStarted();
    let first: Promise<unknown> = Promise.resolve();
    const fresh = trips(() => (first = app.post('/slow', { key: 'k1' })));
    await started;
    const conflict = await trips(() => app.post('/slow', { key: 'k1' }));
    app.release();
    await first;
    const replay = await trips(() => app.post('/slow', { key: 'k1' }));
    const mismatch = await trips(() => app.post('/slow', { key: 'k1', body: { amount: 1 } }));
    // The first request's window also saw the conflicting one's single trip.
    expect({ fresh: (await fresh) - conflict, replay, conflict, mismatch }).toEqual({ fresh: 2, replay: 1, conflict: 1, mismatch: 1 });
  });

  it('lets nothing the client sends force a replay or skip the claim', async () => {
    const app = await chargesApp();
    const forged = { 'idempotent-replayed': 'true' };
    const first = await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 1, replayed: true, idempotent_replayed: true } });
    expect([first.statusCode, first.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect((await app.record('k1'))?.status).toBe('succeeded');
    const other = problemOf(await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 2 } }));
    expect([other.status, other.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
    await app.post('/v1/charges', { headers: forged });
    await app.post('/v1/charges', { headers: forged });
    expect(app.runs).toEqual({ json: 3 });
  });

  it('scopes keys by the account authenticated in onRequest', async () => {
    const app = await chargesApp();
    const alice = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_alice' } });
    const bob = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_bob' }, body: { amount: 7 } });
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

  it('refuses a body over maxBodyBytes with a 413 problem, storing nothing', async () => {
    const app = await chargesApp({ maxBodyBytes: 64 });
    const answer = problemOf(await app.post('/v1/charges', { key: 'k1', body: { amount: 1, pad: 'x'.repeat(100) } }));
    expect([answer.status, answer.body.type]).toEqual([413, 'urn:idem:problem:request-too-large']);
    expect(await app.record('k1')).toBeNull();
    expect(app.runs).toEqual({});
  });

  it('validates its options by name', () => {
    expect(() => idempotency({ store: memoryStore(), required: 'yes' as never })).toThrow('Expected `required` to be a boolean or a function, got "yes".');
    expect(() => idempotency({ store: memoryStore(), mismatchStatus: 409 as 400 })).toThrow('Expected `mismatchStatus` to be 400 or 422, got 409.');
  });
});
