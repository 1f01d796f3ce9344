/**
 * @module Fair connections for the node bridge: a per-address share of the connection cap, and a first-byte
 * timeout for a connection that has sent nothing.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * One address's default share of the connection cap: half of it. One address can never hold every slot, so others
 * always keep half; and a single legitimate client is never refused for its pool (this repo's own suites burst 50
 * to 67 connections from one address, and a developer's load test from one machine does more).
 *
 * @example
 * shareOf(256) // 128
 */
export function shareOf(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 2));
}

export interface FairnessOptions {
  /** Connections one address (an IPv6 /64) may hold at once; a new one over it is destroyed at once. */
  readonly perAddress: number;
  /** A connection that has sent no byte this long after it was accepted is destroyed, unanswered. */
  readonly firstByteTimeoutMs: number;
  /** Called for each connection destroyed because its address held its share. */
  readonly onOverShare?: (() => void) | undefined;
  /** Called for each connection destroyed because it sent nothing within `firstByteTimeoutMs`. */
  readonly onSilent?: (() => void) | undefined;
}

/**
 * Holds `server`'s connections to a fair share per address: node's `maxConnections` bounds the total, and this
 * keeps one address from taking all of it. Each accepted connection counts against its address until its socket
 * closes — however it closes (an end, a reset, an error, a destroy: node emits `close` once for each), so the count
 * never leaks. Returns the live count per address, for tests and diagnostics.
 *
 * @example
 * const held = shareConnections(server, { perAddress: 32, firstByteTimeoutMs: 2_000 }); held().get('127.0.0.1')
 */
export function shareConnections(
  server: Server,
  { perAddress, firstByteTimeoutMs, onOverShare, onSilent }: FairnessOptions,
): () => ReadonlyMap<string, number> {
  const held = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = addressKey(socket.remoteAddress);
    const count = held.get(address) ?? 0;
    if (count >= perAddress) {
      onOverShare?.();
      socket.destroy();
      return;
    }
    held.set(address, count + 1);
    // A connection that has sent nothing costs the others a slot and tells the server nothing: it gets a short
    // first-byte timeout, not the whole headers timeout. Once a byte has arrived (the parser reads the socket
    // natively, and `bytesRead` still counts), the headers, request and keep-alive timeouts take over.
    const silent = setTimeout(() => {
      if (socket.bytesRead > 0) return;
      onSilent?.();
      socket.destroy();
    }, firstByteTimeoutMs);
    silent.unref();
    socket.once('close', () => {
      clearTimeout(silent);
      const left = (held.get(address) ?? 1) - 1;
      if (left > 0) held.set(address, left);
      else held.delete(address);
    });
  });
  return () => new Map(held);
}

/**
 * The address a connection counts against: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or an IPv6
 * address's /64 — one host or one customer line usually holds a whole /64, so counting single IPv6 addresses would
 * give it 2^64 shares. A socket already gone (no address) counts as `unknown`.
 *
 * @example
 * addressKey('2001:db8::1') // '2001:db8:0:0::/64'
 */
export function addressKey(address: string | undefined): string {
  if (address === undefined || address === '') return 'unknown';
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped?.[1]) return mapped[1];
  if (!address.includes(':')) return address;
  const bare = address.split('%')[0] ?? '';
  const [head = '', tail] = bare.split('::');
  const groups = (part: string) =>
    part === '' ? [] : part.split(':').flatMap((g) => (g.includes('.') ? [g, g] : [g]));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const full = [...left, ...Array.from({ length: Math.max(0, 8 - left.length - right.length) }, () => '0'), ...right];
  return `${full
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}
