/**
 * The Koa adapter's own edges: errors thrown below it (recorded as Koa answers them, or left to Koa on an unguarded
 * request), a handler that answers around Koa, a body parser mounted first, and requests no Web `Request` can carry.
 */
import { request as httpRequest } from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import { describe, expect, it } from 'vitest';
import { serveNode } from '../../testing/adapter.js';
import { memoryStore } from '../../stores/memory/index.js';
import { afterWork, listen, setup } from './app.test-kit.js';
import { idempotency } from './index.js';

describe('idem/koa: errors thrown below the middleware', () => {
  it('ctx.throw(402) is answered as Koa answers it and recorded final: the retry replays it, one run', async () => {
    const { app, guard, record, work } = setup(10_000);
    app.use(guard);
    app.use(
      afterWork(work, (ctx) =>
        ctx.throw(402, 'card declined', { headers: { 'x-decline-code': 'insufficient_funds' } }),
      ),
    );
    const send = await listen(app);
    const first = await send();
    const retry = await send();
    const stored = await record();
    expect([first, retry, stored?.status, stored?.retryable, stored?.response?.headers, work.runs]).toEqual([
      { status: 402, text: 'card declined' },
      { status: 402, text: 'card declined' },
      'failed',
      false,
      [['content-type', 'text/plain; charset=utf-8']],
      1,
    ]);
  });

  it('emits the error on the app, as Koa does with the errors it answers', async () => {
    const { app, guard } = setup(10_000);
    const emitted: unknown[] = [];
    app.on('error', (error: Error) => emitted.push(error.message));
    app.use(guard);
    app.use(() => {
      throw new Error('boom');
    });
    const send = await listen(app);
    expect([await send(), emitted]).toEqual([{ status: 500, text: 'Internal Server Error' }, ['boom']]);
  });

  it('on an unguarded request (no key) the error reaches Koa and the middleware above untouched', async () => {
    const { app, guard, work } = setup(10_000);
    app.use(async (ctx, next) => {
      try {
        await next();
      } catch (error) {
        ctx.status = (error as { status: number }).status;
        ctx.body = { caught: (error as Error).message };
      }
    });
    app.use(guard);
    app.use(afterWork(work, (ctx) => ctx.throw(404, 'no such charge')));
    const served = await serveNode(app.callback());
    const answers = [];
    for (let i = 0; i < 2; i++) {
      const response = await fetch(`${served.url}/v1/charges`, { method: 'POST', body: '{}' });
      answers.push([response.status, await response.text()]);
    }
    await served.close();
    expect([answers, work.runs, work.seen[0]?.reclaimed]).toEqual([
      [
        [404, '{"caught":"no such charge"}'],
        [404, '{"caught":"no such charge"}'],
      ],
      2,
      false,
    ]);
  });
});

describe('idem/koa: what the chain leaves on ctx is what is sent, recorded and replayed', () => {
  const BODIES: ReadonlyArray<readonly [string, Parameters<typeof afterWork>[1], string]> = [
    ['a status without a body (Koa sends its text)', (ctx) => void (ctx.status = 201), 'Created'],
    ['a Blob', (ctx) => void (ctx.body = new Blob(['{"id":"ch_1"}'], { type: 'application/json' })), '{"id":"ch_1"}'],
    ['a Web ReadableStream', (ctx) => void (ctx.body = new Response('streamed').body), 'streamed'],
    ['a Response', (ctx) => void (ctx.body = new Response('from a Response', { status: 202 })), 'from a Response'],
  ];
  for (const [what, answer, text] of BODIES) {
    it(`${what}`, async () => {
      const { app, guard, record, work } = setup(10_000);
      app.use(guard);
      app.use(afterWork(work, answer));
      const send = await listen(app);
      const first = await send();
      const retry = await send();
      expect([first.text, retry, (await record())?.status, work.runs]).toEqual([text, first, 'succeeded', 1]);
    });
  }
});

describe('idem/koa: around Koa and before it', () => {
  it('ctx.respond = false: the work ran, so a final response-not-recorded is recorded and the key never runs again', async () => {
    const { app, guard, record, work } = setup(10_000);
    app.use(guard);
    app.use(
      afterWork(work, (ctx) => {
        ctx.respond = false;
        ctx.res.statusCode = 201;
        ctx.res.end('raw');
      }),
    );
    const send = await listen(app);
    const first = await send();
    const retry = await send();
    const stored = await record();
    expect([first, retry.status, retry.text, stored?.status, stored?.retryable, work.runs]).toEqual([
      { status: 201, text: 'raw' },
      500,
      expect.stringContaining('urn:idem:problem:response-not-recorded'),
      'failed',
      false,
      1,
    ]);
  });

  it('a body parser mounted before it: 500 internal-error naming the fix, and the handler does not run', async () => {
    const errors: string[] = [];
    const store = memoryStore();
    const { app, work } = setup(10_000);
    app.use(bodyParser());
    app.use(idempotency({ store, scope: 'single-tenant', onError: (error) => errors.push((error as Error).message) }));
    app.use(afterWork(work, (ctx) => void (ctx.body = 'ran')));
    const send = await listen(app);
    const answer = await send();
    expect([answer.status, (JSON.parse(answer.text) as { type: string }).type, errors, work.runs]).toEqual([
      500,
      'urn:idem:problem:internal-error',
      ['idem/koa: the request body was already read. Mount idempotency() before bodyParser() and other body parsers.'],
      0,
    ]);
  });

  it('a method no Web Request can carry (TRACE) goes down the chain unguarded', async () => {
    const { app, guard } = setup(10_000);
    app.use(guard);
    app.use((ctx) => {
      ctx.body = `${ctx.method} ${ctx.state.idempotency === undefined ? 'unguarded' : 'guarded'}`;
    });
    const served = await serveNode(app.callback());
    const answer = await new Promise<[number, string]>((resolve, reject) => {
      const request = httpRequest(`${served.url}/v1/charges`, { method: 'TRACE' }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => resolve([response.statusCode ?? 0, Buffer.concat(chunks).toString()]));
      });
      request.on('error', reject);
      request.end();
    });
    await served.close();
    expect(answer).toEqual([200, 'TRACE unguarded']);
  });
});
