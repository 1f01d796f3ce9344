/**
 * @module Fair connections for the node bridge: a per-address share of the connection cap, eviction of what has
 * claimed nothing, a first-byte timeout for a connection that has sent nothing, a penalty box for an address that
 * pipelines past the limit, and a bound on the output a connection that does not read may hold.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * One address's default share of the connection cap: an eighth of it, at least 16 (and at most the cap). An address
 * holding fewer connections than its share is always admitted: at the cap it evicts one that holds no work from the
 * address holding the most. Above its share an address may still borrow free slots, up to half the cap
 * ({@link ceilingOf}), so one client's pool or load test is not refused while the server has room; at the cap the
 * borrowed slots are the first evicted. An eighth, not a half: eight addresses at their share, not two, are
 * needed before a newcomer must evict, and with a half two addresses could hold the whole cap between them.
 *
 * @example
 * shareOf(256) // 32
 */
export function shareOf(maxConnections: number): number {
  return Math.min(maxConnections, Math.max(16, Math.floor(maxConnections / 8)));
}

/**
 * The most connections one address may hold, borrowing above its share while the server has room: half the cap
 * (or the share, if that is more). A new connection beyond it is closed at once.
 *
 * @example
 * ceilingOf(256, 32) // 128
 */
export function ceilingOf(maxConnections: number, perAddress: number): number {
  return Math.max(perAddress, Math.floor(maxConnections / 2));
}

export interface FairnessOptions {
  /** Connections held at once; at the cap a newcomer evicts a connection holding no work (below) or is destroyed. */
  readonly maxConnections: number;
  /**
   * Connections one address (an IPv6 /64) is sure to get: under it, a newcomer is admitted even at the cap. Above
   * it, free slots are borrowed up to {@link ceilingOf}; a new connection beyond the ceiling is destroyed at once.
   */
  readonly perAddress: number;
  /** A connection that has sent no byte this long after it was accepted is destroyed, unanswered. */
  readonly firstByteTimeoutMs: number;
  /** A connection whose pending output has not shrunk for this long (its client does not read) is destroyed. */
  readonly writeTimeoutMs: number;
  /** How long an address that pipelined past {@link MAX_PIPELINED} has every connection refused. */
  readonly penaltyMs: number;
  /** Called for each connection destroyed because `maxConnections` were held and none could be evicted. */
  readonly onDrop?: (() => void) | undefined;
  /** Called for each connection destroyed because its address held its ceiling. */
  readonly onOverShare?: (() => void) | undefined;
  /** Called for each connection destroyed because it sent nothing within `firstByteTimeoutMs`. */
  readonly onSilent?: (() => void) | undefined;
  /**
   * Called for each connection destroyed because its output did not drain within `writeTimeoutMs`, because it
   * pipelined past {@link MAX_PIPELINED}, or because its address did so within `penaltyMs`.
   */
  readonly onStalled?: (() => void) | undefined;
  /** Called for each connection evicted to make room, at the cap, for an address holding less than its share. */
  readonly onEvicted?: (() => void) | undefined;
}

/** Unanswered requests one connection may have waiting; a browser pipelines none, and no client needs 32. */
export const MAX_PIPELINED = 32;

/**
 * Requests one address may have queued behind the first on each of its connections, summed over them: past it the
 * address goes in the penalty box, as one connection past {@link MAX_PIPELINED} does. Without it, 128 connections
 * each pipelining 32 (the limit) cost 128 parses of 32 requests per wave, from one address.
 */
export const MAX_PIPELINED_PER_ADDRESS = 32;

/**
 * How long a connection that holds no work may go without a complete request before any newcomer under its share
 * may evict it, whatever its address holds: headers or a body still dripping, or an idle keep-alive.
 */
export const STALE_MS = 1_000;

/**
 * How long an address that lost a connection as stale may only recycle its own stale connections, not take
 * another's: otherwise each evicted connection, re-opened at once, evicts the next, and a bystander's newcomer rarely
 * finds one left.
 */
