import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyStore } from '../../core/record.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, idempotencyContext, type ExpressIdempotencyOptions } from './index.js';

const DAY = 86_400_000;
const servers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of servers.splice(0)) await close();
});

interface Authed extends Request {
  account: string;
}

/** A charges app: auth → idempotency → express.json() → routes → a custom error handler. */
async function chargesApp(options: Partial<ExpressIdempotencyOptions<undefined>> = {}, store: IdempotencyStore<undefined> = memoryStore()) {
  const runs: Record<string, number> = {};
  const errors: unknown[] = [];
  let release = (): void => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const started: Array<() => void> = [];
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

  const app = express();
  app.set('env', 'production'); // finalhandler answers with the status text, not a stack trace
  app.use((req, _res, next) => {
    (req as Authed).account = /^Bearer (\S+)$/.exec(req.get('authorization') ?? '')?.[1] ?? 'acct_anonymous';
    next();
  });
  app.use(
    idempotency<undefined>({ store, ttlMs: DAY, scope: (req) => (req as Authed).account, onError: (e) => errors.push(e), ...options }),
  );
  app.use(express.json({ limit: '1mb' }));

  app.post('/v1/charges', (req, res) => {
    const n = count('json');
    const { amount } = req.body as { amount: number };
    res.status(201).location(`/v1/charges/ch_${n}`).json({ id: `ch_${n}`, amount });
  });
  app.post('/empty', (_req, res) => {
    count('empty');
    res.status(201).end();
  });
  app.post('/no-content', (_req, res) => {
    count('no-content');
    res.sendStatus(204);
  });
  app.post('/stream', async (_req, res) => {
    count('stream');
    res.status(200).type('text/plain');
    res.write('one,');
    await new Promise((r) => setTimeout(r, 5));
    res.write(Buffer.from('two,'));
    res.end('three');
  });
  app.post('/write-head', (_req, res) => {
    const n = count('write-head');
    res.writeHead(201, 'Created', { Location: `/v1/refunds/re_${n}`, 'Content-Type': 'application/json' });
    res.end(`{"id":"re_${n}"}`);
  });
  app.post('/declined', (_req, _res, next) => {
    count('declined');
    next(Object.assign(new Error('card_declined'), { status: 402 }));
  });
  app.post('/declined-json', (_req, _res, next) => {
    count('declined-json');
    next(Object.assign(new Error('Your card was declined.'), { code: 'card_declined' }));
  });
  app.post('/boom', () => {
    count('boom');
    throw new Error('boom');
  });
  app.post('/slow', async (req, res) => {
    const n = count('slow');
    for (const notify of started.splice(0)) notify();
    await held;
    if (!res.writableEnded && !req.socket.destroyed) res.status(201).json({ id: `ch_${n}` });
  });
  app.use((err: Error & { code?: string }, _req: Request, res: Response, next: NextFunction) => {
    if (err.code === 'card_declined') res.status(402).json({ error: { code: 'card_declined', message: err.message } });
    else next(err);
  });

  const post = await listen(app);
  const handlerStarted = () => new Promise<void>((resolve) => started.push(resolve));
  return { store, post, runs, errors, release, handlerStarted, record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)) };
}

/** Listens on 127.0.0.1:0 (closed after the test) and returns a JSON POST helper. */
async function listen(app: express.Express) {
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return (path: string, { key, body = { amount: 50000, currency: 'usd' }, headers = {}, signal }: PostOptions = {}) =>
    fetch(base + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
      body: body instanceof ReadableStream || typeof body === 'string' ? body : JSON.stringify(body),
      ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
      ...(signal ? { signal } : {}),
    });
}

