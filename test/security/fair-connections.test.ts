/**
 * Fair connections (issue 30, item 1), on the real demo process over TCP. Before, `IDEM_MAX_CONNECTIONS` (256) had
 * no per-address share and a socket that sent nothing was held for the whole 10 s headers timeout: 256 idle sockets
 * from one address refused every other client. Now:
 *
 * - one address (an IPv6 /64) holds at most half the cap (or `IDEM_MAX_CONNECTIONS_PER_ADDRESS`, its share, if
 *   more); a new connection over it is closed at once, unanswered, and counted in
 *   `idem_http_connections_over_share_total`;
 * - a connection that sends no byte within `IDEM_FIRST_BYTE_TIMEOUT_MS` (default 2 s) is closed unanswered and
 *   counted in `idem_http_connections_silent_total`; one that sent a byte keeps the headers timeout (408), and a
 *   keep-alive connection between requests keeps its own idle timeout.
 *
 * The second client comes from another address: all of 127.0.0.0/8 is loopback on Linux, so it binds 127.0.0.2.
 * Every bound below is a limit on waiting for an event, never a sleep that orders events.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import type { DemoProcess } from '../harness.js';
import { HEALTHZ, closes, counters, demo, dial, nextStatus, type Conn } from './connections-kit.js';

describe.skipIf(process.platform !== 'linux')('fair connections: no address locks the others out', () => {
  it('300 idle sockets from 127.0.0.1 hold 128 (half the cap); the other 172 are closed at once; 127.0.0.2 is answered 200 within a second', async () => {
    // The first-byte timeout is set to the headers timeout here, so the share alone is what is shown.
    const server = await demo({ IDEM_FIRST_BYTE_TIMEOUT_MS: '10000' });
    const hog: Conn[] = [];
    try {
      // One at a time, each connected before the next is dialled: the listener accepts them in this order.
      for (let i = 0; i < 300; i++) hog.push(await dial(server.url));
      // The 172 over the share are closed at once (without the share: only the 44 over the cap, so this waits out).
      expect(await closes(hog, 172, 5_000)).toBe(172);
      const bystander = await dial(server.url, `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`, '127.0.0.2');
      const status = await nextStatus(bystander, 1_000);
      // Another connection from the hog's address is over its share, and closed unanswered.
      const more = await dial(server.url, `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`);
      const moreStatus = await nextStatus(more, 5_000);
      expect({
        status,
        moreStatus,
        heldByHog: hog.filter((conn) => !conn.socket.destroyed).length,
        closedAreTheLast: hog.findIndex((conn) => conn.socket.destroyed),
        hogReceived: hog.map((conn) => conn.received()).join(''),
        counters: await counters(server),
      }).toEqual({
        status: 200,
        moreStatus: 'closed',
        heldByHog: 128,
        closedAreTheLast: 128,
        hogReceived: '',
        counters: { dropped: 0, overShare: 173, silent: 0, stalled: 0, evicted: 0 },
      });
    } finally {
      for (const conn of hog) conn.socket.destroy();
      await server.stop();
    }
  });

  it('a socket that sends nothing is closed unanswered after IDEM_FIRST_BYTE_TIMEOUT_MS; one that sent a byte gets the 408; keep-alive between requests is not cut', async () => {
    const server = await demo({ IDEM_FIRST_BYTE_TIMEOUT_MS: '300', IDEM_HEADERS_TIMEOUT_MS: '2000' });
    const conns: Conn[] = [];
    try {
      // A keep-alive client answered once, then idle; a client stuck inside its headers; then a silent one.
      const keepAlive = await dial(server.url, HEALTHZ);
      conns.push(keepAlive);
      const first = await nextStatus(keepAlive, 5_000);
      const partial = await dial(server.url, 'GET /healthz HTTP/1.1\r\n');
      const silent = await dial(server.url);
      conns.push(partial, silent);
      // Without the first-byte timeout, the silent socket would wait out the headers timeout and get a 408 too.
      await silent.closed;
      // The silent one's timer started last, so the other two have passed theirs: both are still open.
      const openAfterSilent = [keepAlive.socket.destroyed, partial.socket.destroyed];
      const before = keepAlive.received().length;
      keepAlive.socket.write(HEALTHZ);
      const second = await nextStatus(keepAlive, 5_000, before);
      const partialStatus = await nextStatus(partial, 10_000);
      expect({
        first,
        silentReceived: silent.received(),
        openAfterSilent,
        second,
        partialStatus,
        counters: await counters(server),
      }).toEqual({
        first: 200,
        silentReceived: '',
        openAfterSilent: [false, false],
        second: 200,
        partialStatus: 408,
        counters: { dropped: 0, overShare: 0, silent: 1, stalled: 0, evicted: 0 },
      });
    } finally {
      for (const conn of conns) conn.socket.destroy();
      await server.stop();
    }
  });

  it('connections pipelining 2000 GET / and never reading are cut at once (over 32 unanswered); 127.0.0.1 is answered 200', async () => {
    // The write-stall timeout (the request timeout, 30 s) is not what cuts these: the pipelining limit is.
    await capped({}, async (server, hog) => {
      const pipelined = 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(2_000);
      for (const from of ['127.0.0.2', '127.0.0.3'])
        for (let i = 0; i < 16; i++) {
          const conn = await dial(server.url, '', from);
          // Never read: the server's writes fill the socket buffers and stall.
          conn.socket.pause();
          conn.socket.write(pipelined);
          hog.add(conn);
        }
      // A paused client does not see its socket close, so the server's count is what is waited for. Without the
      // limit, each would be held until its answers stalled for the request timeout (30 s).
      const cut = await waitFor('32 stalled connections cut', async () => (await counters(server)).stalled === 32, {
        timeoutMs: 5_000,
        everyMs: 50,
      }).catch(() => false);
      const bystander = await dial(server.url, `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`);
      const status = await nextStatus(bystander, 2_000);
      expect({ cut, status, counters: await counters(server) }).toEqual({
        status: 200,
        cut: true,
        counters: { dropped: 0, overShare: 0, silent: 0, stalled: 32, evicted: 0 },
      });
    });
  });

  it('two addresses at their share (cap 32) each sending one byte then silence, re-opened on close: 127.0.0.1 is answered 200 five times in a row, each by evicting one', async () => {
    await capped({ IDEM_HEADERS_TIMEOUT_MS: '1000', IDEM_REQUEST_TIMEOUT_MS: '1000' }, async (server, hog) => {
      let reopened = 0;
      let allReopened: () => void = () => undefined;
      const slotsReopened = new Promise<void>((resolve) => (allReopened = resolve));
      const hold = async (from: string): Promise<void> => {
        const conn = await dial(server.url, 'G', from).catch(() => undefined);
        if (!conn) return;
        hog.add(conn);
        void conn.closed.then(() => {
          if (!hog.delete(conn)) return; // destroyed at the end of the test
          if (++reopened === 32) allReopened();
          void hold(from);
        });
      };
      for (const from of ['127.0.0.2', '127.0.0.3']) for (let i = 0; i < 16; i++) await hold(from);
      // Every first slot has timed out (the headers timeout) and been re-opened: the hog runs as in the attack.
      await slotsReopened;
      const statuses: Array<number | 'closed' | 'no answer'> = [];
      for (let i = 0; i < 5; i++) {
        const bystander = await dial(server.url, `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`);
        statuses.push(await nextStatus(bystander, 2_000));
        await bystander.closed;
      }
      const { evicted } = await counters(server);
      expect({ statuses, evicted: (evicted ?? 0) >= 1 }).toEqual({
        statuses: [200, 200, 200, 200, 200],
        evicted: true,
      });
    });
  });
});

/** Runs `body` on a demo capped at 32 connections (a share of 16) with `env`; then closes what `body` left open. */
async function capped(
  env: Record<string, string>,
  body: (server: DemoProcess, open: Set<Conn>) => Promise<void>,
): Promise<void> {
  const server = await demo({ IDEM_MAX_CONNECTIONS: '32', ...env });
  const open = new Set<Conn>();
  try {
    await body(server, open);
  } finally {
    const left = [...open];
    open.clear();
    for (const conn of left) conn.socket.destroy();
    await server.stop();
  }
}
