/**
 * Koa when the answer and the handler part ways: a timeout that answers while the handler runs (mounted after the
 * guard, or before it), a handler that never answers, and a client that leaves while the body streams. Each case
 * counts the executions of the work and how many ran at once.
 */
import { describe, expect, it } from 'vitest';
import { lineThenWait, until } from '../../../../../test/work.js';
import { afterWork, created, listen, setup, timeout } from './app.test-kit.js';

/**
 * A timeout of 50 ms mounted after the guard or before it, the work held at its gate: the first request (answered
 * by the timeout), three more while the work runs, and the key's record then.
 */
async function timedOutWhileRunning(where: 'after' | 'before', leaseMs: number) {
  const { app, guard, record, work } = setup(leaseMs);
  if (where === 'before') app.use(timeout(50));
  app.use(guard);
  if (where === 'after') app.use(timeout(50));
  app.use(afterWork(work, created));
  const send = await listen(app);
  work.hold();
  const first = await send();
  const during = [await send(), await send(), await send()].map((answer) => answer.status);
  return { send, record, work, guard, held: [first, during, (await record())?.status] };
}

const HELD = [{ status: 503, text: 'Service Unavailable' }, [409, 409, 409], 'in_progress'];

describe('idem/koa: a timeout answers 503 while the handler runs', () => {
  it('mounted after the guard: the key is abandoned, not freed: 409 while the work runs, then one run at a time', async () => {
    const { send, work, guard, held } = await timedOutWhileRunning('after', 300);
    const ended = work.next('end');
    work.open();
    await ended;
    // Once the abandoned lease lapses (one leaseMs), the next attempt takes over with the same id.
    const retry = await until(send, (answer) => answer.status !== 409);
    expect([held, retry]).toEqual([HELD, { status: 201, text: '{"run":2}' }]);
    expect([work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([2, 1, 0, work.takenOver()]);
  });

  it('mounted before the guard: 409 while the handler runs; the 503 Koa sent is recorded retryable once it settles', async () => {
    const { send, record, work, guard, held } = await timedOutWhileRunning('before', 10_000);
    work.open();
    // Koa's onerror set the status it sent (503) on ctx: the handler's 201 never went out, and is not recorded.
    const failed = await until(record, (stored) => stored?.status !== 'in_progress');
    const retry = await send();
    expect([held, failed?.status, failed?.retryable, failed?.response?.status, retry]).toEqual([
      HELD,
      'failed',
      true,
      503,
      { status: 201, text: '{"run":2}' },
    ]);
    expect([work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([2, 1, 0, work.takenOver()]);
  });
});

describe('idem/koa: a handler that never answers', () => {
  it('holds its key at most maxHoldMs: the client then gets 409, and the key ends failed and retryable', async () => {
    const { app, guard, record, work } = setup(300, 400);
    const signals: AbortSignal[] = [];
    app.use(guard);
    app.use(async (ctx) => {
      work.start(ctx.state.idempotency);
      signals.push(ctx.state.idempotency.signal);
      await new Promise(() => {});
    });
    const send = await listen(app);
    const answer = await send();
    const kept = await record();
    expect([answer.status, answer.text, kept?.status, kept?.retryable, signals[0]?.aborted, work.runs]).toEqual([
      409,
      expect.stringContaining('idempotency-lease-lost'),
      'failed',
      true,
      true,
      1,
    ]);
    expect(guard.engine.activeLeases).toBe(0);
  });
});

describe('idem/koa: a client that leaves while the body streams', () => {
  it('Koa destroys the stream: nothing was answered, the key ends failed and retryable, the retry runs, never beside it', async () => {
    const { app, guard, record, work } = setup(10_000);
    app.use(guard);
    app.use((ctx) => {
      const n = work.start(ctx.state.idempotency);
      const body = lineThenWait(work, n);
      body.once('close', () => work.end());
      ctx.body = body;
    });
    const send = await listen(app);
    // The client leaves once the first line is out of the handler's stream.
    const gone = new AbortController();
    void work.next('streaming').then(() => gone.abort());
    expect(await send('k1', gone.signal).catch((error: unknown) => error)).toBeInstanceOf(Error);
    const failed = await until(record, (stored) => stored?.status !== 'in_progress');
    expect([failed?.status, failed?.retryable, work.running, guard.engine.activeLeases]).toEqual([
      'failed',
      true,
      0,
      0,
    ]);
    const retry = await send();
    expect([retry, work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([
      { status: 200, text: 'line 1\n' },
      2,
      1,
      0,
      work.takenOver(),
    ]);
  });
});