interface PostOptions {
  key?: string;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

const problemOf = async (response: globalThis.Response) => ({
  status: response.status,
  type: response.headers.get('content-type'),
  body: (await response.json()) as { type: string; status: number },
});

/** The headers a replay must reproduce exactly. */
const replayed = (response: globalThis.Response) =>
  Object.fromEntries(['content-type', 'location', 'etag', 'idempotent-replayed'].map((h) => [h, response.headers.get(h)]));

describe('idem/express', () => {
  it('replays JSON sent with res.json: status, Location, ETag and exact bytes, marked as replayed', async () => {
    const app = await chargesApp();
    const first = await app.post('/v1/charges', { key: 'k1' });
    const firstBody = await first.text();
    const retry = await app.post('/v1/charges', { key: 'k1' });
    expect(app.runs).toEqual({ json: 1 });
    expect([first.status, firstBody]).toEqual([201, '{"id":"ch_1","amount":50000}']);
    expect([retry.status, await retry.text()]).toEqual([201, '{"id":"ch_1","amount":50000}']);
    const etag = first.headers.get('etag');
    expect(etag).toMatch(/^W\/"/);
    expect(replayed(first)).toEqual({ 'content-type': 'application/json; charset=utf-8', location: '/v1/charges/ch_1', etag, 'idempotent-replayed': null });
    expect(replayed(retry)).toEqual({ 'content-type': 'application/json; charset=utf-8', location: '/v1/charges/ch_1', etag, 'idempotent-replayed': 'true' });
    const record = await app.record('k1');
    expect([record?.status, record?.response?.status, Buffer.from(record?.response?.body ?? []).toString()]).toEqual([
      'succeeded',
      201,
      '{"id":"ch_1","amount":50000}',
    ]);
  });

  it('replays res.end() with no body, and a 204', async () => {
    const app = await chargesApp();
    for (const path of ['/empty', '/no-content']) {
      const first = await app.post(path, { key: `k${path}` });
      const retry = await app.post(path, { key: `k${path}` });
      const expected = path === '/empty' ? 201 : 204;
      expect([first.status, await first.text(), first.headers.get('idempotent-replayed')]).toEqual([expected, '', null]);
      expect([retry.status, await retry.text(), retry.headers.get('idempotent-replayed')]).toEqual([expected, '', 'true']);
    }
    expect(app.runs).toEqual({ empty: 1, 'no-content': 1 });
    // Express computes an ETag even for a 204; it is sent, stored and replayed like any allow-listed header.
    const record = await app.record('k/no-content');
    expect(record?.response).toEqual({ status: 204, headers: [['etag', 'W/"a-bAsFyilMr4Ra1hIU5PyoyFRunpI"']], body: new Uint8Array(0) });
  });

  it('streams a chunked body to the first client and replays the same bytes', async () => {
    const app = await chargesApp();
    const first = await app.post('/stream', { key: 'k1' });
    expect(first.headers.get('transfer-encoding')).toBe('chunked');
    expect(await first.text()).toBe('one,two,three');
    const retry = await app.post('/stream', { key: 'k1' });
    expect([retry.status, await retry.text(), retry.headers.get('content-type'), retry.headers.get('idempotent-replayed')]).toEqual([
      200,
      'one,two,three',
      'text/plain; charset=utf-8',
      'true',
    ]);
    expect(app.runs).toEqual({ stream: 1 });
  });

  it('captures headers passed to res.writeHead (a Location)', async () => {
    const app = await chargesApp();
    await app.post('/write-head', { key: 'k1' });
    const retry = await app.post('/write-head', { key: 'k1' });
    expect([retry.status, await retry.text(), replayed(retry)]).toEqual([
      201,
      '{"id":"re_1"}',
      { 'content-type': 'application/json', location: '/v1/refunds/re_1', etag: null, 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ 'write-head': 1 });
  });

  it("replays a final refusal written by Express's own error handler, and by a custom one", async () => {
    const app = await chargesApp();
    const first = await app.post('/declined', { key: 'k1' });
    const retry = await app.post('/declined', { key: 'k1' });
    const html = '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Error</title>\n</head>\n<body>\n<pre>Payment Required</pre>\n</body>\n</html>\n';
    expect([first.status, await first.text()]).toEqual([402, html]);
    expect([retry.status, await retry.text(), retry.headers.get('content-type'), retry.headers.get('idempotent-replayed')]).toEqual([
      402,
      html,
      'text/html; charset=utf-8',
      'true',
    ]);

    await app.post('/declined-json', { key: 'k2' });
    const again = await app.post('/declined-json', { key: 'k2' });
    expect([again.status, await again.text()]).toEqual([402, '{"error":{"code":"card_declined","message":"Your card was declined."}}']);
    expect(app.runs).toEqual({ declined: 1, 'declined-json': 1 });
    expect([(await app.record('k2'))?.status, (await app.record('k2'))?.retryable]).toEqual(['failed', false]);
  });

  it('records a thrown error (answered 500 by Express) as failed and retryable; the retry runs again', async () => {
    const app = await chargesApp();
    const first = await app.post('/boom', { key: 'k1' });
    expect([first.status, await first.text()]).toEqual([500, expect.stringContaining('<pre>Internal Server Error</pre>')]);
    const record = await app.record('k1');
    expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', true, 500]);
    const retry = await app.post('/boom', { key: 'k1' });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([500, null]);
    expect(app.runs).toEqual({ boom: 2 });
  });

  it('ends the key failed and retryable when the client disconnects before the response is complete', async () => {
    const app = await chargesApp();
    const abort = new AbortController();
    const started = app.handlerStarted();
    const attempt = app.post('/slow', { key: 'k1', signal: abort.signal }).catch((e: unknown) => e);
    await started;
    abort.abort();
    expect(await attempt).toBeInstanceOf(Error);
    await expect.poll(async () => (await app.record('k1'))?.status).toBe('failed');
    const record = await app.record('k1');
    expect([record?.retryable, record?.response]).toEqual([true, null]);
    app.release();
    const retry = await app.post('/slow', { key: 'k1' });
    expect([retry.status, await retry.text()]).toEqual([201, '{"id":"ch_2"}']);
    expect(app.runs).toEqual({ slow: 2 });
  });

  it('answers 503 when the store is down, running nothing and never hanging', async () => {
    const store = memoryStore();
    await store.close();
    const app = await chargesApp({}, store);
    const answer = await problemOf(await app.post('/v1/charges', { key: 'k1' }));
    expect([answer.status, answer.type, answer.body.type]).toEqual([503, 'application/problem+json', 'urn:idem:problem:idempotency-store-unavailable']);
    expect(app.runs).toEqual({});
  });

  it('answers 503 in place of the response when the record cannot be completed (nothing was sent yet)', async () => {
    const inner = memoryStore();
    const store: IdempotencyStore<undefined> = { ...inner, complete: async () => Promise.reject(new Error('connection reset')) };
    const app = await chargesApp({}, store);
    const answer = await problemOf(await app.post('/v1/charges', { key: 'k1' }));
    expect([answer.status, answer.body.type]).toEqual([503, 'urn:idem:problem:idempotency-store-unavailable']);
    expect(app.runs).toEqual({ json: 1 });
    expect((await inner.get(recordPk('acct_anonymous', 'k1')))?.status).toBe('in_progress');
  });

  it('leaves the record untouched when it answers 409 (in flight) or 400 (reused key, invalid key)', async () => {
    const app = await chargesApp();
    const started = app.handlerStarted();
    const first = app.post('/slow', { key: 'k1' });
    await started;
    const inFlight = await app.record('k1');
    const conflict = await app.post('/slow', { key: 'k1' });
    expect([conflict.status, conflict.headers.get('retry-after'), (await problemOf(conflict)).body.type]).toEqual([
      409,
      '10',
      'urn:idem:problem:idempotency-key-in-use',
    ]);
    expect(await app.record('k1')).toEqual(inFlight);
    app.release();
    expect((await first).status).toBe(201);

    const done = await app.record('k1');
    const reused = await problemOf(await app.post('/slow', { key: 'k1', body: { amount: 1 } }));
    expect([reused.status, reused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
    const invalid = await problemOf(await app.post('/slow', { key: 'two words' }));
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
    const forged = { 'idempotent-replayed': 'true', 'x-idempotent-replayed': 'true' };
    const first = await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 1, replayed: true, idempotent_replayed: true } });
    expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect((await app.record('k1'))?.status).toBe('succeeded');
    // The same forged header on another payload is a reused key, not a replay.
    const other = await problemOf(await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 2 } }));
    expect([other.status, other.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
    // Without a key, the header changes nothing either: the work runs every time.
    await app.post('/v1/charges', { headers: forged });
    await app.post('/v1/charges', { headers: forged });
    expect(app.runs).toEqual({ json: 3 });
  });

  it('scopes keys by the authenticated account', async () => {
    const app = await chargesApp();
    const alice = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_alice' } });
    const bob = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_bob' }, body: { amount: 7 } });
    expect([await alice.text(), await bob.text()]).toEqual(['{"id":"ch_1","amount":50000}', '{"id":"ch_2","amount":7}']);
    expect((await app.record('k1', 'acct_alice'))?.scope).toBe('acct_alice');
    expect((await app.record('k1', 'acct_bob'))?.scope).toBe('acct_bob');
    expect(app.runs).toEqual({ json: 2 });
  });

  it('requires keys on a route mounted with required: true, and only there', async () => {
    const store = memoryStore();
    const runs = { strict: 0, lenient: 0 };
    const app = express();
    const handler = (name: keyof typeof runs) => (_req: Request, res: Response) => {
      runs[name]++;
      res.status(201).json({ protected: idempotencyContext(res)?.protected ?? null });
    };
    app.post('/strict', idempotency<undefined>({ store, ttlMs: DAY, required: true }), express.json(), handler('strict'));
    app.post('/lenient', idempotency<undefined>({ store, ttlMs: DAY }), express.json(), handler('lenient'));
    const post = await listen(app);
    const refused = await problemOf(await post('/strict'));
    expect([refused.status, refused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-missing']);
    const keyed = await post('/strict', { key: 'k1' });
    expect([keyed.status, await keyed.text()]).toEqual([201, '{"protected":true}']);
    const keyless = await post('/lenient');
    expect([keyless.status, await keyless.text()]).toEqual([201, '{"protected":false}']);
    await post('/lenient');
    expect(runs).toEqual({ strict: 1, lenient: 2 });
    expect((await store.get(recordPk('global', 'k1')))?.status).toBe('succeeded');
  });

  it('hands the exact body to express.json() mounted after it, and fingerprints reordered JSON as equal', async () => {
    const app = await chargesApp();
    const big = { amount: 42, note: 'x'.repeat(300_000) };
    const first = await app.post('/v1/charges', { key: 'k1', body: big });
    expect([first.status, await first.text()]).toEqual([201, '{"id":"ch_1","amount":42}']);
    const reordered = `{ "note": "${big.note}", "amount": 42 }`;
    const retry = await app.post('/v1/charges', { key: 'k1', body: reordered });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    // A chunked request body (no Content-Length) is read and handed on the same way.
    const encoded = new TextEncoder().encode('{"amount":7,"currency":"usd"}');
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoded.subarray(0, 10));
        controller.enqueue(encoded.subarray(10));
        controller.close();
      },
    });
    const streamed = await app.post('/v1/charges', { key: 'k2', body: chunked });
    expect([streamed.status, await streamed.text()]).toEqual([201, '{"id":"ch_2","amount":7}']);
    const again = await app.post('/v1/charges', { key: 'k2', body: { currency: 'usd', amount: 7 } });
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(app.runs).toEqual({ json: 2 });
  });

