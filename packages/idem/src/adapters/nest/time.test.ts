/**
 * NestJS when the answer and the handler part ways (issue 27): the usual timeout interceptor answers 408 while the
 * handler's work goes on, and a client leaves mid-stream (a Readable piped into `@Res()`, server-sent events
 * written to it, a `StreamableFile`). Each case counts the executions of the work and how many ran at once, on
 * both of Nest's platforms, with the memory store.
 */
import 'reflect-metadata';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  Controller,
  Post,
  Req,
  RequestTimeoutException,
  Res,
  StreamableFile,
  UseInterceptors,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { catchError, throwError, timeout, TimeoutError, type Observable } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { eventsUntilGone, lineThenWait, until, Work } from '../../../../../test/work.js';
import { idempotencyContext, IdempotencyInterceptor, type NestRequest } from './index.js';
import { memoryNestApp } from './memory-app.test-kit.js';

/** The timeout interceptor of Nest's documentation: after `ms` the request is answered 408; the handler goes on. */
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(100),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

/** The Node response under either platform's (`@Res()` gives Express's `res` or Fastify's `reply`). */
const raw = (res: { raw?: unknown }) => (res.raw ?? res) as ServerResponse;

let work = new Work();

class Charges {
  async slow(req: NestRequest): Promise<object> {
    return { run: await work.run(idempotencyContext(req)) };
  }
  /** Pipes a source that sends one line, then waits for good (run 2 and later end after the line). */
  piped(req: NestRequest, res: { raw?: unknown }): void {
    const n = work.start(idempotencyContext(req));
    raw(res).once('close', () => work.end());
    lineThenWait(work, n).pipe(raw(res));
  }
  /** Server-sent events until the client leaves (run 2 and later end after the first). */
  events(req: NestRequest, res: { raw?: unknown }): void {
    eventsUntilGone(work, work.start(idempotencyContext(req)), raw(res));
  }
  /** A receipt from a source that sends one line, then waits for good (run 2 and later end after the line). */
  file(req: NestRequest): StreamableFile {
    const source = lineThenWait(work, work.start(idempotencyContext(req)));
    source.once('close', () => work.end());
    return new StreamableFile(source, { type: 'text/plain' });
  }
}
Controller()(Charges);
for (const [method, path, parameters] of [
  ['slow', 'slow', [Req()]],
  ['piped', 'piped', [Req(), Res()]],
  ['events', 'events', [Req(), Res()]],
  ['file', 'file', [Req()]],
] as const) {
  Post(path)(
    Charges.prototype,
    method,
    Object.getOwnPropertyDescriptor(Charges.prototype, method) as PropertyDescriptor,
  );
  parameters.forEach((decorate, index) => decorate(Charges.prototype, method, index));
}
/** The same slow route, with the timeout on its controller (`@UseInterceptors`) rather than app-wide. */
class TimedCharges extends Charges {}
Controller('timed')(TimedCharges);
UseInterceptors(TimeoutInterceptor)(TimedCharges);

type Platform = 'express' | 'fastify';
let app: INestApplication | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function start(platform: Platform, leaseMs: number, { globalTimeout = false } = {}) {
  work = new Work();
  const made = await memoryNestApp(platform, [Charges, TimedCharges], { leaseMs });
  app = made.app;
  const { store } = made;
  if (globalTimeout) app.useGlobalInterceptors(new TimeoutInterceptor());
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const send = async (path: string, signal?: AbortSignal) => {
    const response = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'idempotency-key': 'k1' },
      ...(signal ? { signal } : {}),
    });
    return { status: response.status, body: await response.text() };
  };
  const engine = app.get(IdempotencyInterceptor).engine;
  return { send, engine, record: () => store.get(recordPk('single-tenant', 'k1')) };
}

describe.each(['express', 'fastify'] as const)('Nest (%s): a timeout interceptor answers 408 first', (platform) => {
  it.each([
    ['app-wide (useGlobalInterceptors)', '/slow', true],
    ['on the controller (@UseInterceptors)', '/timed/slow', false],
  ] as const)(
    '%s: 409 while the handler runs, recorded retryable once it settles, then retried; never two at once',
    async (_where, path, globalTimeout) => {
      const { send, engine, record } = await start(platform, 10_000, { globalTimeout });
      work.hold();
      const first = await send(path);
      const during = [await send(path), await send(path), await send(path)].map((answer) => answer.status);
      expect([first.status, during, (await record())?.status, work.runs]).toEqual([
        408,
        [409, 409, 409],
        'in_progress',
        1,
      ]);
      work.open();
      const failed = await until(record, (stored) => stored?.status !== 'in_progress');
      expect([failed?.status, failed?.retryable, failed?.response?.status]).toEqual(['failed', true, 408]);
      const retry = await send(path);
      expect([retry, work.runs, work.most, engine.activeLeases, work.seen]).toEqual([
        { status: 201, body: '{"run":2}' },
        2,
        1,
        0,
        work.takenOver(),
      ]);
    },
  );
});

describe.each(['express', 'fastify'] as const)('Nest (%s): a client that leaves mid-stream', (platform) => {
  it.each([
    ['a Readable piped into @Res() that never ends', '/piped', 'in_progress'],
    ['server-sent events written to @Res() until the client leaves', '/events', 'in_progress'],
    ['a StreamableFile that never ends (its stream is destroyed: failed)', '/file', 'failed'],
  ] as const)('%s: the lease stops within one lease, and the retry takes over, same id', async (_what, path, state) => {
    const leaseMs = 300;
    const { send, engine, record } = await start(platform, leaseMs);
    const gone = new AbortController();
    const streaming = work.next('streaming');
    const attempt = send(path, gone.signal).catch((error: unknown) => error);
    await streaming;
    gone.abort();
    expect(await attempt).toBeInstanceOf(Error);
    await expect.poll(() => engine.activeLeases, { timeout: 2 * leaseMs, interval: 10 }).toBe(0);
    await expect.poll(() => work.running, { timeout: 2 * leaseMs, interval: 10 }).toBe(0);
    expect([(await record())?.status, (await record())?.response ?? null]).toEqual([state, null]);
    const retry = await until(
      () => send(path),
      (answer) => answer.status !== 409,
    );
    expect([retry.status, work.runs, work.most, engine.activeLeases, work.seen]).toEqual([
      path === '/events' ? 200 : 201,
      2,
      1,
      0,
      work.takenOver(),
    ]);
  });
});