export const STALE_EVICTED_MS = 5 * STALE_MS;

/**
 * Unsent output a connection may hold while its client does not read: past it, a connection whose output has not
 * shrunk for {@link HELD_OUTPUT_STALL_MS} is cut, not after `writeTimeoutMs`. A client reading a large answer,
 * however slowly, shrinks it between looks (one a second); one that stopped reading is gone within seconds.
 */
export const MAX_HELD_OUTPUT = 128 * 1024;
/** How long output over {@link MAX_HELD_OUTPUT} may stay unshrunk: a browser's hiccup on a poor network passes. */
export const HELD_OUTPUT_STALL_MS = 5_000;

/** A held connection: its address, its requests not yet answered, and how its pending output last looked. */
interface Held {
  readonly address: string;
  readonly requests: Map<ServerResponse, IncomingMessage>;
  pending: number;
  stalledSince: number | undefined;
  /** When it was accepted or last delivered a request (ms since the epoch): its last progress. */
  progressAt: number;
}

/**
 * The bytes of output a connection holds unsent: what its socket buffers, and what the answers queued behind the one
 * being written have buffered (node gives a pipelined answer the socket only once those before it are written).
 */
function heldOutput(socket: Socket, held: Held | undefined): number {
  let bytes = socket.writableLength;
  for (const res of held?.requests.keys() ?? []) if (!res.socket) bytes += res.writableLength;
  return bytes;
}

/**
 * Holds `server`'s connections to `maxConnections` and to a fair share per address. Each accepted connection
 * counts against its address until its socket closes (node emits `close` once however it closes) or it is evicted,
 * so the count never leaks nor counts twice. At the cap, a newcomer from an address holding less than its share
 * evicts one connection from the address holding the most: one that sent nothing, else one that holds no work (no
 * request, a request whose body is still arriving, or one answered before its body was read), else one whose work
 * is a lab delay or whose answers wait for its client to read them; a request being worked on is never evicted.
 * Without one, the newcomer is destroyed. A connection whose pending output has not shrunk for `writeTimeoutMs` is
 * destroyed: no other timeout covers a stalled write. An address that pipelines past {@link MAX_PIPELINED} on one
 * connection, or past {@link MAX_PIPELINED_PER_ADDRESS} over all of them, has all its connections destroyed, and new
 * ones refused for `penaltyMs`. When no address holds more than the newcomer's + 1, a connection is evictable
 * whatever its address holds: one that holds no work or a lab delay or unread answers for {@link STALE_MS}, else the
 * keep-alive idle longest (see `stale`). Returns the live count per address.
 *
 * @example
 * const held = shareConnections(server, { maxConnections: 64, perAddress: 16, firstByteTimeoutMs: 2_000, writeTimeoutMs: 30_000, penaltyMs: 10_000 })
 */