  it('refuses a body over maxBodyBytes with 413, storing nothing', async () => {
    const app = await chargesApp({ maxBodyBytes: 64 });
    const answer = await problemOf(await app.post('/v1/charges', { key: 'k1', body: { amount: 1, pad: 'x'.repeat(100) } }));
    expect([answer.status, answer.body.type]).toEqual([413, 'urn:idem:problem:request-too-large']);
    expect(await app.record('k1')).toBeNull();
    expect(app.runs).toEqual({});
  });

  it('fails closed (500, reported) when a body parser ran before it', async () => {
    const store = memoryStore();
    const errors: unknown[] = [];
    let runs = 0;
    const app = express();
    app.use(express.json());
    app.use(idempotency<undefined>({ store, ttlMs: DAY, onError: (e) => errors.push(e) }));
    app.post('/x', (_req, res) => {
      runs++;
      res.json({});
    });
    const response = await (await listen(app))('/x', { key: 'k1', body: { a: 1 } });
    expect([response.status, runs]).toEqual([500, 0]);
    expect(errors.map((e) => (e as Error).message)).toEqual([
      'idem/express: the request body was already read. Mount idempotency() before express.json() and other body parsers.',
    ]);
  });

  it('validates its options by name', () => {
    expect(() => idempotency({ store: memoryStore(), maxBodyBytes: -1 })).toThrow('Expected `maxBodyBytes` to be a positive integer, got -1.');
  });
});
