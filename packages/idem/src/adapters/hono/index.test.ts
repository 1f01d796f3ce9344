import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { streamText } from 'hono/streaming';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyStore } from '../../core/record.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, type HonoIdempotencyOptions, type IdempotencyVariables } from './index.js';

const DAY = 86_400_000;

type AppEnv = { Variables: { account: string } & IdempotencyVariables };

/** A charges app: auth middleware → per-route idempotency → handlers answering in every way Hono can. */
function chargesApp(options: Partial<HonoIdempotencyOptions<undefined>> = {}, store: IdempotencyStore<undefined> = memoryStore()) {
  const runs: Record<string, number> = {};
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);
  let release = (): void => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const started: Array<() => void> = [];

  const app = new Hono<AppEnv>();
  app.use(async (c, next) => {
    c.set('account', /^Bearer (\S+)$/.exec(c.req.header('authorization') ?? '')?.[1] ?? 'acct_anonymous');
    await next();
  });
  const guard = idempotency<undefined>({ store, ttlMs: DAY, scope: (c) => (c as unknown as { get(k: 'account'): string }).get('account'), ...options });
  const strict = idempotency<undefined>({ store, ttlMs: DAY, required: true });

  app.post('/v1/charges', guard, async (c) => {
    const n = count('json');
    const { amount } = await c.req.json<{ amount: number }>();
    c.header('Location', `/v1/charges/ch_${n}`);
    return c.json({ id: `ch_${n}`, amount }, 201);
  });
  app.post('/empty', guard, (c) => {
    count('empty');
    return c.body(null, 201);
  });
  app.post('/no-content', guard, (c) => {
    count('no-content');
    return c.body(null, 204);
  });
  app.post('/stream', guard, (c) => {
    count('stream');
    return streamText(c, async (stream) => {
      await stream.write('one,');
      await stream.sleep(5);
      await stream.write('two,');
      await stream.write('three');
    });
  });
  app.post('/broken-stream', guard, (c) => {
    count('broken-stream');
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('partial'));
        controller.error(new Error('the stream broke'));
      },
    });
    return c.body(body, 200);
  });
  app.post('/declined', guard, () => {
    count('declined');
    throw new HTTPException(402, { message: 'card_declined' });
  });
  app.post('/boom', guard, () => {
    count('boom');
    throw new Error('boom');
  });
  app.post('/slow', guard, async (c) => {
    const n = count('slow');
    for (const notify of started.splice(0)) notify();
    await held;
    return c.json({ id: `ch_${n}` }, 201);
  });
  app.post('/required', strict, (c) => {
    count('required');
    return c.json({ protected: c.get('idempotency').protected }, 201);
  });
  app.post('/lenient', guard, (c) => {
    count('lenient');
    return c.json({ protected: c.get('idempotency').protected }, 201);
  });
  app.post(
    '/pre-read',
    async (c, next) => {
      await c.req.json(); // e.g. a validator or logger that read the body through Hono before the middleware
      await next();
    },
    guard,
    async (c) => {
      count('pre-read');
      return c.json(await c.req.json(), 201);
    },
  );

  const post = async (path: string, { key, body = { amount: 50000, currency: 'usd' }, headers = {} }: PostOptions = {}): Promise<Response> =>
    app.request(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const handlerStarted = () => new Promise<void>((resolve) => started.push(resolve));
  return { store, post, runs, release, handlerStarted, record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)) };
}

