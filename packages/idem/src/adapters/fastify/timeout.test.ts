/**
 * The Fastify plugin under `handlerTimeout`: a handler that ignores or honours the timeout signal, a timeout while
 * the claim is on its way, and one while the answer is being recorded. Events are ordered by signals.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { guardedApp } from './app.test-kit.js';

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
});
