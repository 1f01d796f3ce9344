/**
 * Time in the Fastify plugin: an answer given while the handler still runs (a connection timeout's onTimeout hook)
 * and a handler that never answers (`maxHoldMs`). Executions are counted, and so are the ones running at once.
 */
import { describe, expect, it } from 'vitest';
import { countedWork, signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';
import { served } from './timed.test-kit.js';

describe('idem/fastify: an onTimeout hook answers while the handler runs', () => {
  it('the key stays held (409) until the handler settles, then ends as answered: retryable, run once at a time', async () => {
    const { app, post, record, engine } = await served({ connectionTimeout: 150 });
    const release = signal();
    const { seen, started, run } = countedWork(release.promise);
    const timedOut = signal();
    app.addHook('onTimeout', async (_request, reply) => {
      timedOut.resolve();
      await reply.code(503).send({ error: 'timed_out' });
    });
    app.post('/charges', async (request, reply) =>
      reply.code(201).send(await run(request.idempotency?.reclaimed ?? false)),
    );
    const first = post('t1');
    await Promise.all([started, timedOut.promise]);
    // The first client's connection is gone (the connection timed out); the work goes on.
    expect(await first).toBe(null);
    expect([await post('t1'), await record('t1')]).toEqual([
      { status: 409, body: expect.stringContaining('idempotency-key-in-use') as string },
      { status: 'in_progress', retryable: false, response: null },
    ]);
    release.resolve();
    await expect
      .poll(() => record('t1'), { timeout: 5_000, interval: 10 })
      .not.toMatchObject({ status: 'in_progress' });
    expect(await record('t1')).toEqual({ status: 'failed', retryable: true, response: 503 });
    const retry = await post('t1');
    expect([retry, seen, engine.activeLeases]).toEqual([
      { status: 201, body: '{"id":"ch_2"}' },
      { runs: 2, running: 0, most: 1, reclaimed: [false, true] },
      0,
    ]);
  });
});

describe('idem/fastify: a handler that never answers', () => {
  it('holds its key at most maxHoldMs: its signal aborts, the client gets 409, the key ends failed and retryable', async () => {
    const { app, post, record, engine } = await served({ leaseMs: 300, maxHoldMs: 400 });
    const { seen, started, run } = countedWork(new Promise<void>(() => {}));
    const signals: AbortSignal[] = [];
    app.post('/charges', async (request, reply) => {
      signals.push(request.idempotency?.signal as AbortSignal);
      return reply.code(201).send(await run(request.idempotency?.reclaimed ?? false));
    });
    const first = post('m1');
    await started;
    expect(await post('m1')).toEqual({
      status: 409,
      body: expect.stringContaining('idempotency-key-in-use') as string,
    });
    expect(await first).toEqual({ status: 409, body: expect.stringContaining('idempotency-lease-lost') as string });
    expect([await record('m1'), signals[0]?.aborted, engine.activeLeases]).toEqual([
      { status: 'failed', retryable: true, response: null },
      true,
      0,
    ]);
    const retry = await post('m1');
    expect([retry, seen.runs, seen.reclaimed, signals[1]?.aborted]).toEqual([
      { status: 201, body: '{"id":"ch_2"}' },
      2,
      [false, true],
      false,
    ]);
  });
});

it('takes maxHoldMs as an option, checked by name', () => {
  expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', maxHoldMs: 0 })).toThrow(/maxHoldMs/);
});
