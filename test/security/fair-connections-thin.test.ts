/**
 * Fair connections, third review (rev30): attackers spread over 256 addresses holding ONE connection each, every
 * address under its share, locked a bystander out (0 of 183, 0 of 66, 0 of 50 answered) with connections the eviction
 * never chose: (b) lab delays of 60 s, and (c) keep-alives asking `GET /healthz` more often than once a second (never
 * stale). (a), answers read 1 KB every 2 s, needs a receive buffer node cannot shrink; it is rank 2 as (b) is.
 * Now a lab delay or unread answers held a second is evictable, then the keep-alive idle longest, and then (rev31:
 * (d) lab delays sent faster than they end, 0/63 answered) the lab delay or unread answers delivered longest ago.
 *
 * Scaled to a cap of 32 and 32 addresses. Other clients bind other loopback addresses (127.0.0.0/8).
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { STALE_MS } from '../../apps/demo/src/connections.js';
import {
  HEALTHZ,
  askHealthz,
  closes,
  counters,
  dial,
  metrics,
  nextStatus,
  withDemo,
  type Conn,
} from './connections-kit.js';

const ADDRESSES = Array.from({ length: 32 }, (_, i) => `127.0.0.${2 + i}`);
/** The one wait on time: a connection is "held a second" only once a second has passed. */
const staleWindow = () => new Promise((resolve) => setTimeout(resolve, STALE_MS + 200));

describe.skipIf(process.platform !== 'linux')(
  'fair connections: one busy connection from each of many addresses',
  () => {
    it('(b) a 60 s lab delay from each of 32 addresses (cap 32): a bystander is answered 200 within a second, evicting 1', async () => {
      await withDemo({ IDEM_MAX_CONNECTIONS: '32' }, async (server, conns) => {
        const body = '{"amount":100,"currency":"usd","source":"tok_visa"}';
        for (const [i, from] of ADDRESSES.entries()) {
          const key = `sk_lab_thin${String(i).padStart(4, '0')}`;
          const head =
            `POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nIdempotency-Key: d-${i}\r\n` +
            `Content-Type: application/json\r\nIdem-Lab-Delay-Ms: 60000\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
          conns.add(await dial(server.url, head, from));
        }
        // Every charge has claimed its key and is in its delay.
        await waitFor(
          '32 claims',
          async () => /^idem_store_op_duration_seconds_count\{op="claim"\} 32$/m.test(await metrics(server)),
          { timeoutMs: 10_000, everyMs: 50 },
        );
        await staleWindow();
        const status = await askHealthz(server, '127.0.0.200');
        // Without rank 2 in the fallback, nothing is evictable: the bystander is closed unanswered.
        expect([status, await closes([...conns], 1, 2_000), await counters(server)]).toEqual([
          200,
          1,
          { dropped: 0, overShare: 0, silent: 0, stalled: 0, evicted: 1 },
        ]);
      });
    });

    it('(d) a keep-alive sending a 900 ms lab delay every 400 ms, unanswered, from each of 32 addresses (cap 32): a bystander is answered 200 within a second, evicting 1', async () => {
      await withDemo({ IDEM_MAX_CONNECTIONS: '32' }, async (server, conns) => {
        const body = '{"amount":100,"currency":"usd","source":"tok_visa"}';
        let stopped = false;
        let sent = 0;
        const send = (conn: Conn, i: number) => {
          const head =
            `POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk_lab_thin${String(i).padStart(4, '0')}\r\n` +
            `Idempotency-Key: d-${i}-${++sent}\r\nContent-Type: application/json\r\nIdem-Lab-Delay-Ms: 900\r\n` +
            `Content-Length: ${body.length}\r\n\r\n${body}`;
          conn.socket.write(head);
        };
        const open: Conn[] = [];
        for (const [i, from] of ADDRESSES.entries()) {
          const conn = await dial(server.url, '', from);
          conns.add(conn);
          open.push(conn);
          send(conn, i);
        }
        // Never idle, never a second without a request: a new delay every 400 ms, before the last one ends.
        const pace = setInterval(() => {
          if (!stopped) open.forEach((conn, i) => conn.socket.destroyed || send(conn, i));
        }, 400);
        try {
          await waitFor(
            '32 claims',
            async () =>
              Number(/^idem_store_op_duration_seconds_count\{op="claim"\} (\d+)$/m.exec(await metrics(server))?.[1]) >=
              32,
            { timeoutMs: 10_000, everyMs: 50 },
          );
          const status = await askHealthz(server, '127.0.0.200');
          // Without the last fallback every connection is working on a lab delay sent within the second: none is evictable.
          expect([status, (await counters(server)).evicted]).toEqual([200, 1]);
        } finally {
          stopped = true;
          clearInterval(pace);
        }
      });
    });

    it('(c) a keep-alive asking GET /healthz every 200 ms from each of 32 addresses (cap 32): a bystander is answered 200 within a second, evicting 1', async () => {
      await withDemo({ IDEM_MAX_CONNECTIONS: '32' }, async (server, conns) => {
        let stopped = false;
        const asking = new Set<Conn>();
        const ask = async (from: string): Promise<void> => {
          while (!stopped) {
            const conn = await dial(server.url, '', from).catch(() => undefined);
            if (!conn) continue;
            conns.add(conn);
            asking.add(conn);
            while (!stopped && !conn.socket.destroyed) {
              const at = conn.received().length;
              conn.socket.write(HEALTHZ);
              if ((await nextStatus(conn, 2_000, at)) !== 200) break;
              await new Promise((resolve) => setTimeout(resolve, 200)); // the attack's pace, not an ordering
            }
            asking.delete(conn);
            conn.socket.destroy();
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        };
        const askers = ADDRESSES.map(ask);
        try {
          await waitFor('32 keep-alives asking', () => asking.size === 32, { timeoutMs: 5_000, everyMs: 10 });
          const status = await askHealthz(server, '127.0.0.200');
          // Without the last fallback every connection delivered a request within the second: none is evictable.
          expect([status, (await counters(server)).evicted]).toEqual([200, 1]);
        } finally {
          stopped = true;
          await Promise.all(askers);
        }
      });
    });
  },
);
