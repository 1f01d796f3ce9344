/**
 * Express edges found by a hostile review, each a regression test: what is recorded is what is sent, from one
 * snapshot at the handler's end(); a bad status code cannot crash the process; a response the server destroys
 * before its end settles the key retryable instead of renewing its lease forever.
 */
import type { AddressInfo } from 'node:net';
import { Readable, pipeline } from 'node:stream';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { waitFor } from '../../testing/fixtures.js';
import { idempotency } from './index.js';

const DAY = 86_400_000;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

async function serve(route: (req: Request, res: Response, next: NextFunction) => void, leaseMs = 10_000) {
  const store = memoryStore();
  const guard = idempotency({ store, scope: 'single-tenant', ttlMs: DAY, leaseMs, onError: () => {} });
  const app = express();
  app.set('env', 'production');
  app.post('/c', guard, guard.route(route));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/c`;
  const send = async (key = 'k1') => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{}',
    });
    return {
      status: response.status,
      type: response.headers.get('content-type'),
      replayed: response.headers.get('idempotent-replayed'),
      body: await response.text(),
    };
  };
  return { send, store, guard };
}

describe('Express: one snapshot at end() is both recorded and sent', () => {
  it('a timeout guard answers 504; the work finishing after it cannot turn the answer into a 201', async () => {
    let runs = 0;
    const { send, store } = await serve((_req, res) => {
      runs++;
      res.status(504).json({ error: 'timeout' }); // the guard fires first…
      // …and the work lands a moment later, checking headersSent as such code does.
      setImmediate(() => {
        if (!res.headersSent) res.status(201).json({ charge: 'ch_1' });
      });
    });
    const first = await send();
    expect([first.status, first.body]).toEqual([504, '{"error":"timeout"}']);
    // The handler returned no promise, so its work may go on (as here): the lease is abandoned, not freed.
    const record = await store.get(recordPk('single-tenant', 'k1'));
    expect([record?.status, record?.response?.status, (await send()).status]).toEqual(['in_progress', undefined, 409]);
    expect(runs).toBe(1);
  });

  it('a throw after res.json(): the client gets the 201 that is recorded, and the error page is not appended', async () => {
    const { send } = await serve((_req, res) => {
      res.status(201).json({ charge: 'ch_1' });
      throw new Error('after the answer');
    });
    const first = await send();
    const replay = await send();
    expect(first).toEqual({
      status: 201,
      type: 'application/json; charset=utf-8',
      replayed: null,
      body: '{"charge":"ch_1"}',
    });
    expect(replay).toEqual({
      status: 201,
      type: 'application/json; charset=utf-8',
      replayed: 'true',
      body: '{"charge":"ch_1"}',
    });
  });

  it('a partial write then an error page: Content-Length is the bytes actually sent, and the replay is the same bytes', async () => {
    const { send } = await serve((_req, res, next) => {
      res.write('{"partial":');
      next(Object.assign(new Error('declined'), { status: 402 }));
    });
    const first = await send();
    const replay = await send();
    expect(first.status).toBe(402);
    expect(first.body.startsWith('{"partial":')).toBe(true);
    expect([replay.status, replay.body, replay.replayed]).toEqual([402, first.body, 'true']);
  });
});

describe('Express: a bad status code', () => {
  for (const [name, route] of [
    ['writeHead(1000)', (_req: Request, res: Response) => void res.writeHead(1000).end('x')],
    ['status(1000).json()', (_req: Request, res: Response) => void res.status(1000).json({ a: 1 })],
  ] as const) {
    it(`${name} is a 500 from Express, as without Idem; the process stays up and the key is retryable`, async () => {
      let runs = 0;
      const { send, store } = await serve((req, res) => {
        runs++;
        route(req, res);
      });
      expect((await send()).status).toBe(500);
      const record = await store.get(recordPk('single-tenant', 'k1'));
      expect([record?.status, record?.retryable]).toEqual(['failed', true]);
      expect((await send()).status).toBe(500);
      expect(runs).toBe(2);
    });
  }
});

describe('Express: a response the server destroys before its end', () => {
  it('a failed pipeline into res settles the key retryable: no lease left renewing, the retry runs', async () => {
    let runs = 0;
    const { send, guard } = await serve((_req, res) => {
      runs++;
      const source = new Readable({
        read() {
          this.destroy(new Error('source failed'));
        },
      });
      pipeline(source, res, () => {});
    }, 300);
    await expect(send()).rejects.toThrow('fetch failed');
    // The settlement is a store write: wait until it has landed.
    await waitFor('the settlement to land', () => guard.engine.activeLeases === 0, { everyMs: 1 });
    await expect(send()).rejects.toThrow('fetch failed');
    expect(runs).toBe(2);
  });
});

describe('Express: a request whose encoding an earlier middleware set', () => {
  it('is read as that text: fingerprinted, handed on unread, replayed; it used to crash the process', async () => {
    const store = memoryStore();
    const app = express();
    let runs = 0;
    app.post(
      '/c',
      (req, _res, next) => {
        req.setEncoding('utf8');
        next();
      },
      idempotency({ store, scope: 'single-tenant', ttlMs: DAY, onError: () => {} }),
      (req, res) => {
        runs++;
        let text = '';
        req.on('data', (chunk: string) => (text += chunk));
        req.on('end', () => res.status(201).json({ run: runs, text }));
      },
    );
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    closers.push(() => new Promise((resolve) => server.close(() => resolve())));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/c`;
    const send = async (body: string) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'idempotency-key': 'k1', 'content-type': 'text/plain' },
        body,
      });
      return [response.status, await response.text()];
    };
    expect([await send('café'), await send('café'), (await send('cafe'))[0], runs]).toEqual([
      [201, '{"run":1,"text":"café"}'],
      [201, '{"run":1,"text":"café"}'],
      400,
      1,
    ]);
  });
});
