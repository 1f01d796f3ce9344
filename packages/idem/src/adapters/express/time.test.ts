/**
 * Express when the answer and the handler part ways (issue 27): an answer sent before the handler has finished —
 * connect-timeout's 503, an error handler reached by `next(err)` while the handler goes on — and a client that
 * leaves mid-stream. Each case counts the executions of the work and how many ran at once.
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { describe, expect, it } from 'vitest';
import { eventsUntilGone, lineThenWait, until, Work } from '../../../../../test/work.js';
import { idempotencyContext } from './index.js';
import { answeredEarly, listen, setup as guarded, timeout } from './time.test-kit.js';

const setup = (leaseMs: number, maxHoldMs?: number) => ({ ...guarded(leaseMs, maxHoldMs), work: new Work() });

type Handler = (req: Request, res: Response, next: NextFunction) => Promise<void>;

/** How each case answers before its handler has finished; the handler waits at the work's gate meanwhile. */
const EARLY: ReadonlyArray<readonly [string, (work: Work) => { before: RequestHandler; handler: Handler }]> = [
  [
    "connect-timeout's 503",
    (work) => ({
      before: timeout(100),
      handler: async (req, res) => {
        const n = await work.run(idempotencyContext(res));
        if (!(req as Request & { timedout?: boolean }).timedout) res.status(201).json({ run: n });
      },
    }),
  ],
  [
    'an error handler reached by next(err) while the handler goes on',
    (work) => ({
      before: (_req, _res, next) => next(),
      handler: async (_req, res, next) => {
        const running = work.run(idempotencyContext(res));
        if (work.runs === 1) next(Object.assign(new Error('upstream busy'), { status: 503 }));
        const n = await running;
        if (n > 1) res.status(201).json({ run: n });
      },
    }),
  ],
];

describe('Express: an answer sent before the handler has finished', () => {
  for (const [name, make] of EARLY) {
    it(`${name}, bare middleware: retries get 409 until the lease lapses; the work never runs twice at once`, async () => {
      const { app, guard, record, work } = setup(1_000);
      const { before, handler } = make(work);
      app.post('/c', before, guard, express.json(), handler);
      const { held, retry } = await answeredEarly(await listen(app), record, work);
      expect([held.first, held.during, held.record, held.runs, held.running]).toEqual([
        503,
        [409, 409, 409],
        'in_progress',
        1,
        1,
      ]);
      expect([retry, work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([
        { status: 201, body: '{"run":2}' },
        2,
        1,
        0,
        work.takenOver(),
      ]);
    });

    it(`${name}, route(handler): 409 while the handler runs, recorded retryable once it settles, then retried at once`, async () => {
      const { app, guard, record, work } = setup(10_000);
      const { before, handler } = make(work);
      app.post('/c', before, guard, express.json(), guard.route(handler));
      const send = await listen(app);
      work.hold();
      const first = await send();
      const during = [await send(), await send(), await send()].map((answer) => answer.status);
      expect([first.status, during, (await record())?.status, work.runs]).toEqual([
        503,
        [409, 409, 409],
        'in_progress',
        1,
      ]);
      work.open();
      const failed = await until(record, (stored) => stored?.status !== 'in_progress');
      expect([failed?.status, failed?.retryable, failed?.response?.status]).toEqual(['failed', true, 503]);
      const retry = await send();
      expect([retry, work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([
        { status: 201, body: '{"run":2}' },
        2,
        1,
        0,
        work.takenOver(),
      ]);
    });
  }

  it('route(handler): a retryable answer after the handler settled is recorded at once, as without a timeout', async () => {
    const { app, guard, record, work } = setup(10_000);
    app.post(
      '/c',
      guard,
      guard.route(async (_req, res) => {
        const n = await work.run(idempotencyContext(res));
        res.status(n === 1 ? 503 : 201).json({ run: n });
      }),
    );
    const send = await listen(app);
    const first = await send();
    const stored = await record();
    const retry = await send();
    expect([first, stored?.status, stored?.retryable, retry, work.runs, guard.engine.activeLeases]).toEqual([
      { status: 503, body: '{"run":1}' },
      'failed',
      true,
      { status: 201, body: '{"run":2}' },
      2,
      0,
    ]);
  });
});

/** How each case streams: its first chunk is out when `streaming` is notified; run 2 and later end at once. */
const STREAMS: ReadonlyArray<readonly [string, (work: Work) => RequestHandler]> = [
  [
    'pipe() of a Readable that never ends',
    (work) => (_req, res) => {
      const n = work.start(idempotencyContext(res));
      res.once('close', () => work.end());
      lineThenWait(work, n).pipe(res);
    },
  ],
  [
    'server-sent events written until the client leaves',
    (work) => (_req, res) => eventsUntilGone(work, work.start(idempotencyContext(res)), res),
  ],
];

/** Sends k1 and leaves once the handler has streamed its first chunk; the request fails on the client's side. */
async function leaveMidStream(send: Awaited<ReturnType<typeof listen>>, work: Work): Promise<void> {
  const gone = new AbortController();
  const streaming = work.next('streaming');
  const attempt = send('k1', gone.signal).catch((error: unknown) => error);
  await streaming;
  gone.abort();
  expect(await attempt).toBeInstanceOf(Error);
}

describe('Express: a client that leaves mid-stream', () => {
  for (const [name, make] of STREAMS) {
    it(`${name}: the lease stops within one lease; after it lapses the retry takes over, same id`, async () => {
      const leaseMs = 300;
      const { app, guard, record, work } = setup(leaseMs);
      app.post('/c', guard, make(work));
      const send = await listen(app);
      await leaveMidStream(send, work);
      await expect.poll(() => guard.engine.activeLeases, { timeout: 2 * leaseMs, interval: 10 }).toBe(0);
      expect([(await record())?.status, work.running]).toEqual(['in_progress', 0]);
      const retry = await until(send, (answer) => answer.status !== 409);
      expect([retry.status, work.runs, work.most, guard.engine.activeLeases, work.seen]).toEqual([
        200,
        2,
        1,
        0,
        work.takenOver(),
      ]);
    });
  }

  it('a handler that ends its stream soon after the client left is recorded, and the retry replays it', async () => {
    const { app, guard, record, work } = setup(300);
    app.post('/c', guard, (_req, res) => {
      work.start(idempotencyContext(res));
      res.write('line 1\n');
      res.once('close', () => {
        res.end('line 2\n');
        work.end();
      });
      work.notify('streaming');
    });
    const send = await listen(app);
    await leaveMidStream(send, work);
    const stored = await until(record, (found) => found?.status !== 'in_progress');
    const retry = await send();
    expect([stored?.status, retry, work.runs, guard.engine.activeLeases]).toEqual([
      'succeeded',
      { status: 200, body: 'line 1\nline 2\n' },
      1,
      0,
    ]);
  });
});
