/**
 * @module Fair connections for the node bridge: a per-address share of the connection cap, and a first-byte
 * timeout for a connection that has sent nothing.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
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
  /** Connections held at once; at the cap a newcomer evicts an idle connection (below) or is destroyed. */
  readonly maxConnections: number;
  /** Connections one address (an IPv6 /64) may hold at once; a new one over it is destroyed at once. */
  readonly perAddress: number;
  /** A connection that has sent no byte this long after it was accepted is destroyed, unanswered. */
  readonly firstByteTimeoutMs: number;
  /** A connection whose pending output has not shrunk for this long (its client does not read) is destroyed. */
  readonly writeTimeoutMs: number;
  /** Called for each connection destroyed because `maxConnections` were held and none could be evicted. */
  readonly onDrop?: (() => void) | undefined;
  /** Called for each connection destroyed because its address held its share. */
  readonly onOverShare?: (() => void) | undefined;
  /** Called for each connection destroyed because it sent nothing within `firstByteTimeoutMs`. */
  readonly onSilent?: (() => void) | undefined;
  /** Called for each connection destroyed because its output did not drain within `writeTimeoutMs`. */
  readonly onStalled?: (() => void) | undefined;
  /** Called for each connection evicted to make room, at the cap, for an address holding less than its share. */
  readonly onEvicted?: (() => void) | undefined;
}

/** Unanswered requests one connection may have waiting; a browser pipelines none, and no client needs 32. */
export const MAX_PIPELINED = 32;

/** A held connection: its address, the requests it has in flight, and how its pending output last looked. */
interface Held {
  readonly address: string;
  inFlight: number;
  pending: number;
  stalledSince: number | undefined;
}

/**
 * Holds `server`'s connections to `maxConnections` and to a fair share per address. Each accepted connection
 * counts against its address until its socket closes (node emits `close` once however it closes) or it is evicted,
 * so the count never leaks nor counts twice. At the cap, a newcomer from an address holding less than its share
 * evicts one connection from the address holding the most (one that sent nothing, else one with no request in
 * flight, else one whose client does not read its answers); without one, the newcomer is destroyed. A connection
 * whose pending output has not shrunk for `writeTimeoutMs` is destroyed: no other timeout covers a stalled write.
 * Returns the live count per address, for tests and diagnostics.
 *
 * @example
 * const held = shareConnections(server, { maxConnections: 64, perAddress: 32, firstByteTimeoutMs: 2_000, writeTimeoutMs: 30_000 })
 */
export function shareConnections(server: Server, options: FairnessOptions): () => ReadonlyMap<string, number> {
  const { maxConnections, perAddress, firstByteTimeoutMs, writeTimeoutMs } = options;
  const byAddress = new Map<string, Set<Socket>>();
  const state = new Map<Socket, Held>();
  const release = (socket: Socket): void => {
    const held = state.get(socket);
    if (!held) return;
    state.delete(socket);
    const sockets = byAddress.get(held.address);
    sockets?.delete(socket);
    if (sockets?.size === 0) byAddress.delete(held.address);
  };
  // The request a socket is answering: a socket with none in flight is idle, and the first evicted.
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const held = state.get(req.socket);
    if (!held) return;
    held.inFlight++;
    res.once('close', () => held.inFlight--);
    // Node parses every request in a chunk it has read (64 KiB: some 1,800 `GET /`) before it stops reading for
    // the answers to drain: a client that pipelines more than MAX_PIPELINED unanswered requests is cut, and the
    // bridge does no work for the requests already parsed behind them.
    if (held.inFlight > MAX_PIPELINED) {
      release(req.socket);
      options.onStalled?.();
      req.socket.destroy();
    }
  };
  server.on('request', onRequest);
  server.on('checkContinue', onRequest);
  server.on('connection', (socket: Socket) => {
    const address = addressKey(socket.remoteAddress);
    const mine = byAddress.get(address)?.size ?? 0;
    if (state.size >= maxConnections) {
      const victim = mine < perAddress ? evictable(byAddress, state, mine) : undefined;
      if (!victim) {
        options.onDrop?.();
        socket.destroy();
        return;
      }
      release(victim);
      options.onEvicted?.();
      victim.destroy();
    } else if (mine >= perAddress) {
      options.onOverShare?.();
      socket.destroy();
      return;
    }
    state.set(socket, { address, inFlight: 0, pending: 0, stalledSince: undefined });
    byAddress.set(address, (byAddress.get(address) ?? new Set<Socket>()).add(socket));
    // A connection that has sent nothing costs the others a slot and tells the server nothing: it gets a short
    // first-byte timeout, not the whole headers timeout. Once a byte has arrived (the parser reads the socket
    // natively, and `bytesRead` still counts), the headers, request and keep-alive timeouts take over.
    const silent = setTimeout(() => {
      if (socket.bytesRead > 0) return;
      release(socket);
      options.onSilent?.();
      socket.destroy();
    }, firstByteTimeoutMs);
    silent.unref();
    socket.once('close', () => {
      clearTimeout(silent);
      release(socket);
    });
  });
  // A client that pipelines requests and never reads stalls the server's writes, and no HTTP timeout covers a
  // write: its connection would be held for ever. Each socket's pending output is looked at on a short period.
  const check = setInterval(
    () => {
      const now = Date.now();
      for (const [socket, held] of state) {
        const pending = socket.writableLength;
        if (pending === 0 || pending < held.pending) held.stalledSince = undefined;
        else held.stalledSince ??= now;
        held.pending = pending;
        if (held.stalledSince !== undefined && now - held.stalledSince >= writeTimeoutMs) {
          release(socket);
          options.onStalled?.();
          socket.destroy();
        }
      }
    },
    Math.max(10, Math.min(1_000, Math.floor(writeTimeoutMs / 4))),
  );
  check.unref();
  server.once('close', () => clearInterval(check));
  return () => new Map([...byAddress].map(([address, sockets]) => [address, sockets.size]));
}

/**
 * The connection to evict for a newcomer whose address holds `mine`: from the address holding the most (and more
 * than `mine` + 1, so an eviction never leaves the evicted address below the newcomer's), one that has sent
 * nothing, else one with no request in flight, else one whose answers are waiting for its client to read them.
 */
function evictable(
  byAddress: ReadonlyMap<string, ReadonlySet<Socket>>,
  state: ReadonlyMap<Socket, Held>,
  mine: number,
): Socket | undefined {
  const largest = [...byAddress.values()].sort((a, b) => b.size - a.size);
  for (const sockets of largest) {
    if (sockets.size <= mine + 1) return undefined;
    let best: Socket | undefined;
    let bestRank = 3;
    for (const socket of sockets) {
      const held = state.get(socket);
      const rank = socket.bytesRead === 0 ? 0 : held?.inFlight === 0 ? 1 : socket.writableLength > 0 ? 2 : 3;
      if (rank < bestRank) [best, bestRank] = [socket, rank];
      if (rank === 0) break;
    }
    if (best) return best;
  }
  return undefined;
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
