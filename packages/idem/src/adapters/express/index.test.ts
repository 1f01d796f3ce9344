import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { expectScopedByAccount } from '../account-scope.test-kit.js';
import { idempotency, idempotencyContext } from './index.js';

const DAY = 86_400_000;
const servers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of servers.splice(0)) await close();
});

interface Authed extends Request {
  account: string;
}

/**
 * A charges app: auth → idempotency → express.json() → routes → a custom error handler. What every adapter must
 * do is checked by the conformance suite (`conformance.test.ts`); these cases are Express's own.
 */
async function chargesApp() {
  const store = memoryStore();
  const runs: Record<string, number> = {};
  const errors: unknown[] = [];
  const count = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

  const app = express();
  app.set('env', 'production'); // finalhandler answers with the status text, not a stack trace
  app.use((req, _res, next) => {
    (req as Authed).account = /^Bearer (\S+)$/.exec(req.get('authorization') ?? '')?.[1] ?? 'acct_anonymous';
    next();
  });
  app.use(
    idempotency<undefined>({
      store,
      ttlMs: DAY,
      scope: (req) => (req as Authed).account,
      onError: (e) => errors.push(e),
    }),
  );
  app.use(express.json({ limit: '1mb' }));

  app.post('/v1/charges', (req, res) => {
    const n = count('json');
    const { amount } = req.body as { amount: number };
    res
      .status(201)
      .location(`/v1/charges/ch_${n}`)
      .json({ id: `ch_${n}`, amount });
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
  app.use((err: Error & { code?: string }, _req: Request, res: Response, next: NextFunction) => {
    if (err.code === 'card_declined') res.status(402).json({ error: { code: 'card_declined', message: err.message } });
    else next(err);
  });

  const post = await listen(app);
  return {
    store,
    post,
    runs,
    errors,
    record: (key: string, scope = 'acct_anonymous') => store.get(recordPk(scope, key)),
  };
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
  return (path: string, { key, body = { amount: 50000, currency: 'usd' }, headers = {} }: PostOptions = {}) =>
    fetch(base + path, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(key === undefined ? {} : { 'idempotency-key': key }),
        ...headers,
      },
      body: body instanceof ReadableStream || typeof body === 'string' ? body : JSON.stringify(body),
      ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
    });
}

interface PostOptions {
  key?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

const problemOf = async (response: globalThis.Response) => ({
  status: response.status,
  type: response.headers.get('content-type'),
  body: (await response.json()) as { type: string; status: number },
});

/** The headers a replay must reproduce exactly. */
const replayed = (response: globalThis.Response) =>
  Object.fromEntries(
    ['content-type', 'location', 'etag', 'idempotent-replayed'].map((h) => [h, response.headers.get(h)]),
  );

describe('idem/express', () => {
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
    const html =
      '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Error</title>\n</head>\n<body>\n<pre>Payment Required</pre>\n</body>\n</html>\n';
    expect([first.status, await first.text()]).toEqual([402, html]);
    expect([
      retry.status,
      await retry.text(),
      retry.headers.get('content-type'),
      retry.headers.get('idempotent-replayed'),
    ]).toEqual([402, html, 'text/html; charset=utf-8', 'true']);

    await app.post('/declined-json', { key: 'k2' });
    const again = await app.post('/declined-json', { key: 'k2' });
    expect([again.status, await again.text()]).toEqual([
      402,
      '{"error":{"code":"card_declined","message":"Your card was declined."}}',
    ]);
    expect(app.runs).toEqual({ declined: 1, 'declined-json': 1 });
    expect([(await app.record('k2'))?.status, (await app.record('k2'))?.retryable]).toEqual(['failed', false]);
  });

  it('scopes keys by the authenticated account', async () => {
    const app = await chargesApp();
    await expectScopedByAccount(app, (r) => r.text());
  });

  it('requires keys on a route mounted with required: true, and only there', async () => {
    const store = memoryStore();
    const runs = { strict: 0, lenient: 0 };
    const app = express();
    const handler = (name: keyof typeof runs) => (_req: Request, res: Response) => {
      runs[name]++;
      res.status(201).json({ protected: idempotencyContext(res)?.protected ?? null });
    };
    app.post(
      '/strict',
      idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant', required: true }),
      express.json(),
      handler('strict'),
    );
    app.post(
      '/lenient',
      idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant' }),
      express.json(),
      handler('lenient'),
    );
    const post = await listen(app);
    const refused = await problemOf(await post('/strict'));
    expect([refused.status, refused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-missing']);
    const keyed = await post('/strict', { key: 'k1' });
    expect([keyed.status, await keyed.text()]).toEqual([201, '{"protected":true}']);
    const keyless = await post('/lenient');
    expect([keyless.status, await keyless.text()]).toEqual([201, '{"protected":false}']);
    await post('/lenient');
    expect(runs).toEqual({ strict: 1, lenient: 2 });
    expect((await store.get(recordPk('single-tenant', 'k1')))?.status).toBe('succeeded');
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

  it('validates its options by name', () => {
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', maxBodyBytes: -1 })).toThrow(
      'Expected `maxBodyBytes` to be a positive integer, got -1.',
    );
  });
});
