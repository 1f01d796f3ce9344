/**
 * The node bridge's bounds on a connection, in-process: a client that does not read is cut once it holds over
 * MAX_HELD_OUTPUT (128 KiB) of answers that do not drain for 5 s, not after the request timeout (30 s); an address
 * in the pipelining penalty box is refused until `penaltyMs` has passed, then served again; pipelined requests add
 * no listener per request to their socket (node warned on stderr once per pipelining connection).
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { App } from './app.js';
import { serve } from './node.js';

const answering = (body: Uint8Array<ArrayBuffer> | string): App =>
  Object.assign(async () => new Response(body), { dropsAfterCommit: () => false, admit: () => 'no-body' as const });

/** Sends `bytes` from a new connection; resolves with what came back once the server closed it (or `ms` passed). */
async function exchange(port: number, bytes: string, ms = 5_000): Promise<string> {
  const client = connect(port, '127.0.0.1');
  client.on('error', () => undefined);
  let received = '';
  client.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  client.write(bytes);
  const timer = setTimeout(() => client.destroy(), ms);
  await once(client, 'close');
  clearTimeout(timer);
  return received;
}

/** A counter for a serve() callback: its calls, when the first came (ms since the epoch), a promise settled then. */
function tally() {
  let calls = 0;
  let firstAt = 0;
  let settle: () => void = () => undefined;
  const first = new Promise<void>((resolve) => (settle = resolve));
  const call = (): void => {
    if (calls++ === 0) firstAt = Date.now();
    settle();
  };
  return { calls: () => calls, firstAt: () => firstAt, first, call };
}

describe('a client that does not read its answers', () => {
  it('is cut once it holds over 128 KiB that do not drain for 5 s, though the request timeout is 30 s', async () => {
    // 4 MiB does not fit in the loopback socket buffers: with the client paused, the server holds the rest.
    const stalled = tally();
    const server = serve(answering(new Uint8Array(4 * 1024 * 1024)), { onStalled: stalled.call });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const reader = connect({ port: (server.address() as AddressInfo).port, host: '127.0.0.1' }).pause();
    reader.on('error', () => undefined);
    reader.write('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n');
    // A limit on waiting, under the 30 s request timeout that alone cut it before (the bound allows 5 s).
    const limit = new Promise<'still held at 20 s'>((resolve) => setTimeout(resolve, 20_000, 'still held at 20 s'));
    const outcome = await Promise.race([stalled.first.then(() => 'cut' as const), limit]);
    reader.destroy();
    server.close();
    expect([outcome, stalled.calls(), server.connectionsByAddress().size]).toEqual(['cut', 1, 0]);
  });
});

describe('the pipelining penalty box', () => {
  it('refuses the address for penaltyMs, then serves it again', async () => {
    // The first stalled connection is the pipelining one, cut just after the penalty was set.
    const stalled = tally();
    const server = serve(answering('ok'), { penaltyMs: 2_000, onStalled: stalled.call }).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const request = 'GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n';
    try {
      const served = await exchange(port, request);
      // 40 in one write: parsed together, all unanswered when the 33rd arrives, so none is answered.
      const pipelined = await exchange(port, 'GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'.repeat(40));
      // Each connection in the penalty is destroyed as it connects; the first after it is served (polled).
      const refusals: string[] = [];
      let answer = await exchange(port, request);
      while (answer === '') {
        refusals.push(answer);
        await new Promise((resolve) => setTimeout(resolve, 20));
        answer = await exchange(port, request);
      }
      // 1 ms of slack: the clock may tick between the penalty's own reading and the first cut's.
      const servedAfterMs = Date.now() - stalled.firstAt();
      expect({
        served: served.slice(0, 15),
        pipelined,
        refusedAtLeastOnce: refusals.length > 0,
        servedOnlyAfterPenalty: servedAfterMs >= 1_999,
        answer: answer.slice(0, 15),
        stalled: stalled.calls(),
      }).toEqual({
        served: 'HTTP/1.1 200 OK',
        pipelined: '',
        refusedAtLeastOnce: true,
        servedOnlyAfterPenalty: true,
        answer: 'HTTP/1.1 200 OK',
        stalled: 1 + refusals.length,
      });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});

describe('pipelined requests on one connection', () => {
  it('30 pipelined and answered: no MaxListenersExceededWarning (one close listener per socket, not per request)', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    const server = serve(answering('ok')).listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const requests = 'GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'.repeat(29);
      const last = 'GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n';
      const answers = await exchange((server.address() as AddressInfo).port, requests + last);
      // A warning is emitted on the next tick: one more turn of the loop lets it arrive.
      await new Promise((resolve) => setImmediate(resolve));
      expect([(answers.match(/HTTP\/1\.1 200 OK/g) ?? []).length, warnings]).toEqual([30, []]);
    } finally {
      process.off('warning', onWarning);
      server.close();
    }
  });
});
