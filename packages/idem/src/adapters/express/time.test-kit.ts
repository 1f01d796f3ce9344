/**
 * @module For the Express time tests (not part of the library): connect-timeout, an app on a memory store, and a server on
 * 127.0.0.1 that `afterEach` closes.
 */
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import express, { type Express, type RequestHandler } from 'express';
import { afterEach } from 'vitest';
import { until, type Work } from '../../../../../test/work.js';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

/** connect-timeout 1.9: after `time` ms it calls `next(503 'Response timeout')`; the handler goes on. */
export const timeout = createRequire(import.meta.url)('connect-timeout') as (time: number) => RequestHandler;

export const DAY = 86_400_000;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** An app guarded on a memory store, and the key's record. */
export function setup(leaseMs: number, maxHoldMs?: number) {
  const store = memoryStore();
  const guard = idempotency({
    store,
    scope: 'single-tenant',
    ttlMs: DAY,
    leaseMs,
    ...(maxHoldMs === undefined ? {} : { maxHoldMs }),
    onError: () => {},
  });
  const app = express();
  app.set('env', 'test'); // Express logs no error it hands to finalhandler
  const record = async (key = 'k1') => store.get(recordPk('single-tenant', key));
  return { app, guard, record };
}

/** Listens on 127.0.0.1; returns the URL of POST /c and a `send(key)` that posts `{}` there with the key. */
export async function listen(app: Express) {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/c`;
  const send = async (key = 'k1', signal?: AbortSignal) => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{}',
      ...(signal ? { signal } : {}),
    });
    return { status: response.status, body: await response.text() };
  };
  return Object.assign(send, { url });
}

/**
 * An answer sent before the handler has finished, then retries: the work held at its gate, a first request (answered
 * early), three more while the work runs, then the gate opened and the key retried until it is not 409. What each
 * step saw, for the caller's own exact expectations.
 */
export async function answeredEarly(
  send: Awaited<ReturnType<typeof listen>>,
  record: ReturnType<typeof setup>['record'],
  work: Work,
) {
  work.hold();
  const first = await send();
  const during = [await send(), await send(), await send()].map((answer) => answer.status);
  const held = {
    first: first.status,
    during,
    record: (await record())?.status,
    runs: work.runs,
    running: work.running,
    most: work.most,
  };
  const ended = work.next('end');
  work.open();
  await ended;
  const retry = await until(send, (answer) => answer.status !== 409);
  return { held, retry };
}