interface PostOptions {
  key?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

const problemOf = async (response: Response) => ({
  status: response.status,
  type: response.headers.get('content-type'),
  body: (await response.json()) as { type: string; status: number },
});
const replayed = (response: Response) =>
  Object.fromEntries(['content-type', 'location', 'idempotent-replayed'].map((h) => [h, response.headers.get(h)]));

describe('idem/hono', () => {
  it('replays c.json with a Location: status, headers and exact bytes, marked as replayed', async () => {
    const app = chargesApp();
    const first = await app.post('/v1/charges', { key: 'k1' });
    const retry = await app.post('/v1/charges', { key: 'k1' });
    expect(app.runs).toEqual({ json: 1 });
    expect([first.status, await first.text(), replayed(first)]).toEqual([
      201,
      '{"id":"ch_1","amount":50000}',
      { 'content-type': 'application/json', location: '/v1/charges/ch_1', 'idempotent-replayed': null },
    ]);
    expect([retry.status, await retry.text(), replayed(retry)]).toEqual([
      201,
      '{"id":"ch_1","amount":50000}',
      { 'content-type': 'application/json', location: '/v1/charges/ch_1', 'idempotent-replayed': 'true' },
    ]);
    expect((await app.record('k1'))?.status).toBe('succeeded');
  });

  it('replays an empty body and a 204', async () => {
    const app = chargesApp();
    for (const [path, status] of [['/empty', 201], ['/no-content', 204]] as const) {
      const first = await app.post(path, { key: `k${path}` });
      const retry = await app.post(path, { key: `k${path}` });
      expect([first.status, await first.text(), first.headers.get('idempotent-replayed')]).toEqual([status, '', null]);
      expect([retry.status, await retry.text(), retry.headers.get('idempotent-replayed')]).toEqual([status, '', 'true']);
    }
    expect(app.runs).toEqual({ empty: 1, 'no-content': 1 });
    expect((await app.record('k/no-content'))?.response).toEqual({ status: 204, headers: [], body: new Uint8Array(0) });
  });

  it('replays a streamed body (streamText) byte for byte', async () => {
    const app = chargesApp();
    const first = await app.post('/stream', { key: 'k1' });
    const retry = await app.post('/stream', { key: 'k1' });
    expect([first.status, await first.text()]).toEqual([200, 'one,two,three']);
    expect([retry.status, await retry.text(), replayed(retry)]).toEqual([
      200,
      'one,two,three',
      { 'content-type': 'text/plain; charset=UTF-8', location: null, 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ stream: 1 });
  });

  it("replays a final refusal produced by Hono's error handler (HTTPException 402)", async () => {
    const app = chargesApp();
    const first = await app.post('/declined', { key: 'k1' });
    const retry = await app.post('/declined', { key: 'k1' });
    expect([first.status, await first.text()]).toEqual([402, 'card_declined']);
    expect([retry.status, await retry.text(), retry.headers.get('idempotent-replayed')]).toEqual([402, 'card_declined', 'true']);
    expect(app.runs).toEqual({ declined: 1 });
    const record = await app.record('k1');
    expect([record?.status, record?.retryable]).toEqual(['failed', false]);
  });

  it('records a thrown error (answered 500 by Hono) as failed and retryable; the retry runs again', async () => {
    const app = chargesApp();
    const first = await app.post('/boom', { key: 'k1' });
    expect([first.status, await first.text()]).toEqual([500, 'Internal Server Error']);
    const record = await app.record('k1');
    expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', true, 500]);
    const retry = await app.post('/boom', { key: 'k1' });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([500, null]);
    expect(app.runs).toEqual({ boom: 2 });
  });

  it('ends the key failed and retryable when the response body breaks mid-stream', async () => {
    const errors: unknown[] = [];
    const app = chargesApp({ onError: (e) => errors.push(e) });
    const answer = await problemOf(await app.post('/broken-stream', { key: 'k1' }));
    expect([answer.status, answer.body.type]).toEqual([500, 'urn:idem:problem:internal-error']);
    expect(errors).toEqual([new Error('the stream broke')]);
    const record = await app.record('k1');
    expect([record?.status, record?.retryable, record?.response]).toEqual(['failed', true, null]);
    await app.post('/broken-stream', { key: 'k1' });
    expect(app.runs).toEqual({ 'broken-stream': 2 });
  });

  it('answers 503 when the store is down, running nothing and never hanging', async () => {
    const store = memoryStore();
    await store.close();
    const app = chargesApp({}, store);
    const answer = await problemOf(await app.post('/v1/charges', { key: 'k1' }));
    expect([answer.status, answer.type, answer.body.type]).toEqual([503, 'application/problem+json', 'urn:idem:problem:idempotency-store-unavailable']);
    expect(app.runs).toEqual({});
  });

  it('answers 503 in place of the response when the record cannot be completed, without its headers', async () => {
    const inner = memoryStore();
    const store: IdempotencyStore<undefined> = { ...inner, complete: async () => Promise.reject(new Error('connection reset')) };
    const app = chargesApp({}, store);
    const response = await app.post('/v1/charges', { key: 'k1' });
    expect(response.headers.get('location')).toBeNull();
    const answer = await problemOf(response);
    expect([answer.status, answer.body.type]).toEqual([503, 'urn:idem:problem:idempotency-store-unavailable']);
    expect(app.runs).toEqual({ json: 1 });
  });

  it('leaves the record untouched when it answers 409 (in flight) or 400 (reused key, invalid key)', async () => {
    const app = chargesApp();
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
    const app = chargesApp();
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
    const app = chargesApp();
    const forged = { 'idempotent-replayed': 'true' };
    const first = await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 1, replayed: true, idempotent_replayed: true } });
    expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect((await app.record('k1'))?.status).toBe('succeeded');
    const other = await problemOf(await app.post('/v1/charges', { key: 'k1', headers: forged, body: { amount: 2 } }));
    expect([other.status, other.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
    await app.post('/v1/charges', { headers: forged });
    await app.post('/v1/charges', { headers: forged });
    expect(app.runs).toEqual({ json: 3 });
  });

  it('scopes keys by the account an auth middleware set on the context', async () => {
    const app = chargesApp();
    const alice = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_alice' } });
    const bob = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_bob' }, body: { amount: 7 } });
    expect([await alice.text(), await bob.text()]).toEqual(['{"id":"ch_1","amount":50000}', '{"id":"ch_2","amount":7}']);
    expect((await app.record('k1', 'acct_alice'))?.scope).toBe('acct_alice');
    expect((await app.record('k1', 'acct_bob'))?.scope).toBe('acct_bob');
    expect(app.runs).toEqual({ json: 2 });
  });

  it('requires keys on the route whose middleware says required: true, and only there', async () => {
    const app = chargesApp();
    const refused = await problemOf(await app.post('/required'));
    expect([refused.status, refused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-missing']);
    const keyed = await app.post('/required', { key: 'k1' });
    expect([keyed.status, await keyed.text()]).toEqual([201, '{"protected":true}']);
    const keyless = await app.post('/lenient');
    expect([keyless.status, await keyless.text()]).toEqual([201, '{"protected":false}']);
    await app.post('/lenient');
    expect(app.runs).toEqual({ required: 1, lenient: 2 });
    expect((await app.store.get(recordPk('global', 'k1')))?.status).toBe('succeeded');
  });

  it('works after a middleware that already read the body through Hono, and fingerprints reordered JSON as equal', async () => {
    const app = chargesApp();
    const first = await app.post('/pre-read', { key: 'k1', body: '{"amount":42,"currency":"usd"}' });
    expect([first.status, await first.text()]).toEqual([201, '{"amount":42,"currency":"usd"}']);
    const retry = await app.post('/pre-read', { key: 'k1', body: '{ "currency": "usd", "amount": 42 }' });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(app.runs).toEqual({ 'pre-read': 1 });
  });

  it('refuses a body over maxBodyBytes with 413, storing nothing', async () => {
    const app = chargesApp({ maxBodyBytes: 64 });
    const answer = await problemOf(await app.post('/v1/charges', { key: 'k1', body: { amount: 1, pad: 'x'.repeat(100) } }));
    expect([answer.status, answer.body.type]).toEqual([413, 'urn:idem:problem:request-too-large']);
    expect(await app.record('k1')).toBeNull();
    expect(app.runs).toEqual({});
  });
});
