/**
 * Express: nothing a handler sets on the head of a held response can take the process down (issue 27). A reason
 * phrase, header or status Node refuses throws where the handler set it, as without Idem, and Express answers 500;
 * a valid custom reason phrase is answered as a replay will give it: Node's own phrase for the status.
 */
import type { AddressInfo } from 'node:net';
import express, { type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

const DAY = 86_400_000;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A route that runs `first` on its first execution and answers 201 afterwards; `ok` answers 201 always. */
async function serve(first: (res: Response) => void, wrap: boolean) {
  const store = memoryStore();
  const guard = idempotency({ store, scope: 'single-tenant', ttlMs: DAY, leaseMs: 10_000, onError: () => {} });
  const app = express();
  app.set('env', 'test'); // Express logs no error it hands to finalhandler
  let runs = 0;
  const handler = (_req: Request, res: Response) => {
    if (++runs === 1) first(res);
    else res.status(201).json({ run: runs });
  };
  app.post('/c', guard, wrap ? guard.route(handler) : handler);
  app.post('/ok', guard, (_req, res) => void res.status(201).json({ ok: true }));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const send = async (path = '/c', key = 'k1') => {
    const response = await fetch(base + path, { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' });
    return {
      status: response.status,
      reason: response.statusText,
      type: response.headers.get('content-type'),
      injected: response.headers.get('x-injected'),
      replayed: response.headers.get('idempotent-replayed'),
      body: await response.text(),
    };
  };
  return { send, runs: () => runs, record: (key = 'k1') => store.get(recordPk('single-tenant', key)), guard };
}

const INVALID: ReadonlyArray<readonly [string, (res: Response) => void]> = [
  [
    "statusMessage = 'Créé ✓' (not Latin-1), then json()",
    (res) => void ((res.statusMessage = 'Créé ✓'), res.status(201).json({})),
  ],
  [
    'statusMessage with CR/LF, then end()',
    (res) => void ((res.statusMessage = 'OK\r\nX-Injected: 1'), res.status(201).end()),
  ],
  ["writeHead(201, 'Créé ✓')", (res) => void res.writeHead(201, 'Créé ✓', { 'content-type': 'text/plain' }).end('x')],
  ["writeHead(201, 'Created\\n')", (res) => void res.writeHead(201, 'Created\n').end('x')],
  ['a bad reason, then write()', (res) => void ((res.statusMessage = 'a\u0000b'), res.write('x'), res.end())],
  ['a bad reason, then flushHeaders()', (res) => void ((res.statusMessage = 'a\nb'), res.flushHeaders(), res.end('x'))],
  ['setHeader with an invalid name', (res) => void res.setHeader('bad name', 'x').status(201).end('x')],
  ['setHeader with CR/LF in the value', (res) => void res.setHeader('x-injected', 'a\r\nb').status(201).end('x')],
  ['writeHead with an invalid header name', (res) => void res.writeHead(201, { 'bad name': 'x' }).end('x')],
  [
    'writeHead with CR/LF in a header value',
    (res) => void res.writeHead(201, ['x-injected', 'a\r\nSet-Cookie: s=1']).end(),
  ],
  ['status(600), which no record can hold', (res) => void res.status(600).json({})],
];

describe('Express: a head Node refuses is a 500 where the handler set it, and the process lives on', () => {
  for (const [name, first] of INVALID) {
    it(`${name}: 500; the key is kept from a retry until the lease lapses; other keys are served`, async () => {
      const { send, runs, record } = await serve(first, false);
      const answer = await send();
      const stored = await record();
      const other = await send('/ok', 'k2');
      expect([answer.status, answer.type, answer.injected, stored?.status, runs()]).toEqual([
        500,
        'text/html; charset=utf-8',
        null,
        'in_progress',
        1,
      ]);
      expect([other.status, other.body]).toEqual([201, '{"ok":true}']);
    });
  }

  it('with route(handler) the 500 is recorded retryable at once, and the retry runs and answers 201', async () => {
    const { send, runs, record, guard } = await serve(
      (res) => void ((res.statusMessage = 'Créé ✓'), res.status(201).json({})),
      true,
    );
    const answer = await send();
    const stored = await record();
    const retry = await send();
    expect([answer.status, stored?.status, stored?.retryable, stored?.response?.status]).toEqual([
      500,
      'failed',
      true,
      500,
    ]);
    expect([retry.status, retry.body, runs(), guard.engine.activeLeases]).toEqual([201, '{"run":2}', 2, 0]);
  });
});

describe('Express: a valid custom reason phrase', () => {
  it.each([
    ['statusMessage', (res: Response) => void ((res.statusMessage = 'Charge Created'), res.status(201).json({}))],
    [
      'writeHead',
      (res: Response) => void res.writeHead(201, 'Crédit accordé', { 'content-type': 'text/plain' }).end('x'),
    ],
  ])('set with %s: the first answer has the phrase a replay will have, Node’s own', async (_how, first) => {
    const { send, record } = await serve(first, false);
    const answer = await send();
    const replay = await send();
    expect([answer.status, answer.reason, replay.status, replay.reason, replay.replayed]).toEqual([
      201,
      'Created',
      201,
      'Created',
      'true',
    ]);
    expect((await record())?.status).toBe('succeeded');
  });
});
