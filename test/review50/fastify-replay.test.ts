/**
 * Review 50, Fastify's replay path: a replay is sent with `reply.send(stored bytes)` from `preHandler`, so every
 * app `onSend` hook registered before the plugin runs over bytes it has already transformed once (its output is
 * what the plugin recorded). An envelope hook wrapped the replay twice; the plugin's onSend now passes on the
 * stored bytes for a replay, so the first answer and its replay are the same bytes.
 */
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { idempotency } from 'idem/fastify';
import { memoryStore } from 'idem/stores/memory';

describe('review 50: fastify replay through an earlier onSend hook', () => {
  it('an envelope hook registered before the plugin: the replay has the first answer’s bytes', async () => {
    const app = Fastify();
    app.addHook('onSend', async (_request, reply, payload) => {
      const json = String(reply.getHeader('content-type') ?? '').startsWith('application/json');
      if (!json || !(typeof payload === 'string' || Buffer.isBuffer(payload))) return payload;
      const data: unknown = JSON.parse(String(payload));
      return JSON.stringify({ data });
    });
    await app.register(idempotency({ store: memoryStore(), scope: 'single-tenant' }));
    let runs = 0;
    app.post('/pay', async (_request, reply) => reply.code(201).send({ charge: `ch_${++runs}` }));
    try {
      const send = async () => {
        const response = await app.inject({
          method: 'POST',
          url: '/pay',
          headers: { 'idempotency-key': 'envelope-1', 'content-type': 'application/json' },
          payload: '{"amount":1}',
        });
        return [response.statusCode, response.body] as const;
      };
      const first = await send();
      const retry = await send();
      // Before the fix the retry was [201, '{"data":{"data":{"charge":"ch_1"}}}'].
      expect([first, retry, runs]).toEqual([
        [201, '{"data":{"charge":"ch_1"}}'],
        [201, '{"data":{"charge":"ch_1"}}'],
        1,
      ]);
    } finally {
      await app.close();
    }
  });
});
