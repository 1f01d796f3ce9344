/**
 * Time in the Web layer: a timeout answering before the handler, a handler that never settles (`maxHoldMs`), and a
 * response body that never ends after its client went away. Executions are counted, and so are the ones at once.
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from '../core/key.js';
import { memoryStore } from '../stores/memory/index.js';
import { countedWork, signal } from './counted.test-kit.js';
import { idempotency } from './middleware.js';
import type { IdempotentHandler } from './options.js';

const DAY = 86_400_000;

function guarded(handler: IdempotentHandler<undefined>, engine: { leaseMs?: number; maxHoldMs?: number } = {}) {
  const store = memoryStore();
  const handle = idempotency({ store, ttlMs: DAY, scope: 'single-tenant', ...engine })(handler);
  const post = (key: string, signal?: AbortSignal) =>
    handle(
      new Request('http://x/v1/charges', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: '{}',
        ...(signal ? { signal } : {}),
      }),
    );
  const record = async (key: string) => {
    const kept = await store.get(recordPk('single-tenant', key));
    return kept && { status: kept.status, retryable: kept.retryable, response: kept.response?.status ?? null };
  };
  return { post, record, engine: handle.engine };
}

const answer = async (response: Response) => ({ status: response.status, body: await response.text() });
const problem = (slug: string) => ({ status: 409, body: expect.stringContaining(slug) as string });

describe('idem/http: a timeout in front of the layer', () => {
  it('answers 504 while the work goes on; the key stays held (409), then replays the work’s own 201', async () => {
    const release = signal();
    const { seen, started, run } = countedWork(release.promise);
    const { post, record } = guarded(async (_request, { reclaimed }) =>
      Response.json(await run(reclaimed), { status: 201 }),
    );
    // What a platform's request timeout does: it answers for the handler, which it cannot stop.
    const timedOut = signal<Response>();
    const first = Promise.race([post('t1'), timedOut.promise]);
    await started;
    timedOut.resolve(new Response('gateway timeout', { status: 504 }));
    expect(await answer(await first)).toEqual({ status: 504, body: 'gateway timeout' });
    expect(await answer(await post('t1'))).toEqual(problem('idempotency-key-in-use'));
    release.resolve();
    await expect.poll(() => record('t1'), { timeout: 5_000, interval: 10 }).toMatchObject({ status: 'succeeded' });
    const retry = await post('t1');
    expect([await answer(retry), retry.headers.get('idempotent-replayed'), seen]).toEqual([
      { status: 201, body: '{"id":"ch_1"}' },
      'true',
      { runs: 1, running: 0, most: 1, reclaimed: [false] },
    ]);
  });
});

describe('idem/http: a handler that never settles', () => {
  it('holds its key at most maxHoldMs: its signal aborts, the client gets 409, a retry runs the work reclaimed', async () => {
    const { seen, started, run } = countedWork(new Promise<void>(() => {}));
    const signals: AbortSignal[] = [];
    const { post, record, engine } = guarded(
      async (_request, { reclaimed, signal }) => {
        signals.push(signal);
        return Response.json(await run(reclaimed), { status: 201 });
      },
      { leaseMs: 300, maxHoldMs: 400 },
    );
    const first = post('m1');
    await started;
    expect(await answer(await post('m1'))).toEqual(problem('idempotency-key-in-use'));
    expect(await answer(await first)).toEqual(problem('idempotency-lease-lost'));
    expect([await record('m1'), signals[0]?.aborted, engine.activeLeases]).toEqual([
      { status: 'failed', retryable: true, response: null },
      true,
      0,
    ]);
    expect(await answer(await post('m1'))).toEqual({ status: 201, body: '{"id":"ch_2"}' });
    expect([seen.runs, seen.reclaimed, signals[1]?.aborted, engine.activeLeases]).toEqual([2, [false, true], false, 0]);
  });
});

describe('idem/http: a response body still streaming when its client goes away', () => {
  /** A handler answering 201 with a body whose first chunk comes at once and whose end waits for `ended`. */
  const streaming = (ended: Promise<void>, cancelled: { value: boolean }) => {
    const { seen, started, run } = countedWork(Promise.resolve());
    const handler: IdempotentHandler<undefined> = async (_request, { reclaimed }) => {
      const { id } = await run(reclaimed);
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => controller.enqueue(new TextEncoder().encode(`{"id":"${id}"`)),
        pull: async (controller) => {
          await ended;
          controller.enqueue(new TextEncoder().encode('}'));
          controller.close();
        },
        cancel: () => void (cancelled.value = true),
      });
      return new Response(seen.runs === 1 ? body : `{"id":"${id}"}`, { status: 201 });
    };
    return { seen, started, handler };
  };

  it('one that never ends is cancelled and the key abandoned within one lease; it then lapses and a retry runs', async () => {
    const cancelled = { value: false };
    const { seen, started, handler } = streaming(new Promise<void>(() => {}), cancelled);
    const { post, record, engine } = guarded(handler, { leaseMs: 300 });
    const client = new AbortController();
    const first = post('s1', client.signal);
    await started;
    client.abort();
    expect(await answer(await first)).toEqual(problem('idempotency-key-in-use'));
    expect([cancelled.value, engine.activeLeases, await record('s1')]).toEqual([
      true,
      0,
      { status: 'in_progress', retryable: false, response: null },
    ]);
    await expect.poll(async () => (await post('s1')).status, { timeout: 5_000, interval: 20 }).toBe(201);
    expect([seen.runs, seen.reclaimed, engine.activeLeases]).toEqual([2, [false, true], 0]);
  });

  it('one that ends within the lease after the client left is recorded and replayed', async () => {
    const ended = signal();
    const cancelled = { value: false };
    const { seen, started, handler } = streaming(ended.promise, cancelled);
    const { post, record } = guarded(handler, { leaseMs: 300 });
    const client = new AbortController();
    const first = post('s2', client.signal);
    await started;
    client.abort();
    ended.resolve();
    expect(await answer(await first)).toEqual({ status: 201, body: '{"id":"ch_1"}' });
    expect([await record('s2'), cancelled.value, seen.runs]).toEqual([
      { status: 'succeeded', retryable: false, response: 201 },
      false,
      1,
    ]);
  });
});
