/**
 * The Fastify plugin and replies that bypass onSend: a handler that hijacks after or while its client left, a
 * later answer from a handler that returned `reply` or sends behind an async onSend hook, and `callNotFound()`.
 */
import type { FastifyReply } from 'fastify';
import { describe, expect, it } from 'vitest';
import { signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { guardedApp } from './app.test-kit.js';

describe('idem/fastify: handlerTimeout and replies that bypass onSend', () => {
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
