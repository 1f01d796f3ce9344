/**
 * Fair connections in the node bridge (issue 30, item 1), in-process: which address a connection counts against,
 * the count per address staying exact however sockets die (an end, a destroy, a reset, an error after garbage), and
 * the new options refused by name. The lock-out itself — 300 idle sockets from one address against a real demo
 * process — is in test/security/fair-connections.test.ts.
 */
import { once } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { App } from './app.js';
import { addressKey, ceilingOf, shareOf } from './connections.js';
import { serve } from './node.js';

const app: App = Object.assign(async () => new Response('ok'), {
  dropsAfterCommit: () => false,
  admit: () => 'no-body' as const,
});

describe('the address a connection counts against', () => {
  it('IPv4 as is, IPv4-mapped IPv6 as IPv4, IPv6 by its /64; no address is "unknown"', () => {
    expect(
      [
        '127.0.0.1',
        '::ffff:10.1.2.3',
        '::FFFF:10.1.2.3',
        '2001:db8::1',
        '2001:db8:0:0:ffff::2',
        '2001:0db8:0000:0000:1:2:3:4',
        '2001:db8:0:1::1',
        '::1',
        'fe80::1%eth0',
        '64:ff9b::192.0.2.1',
        '',
        undefined,
      ].map(addressKey),
    ).toEqual([
      '127.0.0.1',
      '10.1.2.3',
      '10.1.2.3',
      '2001:db8:0:0::/64',
      '2001:db8:0:0::/64',
      '2001:db8:0:0::/64',
      '2001:db8:0:1::/64',
      '0:0:0:0::/64',
      'fe80:0:0:0::/64',
      '64:ff9b:0:0::/64',
      'unknown',
      'unknown',
    ]);
  });

  it('the default share is an eighth of the cap, at least 16 and at most the cap; the ceiling half the cap', () => {
    expect([1024, 256, 128, 16, 8, 1].map(shareOf)).toEqual([128, 32, 16, 16, 8, 1]);
    expect([ceilingOf(256, 32), ceilingOf(32, 16), ceilingOf(8, 8), ceilingOf(16, 4)]).toEqual([128, 16, 8, 8]);
  });
});

describe('the count per address', () => {
  const open: Socket[] = [];
  let server: ReturnType<typeof serve> | undefined;
  afterEach(async () => {
    for (const socket of open.splice(0)) socket.destroy();
    if (server) {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
      server = undefined;
    }
  });

  /** Connects from `localAddress`; resolves once connected, with a promise settled when the client sees it close. */
  const dial = async (port: number, localAddress = '127.0.0.1') => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    socket.on('error', () => undefined);
    open.push(socket);
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    await once(socket, 'connect');
    return { socket, closed };
  };

  it('stays exact when sockets end, are destroyed, reset, or error: the share is free again, nothing leaks', async () => {
    let overShare = 0;
    // A cap of 8: the ceiling (half the cap) is the share of 4, so the fifth from one address is over it.
    server = serve(app, {
      maxConnections: 8,
      maxConnectionsPerAddress: 4,
      firstByteTimeoutMs: 10_000,
      onOverShare: () => overShare++,
    });
    // The server side of each accepted connection, in order: the test waits on their closes, never on a clock.
    const accepted: Array<Promise<unknown>> = [];
    server.on('connection', (socket: Socket) => accepted.push(new Promise((resolve) => socket.once('close', resolve))));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const waitAccepted = async (n: number) => {
      while (accepted.length < n) await once(server as NonNullable<typeof server>, 'connection');
    };

    const first = await Promise.all(Array.from({ length: 4 }, () => dial(port)));
    await waitAccepted(4);
    expect(Object.fromEntries(server.connectionsByAddress())).toEqual({ '127.0.0.1': 4 });

    // Four ways to go: a FIN, a destroy, a reset (the server sees ECONNRESET), garbage then a reset.
    first[0]?.socket.end();
    first[1]?.socket.destroy();
    first[2]?.socket.resetAndDestroy();
    first[3]?.socket.write('NOT HTTP\r\n\r\n', () => first[3]?.socket.resetAndDestroy());
    await Promise.all(accepted.slice(0, 4));
    expect(Object.fromEntries(server.connectionsByAddress())).toEqual({});

    // The share is whole again: four more are held, the fifth is closed at once; another address is not affected.
    const second = await Promise.all(Array.from({ length: 4 }, () => dial(port)));
    await waitAccepted(8);
    const fifth = await dial(port);
    await fifth.closed;
    const other = await dial(port, '127.0.0.2');
    await waitAccepted(10);
    expect({
      byAddress: Object.fromEntries(server.connectionsByAddress()),
      held: second.map(({ socket }) => socket.destroyed),
      overShare,
      fifthReceived: fifth.socket.bytesRead,
      other: other.socket.destroyed,
    }).toEqual({
      byAddress: { '127.0.0.1': 4, '127.0.0.2': 1 },
      held: [false, false, false, false],
      overShare: 1,
      fifthReceived: 0,
      other: false,
    });
  });

  it('refuses a share above the cap, or a first-byte timeout above the headers timeout, naming the option', () => {
    expect(() => serve(app, { maxConnections: 8, maxConnectionsPerAddress: 9 })).toThrow(
      'Expected `maxConnectionsPerAddress` to be at most `maxConnections`.',
    );
    expect(() => serve(app, { headersTimeoutMs: 1_000, firstByteTimeoutMs: 1_001 })).toThrow(
      'Expected `firstByteTimeoutMs` to be at most `headersTimeoutMs`.',
    );
    expect(() => serve(app, { firstByteTimeoutMs: 0 })).toThrow(
      'Expected `firstByteTimeoutMs` to be a positive integer, got 0.',
    );
  });
});

describe('a client that does not read its answers', () => {
  it('is cut once its pending output has not shrunk for requestTimeoutMs, and counted once', async () => {
    // 16 MiB does not fit in the loopback socket buffers: with the client paused, the server's write stalls.
    const big: App = Object.assign(async () => new Response(new Uint8Array(16 * 1024 * 1024)), {
      dropsAfterCommit: () => false,
      admit: () => 'no-body' as const,
    });
    let stalled = 0;
    let onStalled: () => void = () => undefined;
    const cut = new Promise<'cut'>((resolve) => (onStalled = () => resolve('cut')));
    const server = serve(big, {
      headersTimeoutMs: 300,
      requestTimeoutMs: 300,
      onStalled: () => {
        stalled++;
        onStalled();
      },
    }).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
    client.on('error', () => undefined);
    try {
      client.pause();
      client.write('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n');
      // Without the write-stall check, no timeout covers the stalled write and this waits out.
      const outcome = await Promise.race([cut, new Promise<'held'>((r) => setTimeout(() => r('held'), 5_000))]);
      expect({ outcome, stalled, held: [...server.connectionsByAddress()] }).toEqual({
        outcome: 'cut',
        stalled: 1,
        held: [],
      });
    } finally {
      client.destroy();
      server.close();
    }
  });
});