export function shareConnections(server: Server, options: FairnessOptions): () => ReadonlyMap<string, number> {
  const { maxConnections, perAddress, firstByteTimeoutMs, writeTimeoutMs, penaltyMs } = options;
  const ceiling = ceilingOf(maxConnections, perAddress);
  const byAddress = new Map<string, Set<Socket>>();
  const state = new Map<Socket, Held>();
  /** Addresses in the penalty box, and until when (ms since the epoch). */
  const penalized = new Map<string, number>();
  /** Addresses that lost a connection as stale, and until when they may take no other address's (see below). */
  const staleEvicted = new Map<string, number>();
  const release = (socket: Socket): void => {
    const held = state.get(socket);
    if (!held) return;
    state.delete(socket);
    const sockets = byAddress.get(held.address);
    sockets?.delete(socket);
    if (sockets?.size === 0) byAddress.delete(held.address);
  };
  /** Stops counting `socket`, calls `options[why]`, and destroys it. */
  const drop = (socket: Socket, why: `on${string}` & keyof FairnessOptions): void => {
    release(socket);
    options[why]?.();
    socket.destroy();
  };
  /** Requests queued behind the first on each of the address's connections, summed over them. */
  const queuedBehind = (address: string): number => {
    let queued = 0;
    for (const socket of byAddress.get(address) ?? [])
      queued += Math.max(0, (state.get(socket)?.requests.size ?? 0) - 1);
    return queued;
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const held = state.get(req.socket);
    if (!held) return;
    held.requests.set(res, req);
    held.progressAt = Date.now();
    res.once('close', () => held.requests.delete(res));
    // Node parses every request in a chunk it has read (64 KiB: some 1,800 `GET /`) before it stops reading for
    // the answers to drain, and that parse is the cost: a client that pipelines more than MAX_PIPELINED unanswered
    // requests is cut, and its address goes in the penalty box: its other connections are cut now, and new ones
    // are destroyed as they connect, before a byte is read, so it can make the server parse one chunk per
    // `penaltyMs`, not one per connection it opens.
    if (
      held.requests.size > MAX_PIPELINED ||
      (held.requests.size > 1 && queuedBehind(held.address) > MAX_PIPELINED_PER_ADDRESS)
    ) {
      penalized.set(held.address, Date.now() + penaltyMs);
      for (const socket of [...(byAddress.get(held.address) ?? [])]) drop(socket, 'onStalled');
    }
  };
  server.on('request', onRequest);
  server.on('checkContinue', onRequest);
  server.on('connection', (socket: Socket) => {
    const address = addressKey(socket.remoteAddress);
    const until = penalized.get(address);
    if (until !== undefined) {
      if (Date.now() < until) return drop(socket, 'onStalled');
      penalized.delete(address);
    }
    const mine = byAddress.get(address)?.size ?? 0;
    if (state.size >= maxConnections) {
      // At the cap only an address under its share gets in; the slots others borrowed are the first it takes.
      let victim = mine < perAddress ? evictable(byAddress, state, mine) : undefined;
      if (!victim && mine < perAddress) {
        const mayTake = (staleEvicted.get(address) ?? 0) <= Date.now();
        victim = stale(byAddress, state, address, mayTake);
        const lost = victim && state.get(victim)?.address;
        if (lost && lost !== address) staleEvicted.set(lost, Date.now() + STALE_EVICTED_MS);
      }
      if (!victim) return drop(socket, 'onDrop');
      drop(victim, 'onEvicted');
    } else if (mine >= ceiling) {
      return drop(socket, 'onOverShare');
    }
    const held: Held = { address, requests: new Map(), pending: 0, stalledSince: undefined, progressAt: Date.now() };
    state.set(socket, held);
    byAddress.set(address, (byAddress.get(address) ?? new Set<Socket>()).add(socket));
    // A connection that has sent nothing costs the others a slot and tells the server nothing: it gets a short
    // first-byte timeout, not the whole headers timeout. Once a byte has arrived (the parser reads the socket
    // natively, and `bytesRead` still counts), the headers, request and keep-alive timeouts take over.
    const silent = setTimeout(() => {
      if (socket.bytesRead > 0) return;
      drop(socket, 'onSilent');
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
      for (const [address, until] of penalized) if (until <= now) penalized.delete(address);
      for (const [address, until] of staleEvicted) if (until <= now) staleEvicted.delete(address);
      for (const [socket, held] of state) {
        const pending = heldOutput(socket, held);
        if (pending === 0 || pending < held.pending) held.stalledSince = undefined;
        else held.stalledSince ??= now;
        held.pending = pending;
        const stalledFor = held.stalledSince === undefined ? -1 : now - held.stalledSince;
        const limit = pending > MAX_HELD_OUTPUT ? Math.min(writeTimeoutMs, HELD_OUTPUT_STALL_MS) : writeTimeoutMs;
        if (stalledFor >= limit) drop(socket, 'onStalled');
      }
    },
    Math.max(10, Math.min(1_000, Math.floor(writeTimeoutMs / 4))),
  );
  check.unref();
  server.once('close', () => clearInterval(check));
  return () => new Map([...byAddress].map(([address, sockets]) => [address, sockets.size]));
}

/**
 * How much a connection holds, for eviction (the lowest goes first): 0 it has sent nothing; 1 it holds no work —
 * no request, or only requests that claimed nothing (a body still arriving: the work starts once it is whole; an
 * answer given before the body was read); 2 its work is a lab delay (`Idem-Lab-Delay-Ms`: an artificial hold of up
 * to 60 s; outside lab mode the header does nothing, and sending it only gets a connection evicted sooner), or its
 * answers wait for its client to read them; 3 a request is being worked on, never evicted.
 */
function rankOf(socket: Socket, held: Held | undefined): number {
  if (socket.bytesRead === 0) return 0;
  if (heldOutput(socket, held) > 0) return 2;
  let rank = 1;
  for (const [res, req] of held?.requests ?? []) {
    if (res.writableEnded || !req.complete) continue;
    if (Number(req.headers['idem-lab-delay-ms']) > 0) rank = 2;
    else return 3;
  }
  return rank;
}

/**
 * The connection to evict for a newcomer whose address holds `mine`: from the address holding the most (and more
 * than `mine` + 1, so an eviction never leaves the evicted address below the newcomer's), the one of lowest
 * {@link rankOf} below 3.
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
      const rank = rankOf(socket, state.get(socket));
      if (rank < bestRank) [best, bestRank] = [socket, rank];
      if (rank === 0) break;
    }
    if (best) return best;
  }
  return undefined;
}

/**
 * The connection to evict when {@link evictable} found none (attackers spread thin, each address holding few), whatever
 * its address holds, in this order: one that holds no work ({@link rankOf} below 2) and delivered no request for
 * {@link STALE_MS}; then one whose lab delay or unread answers have held it that long (rank 2); then the one holding
 * no work that delivered its last request longest ago — an idle keep-alive costs its client only a reconnect, and
 * clients each asking something every second must not hold the cap against everyone else; then, likewise, the lab
 * delay or unread answers delivered longest ago (lab delays sent faster than they end hold every slot otherwise). The newcomer's own address
 * goes first: one that holds such a connection only recycles it. Then, unless the newcomer's address lost one this
 * way within {@link STALE_EVICTED_MS} (`mayTake` false), the address holding the most, oldest first (a set keeps the
 * order of acceptance): addresses that re-open connections as fast as they are cut do not chase each other through
 * the ones a bystander's newcomer needs.
 */
function stale(
  byAddress: ReadonlyMap<string, ReadonlySet<Socket>>,
  state: ReadonlyMap<Socket, Held>,
  address: string,
  mayTake: boolean,
): Socket | undefined {
  const since = Date.now() - STALE_MS;
  const own = byAddress.get(address);
  const others = mayTake
    ? [...byAddress.values()].filter((sockets) => sockets !== own).sort((a, b) => b.size - a.size)
    : [];
  let held: Socket | undefined;
  // The longest without a request among those holding no work, and among lab delays and unread answers.
  let idle: Socket | undefined;
  let idleAt = Infinity;
  let busy: Socket | undefined;
  let busyAt = Infinity;
  for (const sockets of own ? [own, ...others] : others) {
    for (const socket of sockets) {
      const at = state.get(socket)?.progressAt ?? Infinity;
      const rank = rankOf(socket, state.get(socket));
      if (rank < 2 && at <= since) return socket;
      if (rank === 2 && at <= since) held ??= socket;
      if (rank < 2 && at < idleAt) [idle, idleAt] = [socket, at];
      if (rank === 2 && at < busyAt) [busy, busyAt] = [socket, at];
    }
  }
  return held ?? idle ?? busy;
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
