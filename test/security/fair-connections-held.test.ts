/**
 * Fair connections, second review (issue 30): connections that hold a slot without holding work. A hostile review
 * filled the cap from two addresses with connections the eviction never chose, and locked everyone else out: admitted
 * requests whose body drips (the work starts once the body is whole), lab delays (`Idem-Lab-Delay-Ms` with made-up
 * `sk_lab_` keys) and answers written before the body was read, which linger unended. Now each of them is
 * evictable, and an address under its share is answered within a second. The pipelining limit puts its address in a
 * penalty box: its other connections are cut and new ones destroyed as they connect.
 *
 * On a cap of 64 the share is 16 and one address may borrow up to 32: two addresses of 32 fill the cap (before,
 * with a share of half the cap, the same two addresses were at their share). Each attacker's state is confirmed by a
 * signal (a `100 Continue`, a claim counted in the metrics, its early 401) before the bystander connects.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import type { DemoProcess } from '../harness.js';
import { HEALTHZ, closes, counters, demo, dial, metrics, nextStatus, type Conn } from './connections-kit.js';

const BYSTANDER = `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`;
const ATTACKERS = ['127.0.0.2', '127.0.0.3'];

/** Resolves once `conn` has received `text` (or has closed): true if it has. */
function received(conn: Conn, text: string): Promise<boolean> {
  return new Promise((resolve) => {
    const check = () => {
      if (!conn.received().includes(text)) return;
      conn.socket.off('data', check);
      resolve(true);
    };
    conn.socket.on('data', check);
    void conn.closed.then(() => resolve(conn.received().includes(text)));
    check();
  });
}

/**
 * On a demo capped at 64, opens 32 connections from each attacker address with `open` (which resolves once the
 * connection is in the state under test), then a bystander from 127.0.0.4: its status within a second, how many
 * attacker connections the server closed, and the counters.
 */
async function lockOut(
  env: Record<string, string>,
  open: (server: DemoProcess, from: string, i: number) => Promise<Conn>,
  ready: (server: DemoProcess) => Promise<unknown> = async () => undefined,
) {
  const server = await demo({ IDEM_MAX_CONNECTIONS: '64', ...env });
  const attackers: Conn[] = [];
  try {
    for (const from of ATTACKERS) for (let i = 0; i < 32; i++) attackers.push(await open(server, from, i));
    await ready(server);
    const bystander = await dial(server.url, BYSTANDER, '127.0.0.4');
    const status = await nextStatus(bystander, 1_000);
    return { status, closedByServer: await closes(attackers, 1, 5_000), counters: await counters(server) };
  } finally {
    for (const conn of attackers) conn.socket.destroy();
    await server.stop();
  }
}

/** What a lock-out by connections that hold no work must come to: one of them evicted, the bystander answered. */
const ANSWERED = {
  status: 200,
  closedByServer: 1,
  counters: { dropped: 0, overShare: 0, silent: 0, stalled: 0, evicted: 1 },
};

const charge = (key: string, ref: string, extra: string) =>
  `POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nIdempotency-Key: ${ref}\r\n` +
  `Content-Type: application/json\r\n${extra}`;

describe.skipIf(process.platform !== 'linux')('connections that hold a slot but no work are evicted', () => {
  it('admitted charges whose body drips, 32 from each of two addresses: the bystander is answered 200 within a second', async () => {
    const outcome = await lockOut({}, async (server, from, i) => {
      const head = charge('sk_test_alice', `drip-${from}-${i}`, 'Content-Length: 100\r\nExpect: 100-continue\r\n\r\n');
      const conn = await dial(server.url, head, from);
      // The 100 is sent once the request is admitted: its head is parsed and its body is awaited.
      expect(await received(conn, 'HTTP/1.1 100 Continue')).toBe(true);
      conn.socket.write('{');
      return conn;
    });
    expect(outcome).toEqual(ANSWERED);
  });

  it('lab delays of 60 s with made-up sk_lab_ keys, 32 from each of two addresses: the bystander is answered 200 within a second', async () => {
    const body = '{"amount":100,"currency":"usd","source":"tok_visa"}';
    const outcome = await lockOut(
      {},
      (server, from, i) => {
        const key = `sk_lab_${from.replaceAll('.', '')}x${i}`.padEnd(15, '0');
        const extra = `Idem-Lab-Delay-Ms: 60000\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
        return dial(server.url, charge(key, `delay-${i}`, extra), from);
      },
      // Every charge has claimed its key and is in its delay.
      (server) =>
        waitFor(
          '64 claims',
          async () => /^idem_store_op_duration_seconds_count\{op="claim"\} 64$/m.test(await metrics(server)),
          { timeoutMs: 10_000, everyMs: 50 },
        ),
    );
    expect(outcome).toEqual(ANSWERED);
  });

  it('requests answered 401 before their declared 1 MiB body, lingering, 32 from each of two addresses: the bystander is answered 200 within a second', async () => {
    const outcome = await lockOut({}, async (server, from) => {
      const head = charge('sk_live_nobody', 'k', 'Content-Length: 1000000\r\n\r\n');
      const conn = await dial(server.url, head, from);
      expect(await received(conn, 'HTTP/1.1 401 Unauthorized')).toBe(true);
      return conn;
    });
    expect(outcome).toEqual(ANSWERED);
  });
});

describe.skipIf(process.platform !== 'linux')('the pipelining limit puts its address in a penalty box', () => {
  it('past 32 unanswered, every connection of the address is cut and a new one is closed unanswered; another address is served', async () => {
    const server = await demo({});
    const open: Conn[] = [];
    try {
      // A keep-alive connection from 127.0.0.2, answered once and idle.
      const idle = await dial(server.url, HEALTHZ, '127.0.0.2');
      open.push(idle);
      const first = await nextStatus(idle, 5_000);
      // Another from the same address pipelines 2,000 requests and never reads.
      const flood = await dial(server.url, '', '127.0.0.2');
      open.push(flood);
      flood.socket.pause();
      flood.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(2_000));
      await idle.closed;
      // A new connection from the address is destroyed as it connects: its request is never answered.
      const after = await dial(server.url, BYSTANDER, '127.0.0.2');
      open.push(after);
      const afterStatus = await nextStatus(after, 5_000);
      const other = await dial(server.url, BYSTANDER, '127.0.0.3');
      open.push(other);
      expect({
        first,
        afterStatus,
        afterReceived: after.received(),
        other: await nextStatus(other, 1_000),
        counters: await counters(server),
      }).toEqual({
        first: 200,
        afterStatus: 'closed',
        afterReceived: '',
        other: 200,
        counters: { dropped: 0, overShare: 0, silent: 0, stalled: 3, evicted: 0 },
      });
    } finally {
      for (const conn of open) conn.socket.destroy();
      await server.stop();
    }
  });
});
