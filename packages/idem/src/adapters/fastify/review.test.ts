/**
 * A handler that returns `reply` and answers later from a callback, behind a connection timeout whose onTimeout hook
 * answers 503 meanwhile: the handler has not settled until it answers, so no retry may run beside it. Executions
 * are counted, and so are the ones running at once.
 */
import { describe, expect, it } from 'vitest';
import { countedWork, signal } from '../../http/counted.test-kit.js';
import { served } from './timed.test-kit.js';

const inUse = { status: 409, body: expect.stringContaining('idempotency-key-in-use') as string };

describe('idem/fastify: a callback handler (`return reply`) behind an onTimeout hook that answers 503', () => {
  it.each(['sync', 'async'] as const)(
    'a %s handler holds its key (409) until its callback answers, then ends as answered; one run at a time',
    async (style) => {
      const { app, post, record, engine } = await served({ connectionTimeout: 150, leaseMs: 300 });
      const release = signal();
      const { seen, started, run } = countedWork(release.promise);
      const answered = signal();
      const timedOut = signal();
      app.addHook('onTimeout', async (_request, reply) => {
        timedOut.resolve();
        await reply.code(503).send({ error: 'timed_out' });
      });
      app.post('/charges', (request, reply) => {
        void run(request.idempotency?.reclaimed ?? false).then((charge) => {
          void reply.code(201).send(charge);
          answered.resolve();
        });
        return style === 'sync' ? reply : Promise.resolve(reply);
      });
      const first = post('c1');
      await Promise.all([started, timedOut.promise]);
      // The connection timed out: the first client is gone, and the work goes on.
      expect(await first).toBe(null);
      expect([await post('c1'), await record('c1')]).toEqual([
        inUse,
        { status: 'in_progress', retryable: false, response: null },
      ]);
      release.resolve();
      await answered.promise;
      await expect
        .poll(() => record('c1'), { timeout: 5_000, interval: 10 })
        .not.toMatchObject({ status: 'in_progress' });
      expect(await record('c1')).toEqual({ status: 'failed', retryable: true, response: 503 });
      const retry = await post('c1');
      expect([retry, seen, engine.activeLeases]).toEqual([
        { status: 201, body: '{"id":"ch_2"}' },
        { runs: 2, running: 0, most: 1, reclaimed: [false, true] },
        0,
      ]);
    },
  );
});
