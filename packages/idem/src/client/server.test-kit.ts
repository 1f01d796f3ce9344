/**
 * @module For the client's tests (not part of the library): a real HTTP server that answers each attempt from a
 * script and records what it saw, deterministic time, a promise resolved from outside, and the charge they post.
 * Every server made here is closed after each case.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach } from 'vitest';
import type { IdempotentFetchOptions } from './index.js';

export type Step = (req: IncomingMessage, res: ServerResponse) => void;

export const drop: Step = (req) => req.socket.destroy();
export const answer =
  (status: number, headers: Record<string, string> = {}, body = ''): Step =>
  (_req, res) => {
    res.writeHead(status, headers);
    res.end(body);
  };

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** Listens on 127.0.0.1:0 until the case ends; answers the URL of its `/v1/charges`. */
export async function listening(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
}

/** A real HTTP server that answers attempt n with script[n] (the last step repeats) and records what it saw. */
export async function scripted(...script: Step[]) {
  const seen: Array<{ method: string; key: string | undefined; type: string | undefined; body: string }> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        key: req.headers['idempotency-key'] as string | undefined,
        type: req.headers['content-type'],
        body: Buffer.concat(chunks).toString(),
      });
      const step = script[Math.min(seen.length, script.length) - 1] as Step;
      step(req, res);
    });
  });
  return { url: await listening(server), seen };
}

/** A promise and its resolve, to order events by signals instead of by sleeping. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Deterministic time: sleeps are recorded (and advance the clock) instead of waited. */
export function timing(random = 0.5, start = 0) {
  const sleeps: number[] = [];
  let clock = start;
  const options = {
    random: () => random,
    now: () => clock,
    sleep: async (ms: number, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      sleeps.push(ms);
      clock += ms;
    },
  } satisfies IdempotentFetchOptions;
  return { sleeps, options };
}

export const charge: RequestInit = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: '{"amount":50000,"currency":"usd"}',
};
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
