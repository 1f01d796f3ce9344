/**
 * NestJS: nothing a handler sets on the head of a held response can take the process down (issue 27). A reason
 * phrase Node refuses throws where it is written, as without Idem, and the app answers 500; a valid custom reason
 * phrase is answered as a replay will give it: Node's own phrase for the status. A `writeHead` Node refuses (an
 * odd flat header list, an undefined value) throws where it is called, as in Express (the one Node holder's check).
 */
import 'reflect-metadata';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Controller, Post, Req, Res, type INestApplication } from '@nestjs/common';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { IdempotencyInterceptor, type NestRequest } from './index.js';
import { memoryNestApp } from './memory-app.test-kit.js';

let runs = new Map<string, number>();
const count = (req: NestRequest): number => {
  const name = String(req.headers['x-case']);
  const n = (runs.get(name) ?? 0) + 1;
  runs.set(name, n);
  return n;
};
/** The Node response under either platform's (`@Res()` gives Express's `res` or Fastify's `reply`). */
const raw = (res: { raw?: unknown }) => (res.raw ?? res) as ServerResponse;

/** What the first execution of each case sets; later executions answer 201 as usual. */
const FIRST: Record<string, (res: ServerResponse) => void> = {
  'reason not Latin-1': (res) => void (res.statusMessage = 'Créé ✓'),
  'reason with CR/LF': (res) => void (res.statusMessage = 'OK\r\nX-Injected: 1'),
  'header value with CR/LF': (res) => void res.setHeader('x-injected', 'a\r\nb'),
  'header name invalid': (res) => void res.setHeader('bad name', 'x'),
  'writeHead with a reason not Latin-1': (res) => void res.writeHead(201, 'Créé ✓', { 'content-type': 'text/plain' }),
  'writeHead with CR/LF in a header value': (res) => void res.writeHead(201, { 'x-injected': 'a\r\nb' }),
  'writeHead with an odd header list': (res) => void res.writeHead(201, ['x-injected']),
  'writeHead with an undefined header value': (res) => void res.writeHead(201, { 'x-injected': undefined }),
  'valid custom reason': (res) => void (res.statusMessage = 'Charge Created'),
};

class Charges {
  /** Sets the case's head on the platform's response, then returns a value Nest sends (201). */
  passthrough(req: NestRequest, res: { raw?: unknown }): object {
    const n = count(req);
    if (n === 1) FIRST[String(req.headers['x-case'])]?.(raw(res));
    return { run: n };
  }
  /** Answers through the Node response itself (`@Res()`), with the case's head set first. */
  written(req: NestRequest, res: { raw?: unknown }): void {
    const n = count(req);
    if (n === 1) FIRST[String(req.headers['x-case'])]?.(raw(res));
    raw(res)
      .writeHead(201, { 'content-type': 'application/json' })
      .end(JSON.stringify({ run: n }));
  }
}
Controller()(Charges);
for (const [method, decorators, parameters] of [
  ['passthrough', [Post('passthrough')], [Req(), Res({ passthrough: true })]],
  ['written', [Post('written')], [Req(), Res()]],
] as const) {
  const descriptor = Object.getOwnPropertyDescriptor(Charges.prototype, method) as PropertyDescriptor;
  for (const decorate of decorators) decorate(Charges.prototype, method, descriptor);
  parameters.forEach((decorate, index) => decorate(Charges.prototype, method, index));
}

/** One key per case, named after it. */
const keyOf = (name: string): string => name.replaceAll(/[^A-Za-z0-9]+/g, '-');

let app: INestApplication | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function start(platform: 'express' | 'fastify') {
  runs = new Map();
  const made = await memoryNestApp(platform, [Charges]);
  app = made.app;
  const { store } = made;
  await app.listen(0, '127.0.0.1');
  const base = `http://127.0.0.1:${((app.getHttpServer() as Server).address() as AddressInfo).port}`;
  const send = async (path: string, name: string) => {
    const response = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'idempotency-key': keyOf(name), 'x-case': name },
      signal: AbortSignal.timeout(5_000),
    });
    return {
      status: response.status,
      reason: response.statusText,
      injected: response.headers.get('x-injected'),
      replayed: response.headers.get('idempotent-replayed'),
      body: await response.text(),
    };
  };
  const record = (name: string) => store.get(recordPk('single-tenant', keyOf(name)));
  return { send, record, engine: app.get(IdempotencyInterceptor).engine };
}

describe.each(['express', 'fastify'] as const)('Nest (%s): a head Node refuses', (platform) => {
  it.each([
    ['/passthrough', 'reason not Latin-1'],
    ['/passthrough', 'reason with CR/LF'],
    ['/passthrough', 'header value with CR/LF'],
    ['/passthrough', 'header name invalid'],
    ['/written', 'writeHead with a reason not Latin-1'],
    ['/written', 'writeHead with CR/LF in a header value'],
    ['/written', 'writeHead with an odd header list'],
    ['/written', 'writeHead with an undefined header value'],
    ['/written', 'reason with CR/LF'],
  ])('%s, %s: 500, recorded retryable; the retry runs and answers 201; the process lives on', async (path, name) => {
    const { send, record, engine } = await start(platform);
    const first = await send(path, name);
    const stored = await record(name);
    const retry = await send(path, name);
    expect([first.status, first.injected, stored?.status, stored?.retryable, stored?.response?.status]).toEqual([
      500,
      null,
      'failed',
      true,
      500,
    ]);
    expect([retry.status, retry.body, runs.get(name), engine.activeLeases]).toEqual([201, '{"run":2}', 2, 0]);
  });

  it('a valid custom reason phrase: the first answer has the phrase a replay will have, Node’s own', async () => {
    const { send, record } = await start(platform);
    const first = await send('/passthrough', 'valid custom reason');
    const replay = await send('/passthrough', 'valid custom reason');
    expect([first.status, first.reason, replay.status, replay.reason, replay.replayed]).toEqual([
      201,
      'Created',
      201,
      'Created',
      'true',
    ]);
    expect((await record('valid custom reason'))?.status).toBe('succeeded');
  });
});
