/**
 * Express, from the review of issue 27: `route()` around a handler whose return is not its end, connect-timeout
 * firing while the body is read, a handler held past `maxHoldMs`, and heads Node refuses. Each case counts the
 * executions of the work and how many ran at once.
 */
import http from 'node:http';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { describe, expect, it } from 'vitest';
import { Work } from '../../../../../test/work.js';
import { idempotencyContext, type ExpressIdempotency } from './index.js';
import { answeredEarly, listen, setup as guarded, timeout } from './time.test-kit.js';

const setup = (leaseMs: number, maxHoldMs?: number) => ({ ...guarded(leaseMs, maxHoldMs), work: new Work() });

type Timed = Request & { timedout?: boolean };

/** The work, answered 201 unless connect-timeout answered first; ends when the gate opens. */
function charge(work: Work, req: Request, res: Response): Promise<void> {
  return work.run(idempotencyContext(res)).then((n) => {
    if (!(req as Timed).timedout) res.status(201).json({ run: n });
  });
}

/** Routes whose wrapped function returns before the work ends: the middleware must not see them as settled. */
const RETURNS_EARLY: ReadonlyArray<readonly [string, (guard: ExpressIdempotency, work: Work) => RequestHandler[]]> = [
  [
    'a callback-style handler',
    (guard, work) => [
      guard.route((req: Request, res: Response) => {
        void charge(work, req, res);
      }),
    ],
  ],
  [
    'an async pre-handler that calls next()',
    (guard, work) => [
      guard.route(async (_req: Request, _res: Response, next: NextFunction) => {
        await Promise.resolve();
        next();
      }),
      (req, res) => charge(work, req, res),
    ],
  ],
  [
    'an express.Router()',
    (guard, work) => {
      const router = express.Router();
      router.post('/c', (req, res) => charge(work, req, res));
      return [guard.route(router)];
    },
  ],
];

describe('Express review: route() around a function that returns before its work ends', () => {
  for (const [name, make] of RETURNS_EARLY) {
    it(`${name}: connect-timeout's 503 keeps retries out (409) until the lease lapses; never two runs at once`, async () => {
      const { app, guard, record, work } = setup(1_000);
      app.post('/c', timeout(100), guard, express.json(), ...make(guard, work));
      const { held, retry } = await answeredEarly(await listen(app), record, work);
      expect([held.first, held.during, held.record, held.runs, held.most]).toEqual([
        503,
        [409, 409, 409],
        'in_progress',
        1,
        1,
      ]);
      expect([retry, work.runs, work.most, guard.engine.activeLeases]).toEqual([
        { status: 201, body: '{"run":2}' },
        2,
        1,
        0,
      ]);
    });
  }
});

/** POSTs `{}` with key k1 on a keep-alive connection, the body's end held back until `more` resolves. */
function slowBody(url: string, agent: http.Agent, more: Promise<void>): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, {
      method: 'POST',
      agent,
      headers: { 'idempotency-key': 'k1', 'content-type': 'application/json', 'content-length': '2' },
    });
    request.on('error', reject);
    request.on('response', (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
    });
    request.flushHeaders();
    request.write('{');
    void more.then(() => request.end('}'));
  });
}

describe("Express review: connect-timeout fires while the guard reads the body (the docs' setup)", () => {
  it('nothing ran: the key is not held, and the retry runs the work at once', async () => {
    const { app, guard, record, work } = setup(300);
    const haltOnTimedout: RequestHandler = (req, _res, next) => {
      if (!(req as Timed).timedout) next();
    };
    // finalhandler writes connect-timeout's 503 once the request has been read, beside the guard's own read.
    const timedOut = work.next('timeout');
    const watch: RequestHandler = (req, _res, next) => {
      req.once('timeout', () => work.notify('timeout'));
      next();
    };
    const charged = guard.route((req: Request, res: Response) => charge(work, req, res));
    app.post('/c', watch, timeout(100), guard, express.json(), haltOnTimedout, charged);
    const send = await listen(app);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await slowBody(send.url, agent, timedOut);
      await expect.poll(() => guard.engine.activeLeases, { timeout: 1_000, interval: 10 }).toBe(0);
      const stored = await record();
      const retry = await send('k1', AbortSignal.timeout(5_000));
      expect([first, stored?.status ?? null, retry, work.runs, guard.engine.activeLeases]).toEqual([
        503,
        null,
        { status: 201, body: '{"run":1}' },
        1,
        0,
      ]);
    } finally {
      agent.destroy();
    }
  });
});

describe('Express review: a handler held past maxHoldMs', () => {
  const HELD: ReadonlyArray<readonly [string, (work: Work) => RequestHandler]> = [
    ['a handler that never answers', (work) => (_req, res) => void work.start(idempotencyContext(res))],
    [
      'server-sent events that never end',
      (work) => (_req, res) => {
        work.start(idempotencyContext(res));
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: 1\n\n');
        const ticks = setInterval(() => res.write('data: tick\n\n'), 10);
        res.once('close', () => clearInterval(ticks));
      },
    ],
  ];
  for (const [name, make] of HELD) {
    it(`${name}: the client gets 409 idempotency-lease-lost when the engine gives the key up`, async () => {
      const { app, guard, record, work } = setup(600, 300);
      app.post('/c', guard, make(work));
      const send = await listen(app);
      const first = await send('k1', AbortSignal.timeout(5_000));
      const stored = await record();
      expect([
        first.status,
        (JSON.parse(first.body) as { type: string }).type,
        stored?.status,
        stored?.retryable,
        work.runs,
        guard.engine.activeLeases,
      ]).toEqual([409, 'urn:idem:problem:idempotency-lease-lost', 'failed', true, 1, 0]);
    });
  }
});

describe('Express review: writeHead input Node refuses throws in the handler (500), as without Idem', () => {
  const HEADS: ReadonlyArray<readonly [string, (res: Response) => void]> = [
    ['a flat header list of odd length', (res) => res.writeHead(200, ['x-a', '1', 'x-b']).end('ok')],
    ['writeHead after write', (res) => res.write('x') && res.writeHead(201).end('ok')],
    ['an undefined header value', (res) => res.writeHead(200, { 'x-a': undefined as unknown as string }).end('ok')],
  ];
  for (const [name, act] of HEADS) {
    it(name, async () => {
      const { app, guard, record, work } = setup(1_000);
      app.post('/c', guard, (_req, res) => {
        work.start(idempotencyContext(res));
        work.end();
        act(res);
      });
      const send = await listen(app);
      const first = await send();
      // Express's 500 frees the key while the bare middleware cannot see the handler end: abandoned, not freed.
      expect([first.status, first.body.includes('ok'), (await record())?.status, work.runs]).toEqual([
        500,
        false,
        'in_progress',
        1,
      ]);
    });
  }
});
