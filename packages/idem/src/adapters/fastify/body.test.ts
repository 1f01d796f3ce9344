/**
 * The Fastify plugin reading the request body over a real socket: a body arriving in two pieces (content-length
 * and chunked), a body an earlier preParsing hook set an encoding on, and a body over the limit still arriving.
 */
import { connect, type AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { signal } from '../../http/counted.test-kit.js';
import { memoryStore } from '../../stores/memory/index.js';
import { closedAfter, DAY, guardedApp } from './app.test-kit.js';
import { idempotency } from './index.js';

/** A request's framing header, the body's first piece, and the rest. */
type Framed = readonly [header: string, first: string, rest: string];

/** A keyed POST over a new socket: the head and the body's first piece, then the rest once `heard()` resolves. */
async function sendInTwoPieces(
  port: number,
  key: string,
  [header, first, rest]: Framed,
  heard: () => Promise<void>,
): Promise<{ status: number; body: string }> {
  const socket = connect(port, '127.0.0.1');
  const answer = new Promise<string>((resolve, reject) => {
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.includes('\r\n\r\n{') && text.endsWith('}')) resolve(text);
    });
    socket.on('error', reject);
  });
  socket.write(
    `POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\n${header}\r\n\r\n${first}`,
  );
  await heard();
  socket.write(rest);
  const text = await answer;
  socket.destroy();
  return { status: Number(text.slice(9, 12)), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
}

describe('idem/fastify: the request body over a real socket', () => {
  /**
   * The body's second half is sent only once onRequest has run, so the request is not complete when the plugin
   * reads it: it waits for the rest, fingerprints the whole body, and Fastify's parser still gets every byte.
   */
  it.each([
    ['content-length', (body: string): Framed => [`content-length: ${body.length}`, body.slice(0, 9), body.slice(9)]],
    [
      'chunked',
      (body: string): Framed => {
        const chunk = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;
        return ['transfer-encoding: chunked', chunk(body.slice(0, 9)), `${chunk(body.slice(9))}0\r\n\r\n`];
      },
    ],
  ] as const)('a %s body that arrives in two pieces is read whole, parsed whole and replayed', async (_, frame) => {
    const store = memoryStore();
    let seen = signal();
    let runs = 0;
    const { app } = await guardedApp(store, (app) => {
      app.addHook('onRequest', async () => seen.resolve());
      app.post('/echo', async (request, reply) => {
        runs++;
        return reply.code(201).send({ run: runs, got: request.body });
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const send = (key: string, body: string) => {
      seen = signal();
      return sendInTwoPieces(port, key, frame(body), () => seen.promise);
    };
    const body = '{"amount":50000,"currency":"usd"}';
    const first = await send('k1', body);
    const retry = await send('k1', body);
    const other = await send('k1', '{"amount":50001,"currency":"usd"}');
    expect([first, retry, other.status, runs]).toEqual([
      { status: 201, body: '{"run":1,"got":{"amount":50000,"currency":"usd"}}' },
      { status: 201, body: '{"run":1,"got":{"amount":50000,"currency":"usd"}}' },
      400,
      1,
    ]);
  });
  it('a body whose encoding an earlier preParsing hook set is read as that text; it used to crash the process', async () => {
    const store = memoryStore();
    let runs = 0;
    const { app } = await guardedApp(store, (app) => {
      app.addHook('preParsing', async (_request, _reply, payload) => {
        payload.setEncoding('utf8');
        return payload;
      });
      app.post('/echo', async (request, reply) => {
        runs++;
        return reply.code(201).send({ run: runs, got: request.body });
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/echo`;
    const send = async (body: string) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' },
        body,
      });
      return [response.status, await response.text()];
    };
    expect([
      await send('{"name":"café"}'),
      await send('{"name":"café"}'),
      (await send('{"name":"cafe"}'))[0],
      runs,
    ]).toEqual([[201, '{"run":1,"got":{"name":"café"}}'], [201, '{"run":1,"got":{"name":"café"}}'], 400, 1]);
  });
  it('a body over the limit that is still arriving gets 413, and the next request on the connection is answered', async () => {
    const store = memoryStore();
    let runs = 0;
    const app = closedAfter(Fastify({ forceCloseConnections: true }));
    let seen = signal();
    app.addHook('onRequest', async () => seen.resolve());
    await app.register(idempotency<undefined>({ store, ttlMs: DAY, scope: 'single-tenant', maxBodyBytes: 1_000 }));
    app.post('/echo', async (_request, reply) => reply.code(201).send({ run: ++runs }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    let text = '';
    let arrived = signal();
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.endsWith('}')) arrived.resolve();
    });
    const head = (key: string, length: number) =>
      `POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\ncontent-length: ${length}\r\n\r\n`;
    const big = `{"pad":"${'x'.repeat(200_000)}"}`;
    socket.write(head('big', big.length) + big.slice(0, 500));
    await seen.promise;
    socket.write(big.slice(500, 5_000));
    await arrived.promise;
    const tooLarge = text;
    [text, arrived, seen] = ['', signal(), signal()];
    socket.write(big.slice(5_000) + head('small', 2) + '{}');
    await arrived.promise;
    socket.destroy();
    expect([
      tooLarge.slice(0, 12),
      /request-too-large/.test(tooLarge),
      text.slice(0, 12),
      text.endsWith('{"run":1}'),
    ]).toEqual(['HTTP/1.1 413', true, 'HTTP/1.1 201', true]);
  });
});
