import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { streamText } from 'hono/streaming';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { expectScopedByAccount } from '../account-scope.test-kit.js';
import { idempotency, type HonoIdempotencyOptions, type IdempotencyVariables } from './index.js';

const DAY = 86_400_000;

type AppEnv = { Variables: { account: string } & IdempotencyVariables };

/**
 * A charges app: auth middleware → per-route idempotency → handlers. What every adapter must do is checked by the
 * conformance suite (`conformance.test.ts`); these cases are Hono's own.
 */
function chargesApp(options: Partial<HonoIdempotencyOptions<undefined>> = {}) {
  const store = memoryStore();
  const runs: Record<string, number> = {};
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

  const app = new Hono<AppEnv>();
  app.use(async (c, next) => {
    c.set('account', /^Bearer (\S+)$/.exec(c.req.header('authorization') ?? '')?.[1] ?? 'acct_anonymous');
    await next();
  });
  const guard = idempotency<undefined>({
    store,
    ttlMs: DAY,
    scope: (c) => (c as unknown as { get(k: 'account'): string }).get('account'),
    ...options,
  });
  const strict = idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant', required: true });

  app.post('/v1/charges', guard, async (c) => {
    const n = count('json');
    const { amount } = await c.req.json<{ amount: number }>();
    c.header('Location', `/v1/charges/ch_${n}`);
    return c.json({ id: `ch_${n}`, amount }, 201);
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

  const post = async (
    path: string,
    { key, body = { amount: 50000, currency: 'usd' }, headers = {} }: PostOptions = {},
  ): Promise<Response> =>
    app.request(path, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(key === undefined ? {} : { 'idempotency-key': key }),
        ...headers,
      },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  return { store, post, runs, record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)) };
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
    expect([retry.status, await retry.text(), retry.headers.get('idempotent-replayed')]).toEqual([
      402,
      'card_declined',
      'true',
    ]);
    expect(app.runs).toEqual({ declined: 1 });
    const record = await app.record('k1');
    expect([record?.status, record?.retryable]).toEqual(['failed', false]);
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

  it('scopes keys by the account an auth middleware set on the context', async () => {
    const app = chargesApp();
    await expectScopedByAccount(app, (r) => r.text());
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
    expect((await app.store.get(recordPk('single-tenant', 'k1')))?.status).toBe('succeeded');
  });

  it('works after a middleware that already read the body through Hono, and fingerprints reordered JSON as equal', async () => {
    const app = chargesApp();
    const first = await app.post('/pre-read', { key: 'k1', body: '{"amount":42,"currency":"usd"}' });
    expect([first.status, await first.text()]).toEqual([201, '{"amount":42,"currency":"usd"}']);
    const retry = await app.post('/pre-read', { key: 'k1', body: '{ "currency": "usd", "amount": 42 }' });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(app.runs).toEqual({ 'pre-read': 1 });
  });
});
