/**
 * Fair connections against attackers spread thin (review rev32, N1 and N2), on the real demo process over TCP.
 *
 * - N1: eviction took only from an address holding more than the newcomer's count + 1, so 32 addresses holding one
 *   dripping connection each (cap 32) left nothing evictable: every newcomer was closed unanswered. Now a connection
 *   that holds no work and delivered no request for a second (`STALE_MS`) is evictable whatever its address holds.
 * - N2: the penalty box counted pipelined requests per connection only, so many connections each pipelining 32 (the
 *   limit) from one address were never cut. Now 32 queued behind the first, summed over an address's connections,
 *   is the most one address may have: past it the address goes in the penalty box.
 *
 * Other clients bind other loopback addresses (all of 127.0.0.0/8 is loopback on Linux). Every bound is a limit on
 * waiting for an event, except the one wait for the stale window (a policy of time, not an ordering of events).
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { STALE_MS } from '../../apps/demo/src/connections.js';
import { HEALTHZ, askHealthz, closes, counters, dial, nextStatus, withDemo, type Conn } from './connections-kit.js';

const DRIP = 'GET /healthz HTTP/1.1\r\n';
/** The one wait on time: until a connection has delivered no request for STALE_MS it is not evictable. */
const staleWindow = () => new Promise((resolve) => setTimeout(resolve, STALE_MS + 200));

describe.skipIf(process.platform !== 'linux')('fair connections: attackers spread over many addresses', () => {
  it('32 addresses each holding one connection dripping its headers (cap 32): a bystander is answered 200 within a second, by evicting the oldest', async () => {
    await withDemo({ IDEM_MAX_CONNECTIONS: '32', IDEM_FIRST_BYTE_TIMEOUT_MS: '10000' }, async (server, conns) => {
      const hog: Conn[] = [];
      // One at a time, each connected before the next: 127.0.0.2 holds the oldest.
      for (let i = 0; i < 32; i++) hog.push(await dial(server.url, DRIP, `127.0.0.${2 + i}`));
      for (const conn of hog) conns.add(conn);
      await staleWindow();
      const status = await askHealthz(server, '127.0.0.200');
      // Without the fix nothing is evictable: the bystander is closed unanswered and no hog connection closes.
      const closed = await closes(hog, 1, 2_000);
      const others = hog.slice(1).filter((conn) => conn.socket.destroyed).length;
      expect([status, closed, hog[0]?.socket.destroyed, others, await counters(server)]).toEqual([
        200,
        1,
        true,
        0,
        { dropped: 0, overShare: 0, silent: 0, stalled: 0, evicted: 1 },
      ]);
    });
  });

  it('the same, each re-opened as soon as it closes: a bystander keeping its connections is answered 200 three times in a row within a second each, evicting 3', async () => {
    await withDemo({ IDEM_MAX_CONNECTIONS: '32', IDEM_FIRST_BYTE_TIMEOUT_MS: '10000' }, async (server, hog) => {
      let stopped = false;
      const hold = async (from: string): Promise<void> => {
        while (!stopped) {
          const conn = await dial(server.url, DRIP, from).catch(() => undefined);
          if (conn) {
            hog.add(conn);
            await conn.closed;
            hog.delete(conn);
          }
          // Re-open at once (a short pause only so a refused loop does not spin the event loop).
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      };
      const holders = Array.from({ length: 32 }, (_, i) => hold(`127.0.0.${2 + i}`));
      const bystander: Conn[] = [];
      try {
        await waitFor('32 hog connections', () => hog.size === 32, { timeoutMs: 5_000, everyMs: 10 });
        await staleWindow();
        const statuses: (number | string)[] = [];
        for (let i = 0; i < 3; i++) {
          // Each bystander keeps its connection open, so the cap stays full and each needs an eviction; each comes
          // from its own address, so none holds more than a hog and none of theirs is evictable.
          const { dropped } = await counters(server);
          const conn = await dial(server.url, HEALTHZ, `127.0.0.${200 + i}`);
          bystander.push(conn);
          statuses.push(await nextStatus(conn, 1_000));
          // The evicted address re-opens at once and is refused: it may only recycle its own stale connections for
          // a while. Without that rule it evicts the next stale one, and so on, and this wait times out.
          await waitFor('the evicted address refused', async () => (await counters(server)).dropped > dropped, {
            timeoutMs: 5_000,
            everyMs: 20,
          });
        }
        expect({ statuses, evicted: (await counters(server)).evicted }).toEqual({
          statuses: [200, 200, 200],
          evicted: 3,
        });
      } finally {
        stopped = true;
        for (const conn of [...hog, ...bystander]) conn.socket.destroy();
        await Promise.all(holders);
      }
    });
  });

  it('8 connections from one address each pipelining 32 GET / (the per-connection limit) and never reading: all are cut (over 32 per address); a bystander is answered 200 within a second', async () => {
    await withDemo({ IDEM_MAX_CONNECTIONS: '32' }, async (server, hog) => {
      for (let i = 0; i < 8; i++) {
        const conn = await dial(server.url, '', '127.0.0.2');
        // Never read: the answers queue behind the first on each connection.
        conn.socket.pause();
        hog.add(conn);
      }
      const pipelined = 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(32);
      for (const conn of hog) conn.socket.write(pipelined);
      // A paused client does not see its socket close: the server's count is what is waited for. Without the
      // per-address budget none is cut (each holds 32, the per-connection limit) before the 5 s held-output stall.
      const cut = await waitFor('8 pipelining connections cut', async () => (await counters(server)).stalled === 8, {
        timeoutMs: 3_000,
        everyMs: 50,
      }).catch(() => false);
      // Another connection from the address is refused (the penalty box); another address is served.
      const again = await askHealthz(server, '127.0.0.2', 2_000);
      const status = await askHealthz(server, '127.0.0.3');
      expect([cut, again, status, await counters(server)]).toEqual([
        true,
        'closed',
        200,
        { dropped: 0, overShare: 0, silent: 0, stalled: 9, evicted: 0 },
      ]);
    });
  });
});
