/**
 * A TCP proxy for outage tests: put it between a server and its store, then `cut()`, `stall()` and `restore()`
 * the link while requests are in flight.
 *
 * - `cut()` destroys every open connection (both sides) and refuses new ones (accepted, then destroyed at once):
 *   the store's host went away. Clients see ECONNRESET / "Connection terminated unexpectedly".
 * - `stall()` keeps every connection open and accepts new ones, but forwards nothing in either direction: a
 *   partition or a hung server. Only a client-side timeout gets a caller out of it.
 * - `restore()` forwards again. Bytes held during a stall are delivered then (the partition healed), so
 *   a command the client gave up on may still run on the server afterwards — as it would in production.
 * - `dropNextAnswer()` destroys the next connection on which the target sends anything, before a byte of it reaches
 *   the client: in front of an HTTP server, an answer lost after the server did the work and wrote it.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export type ProxyMode = 'open' | 'stalled' | 'cut';

export interface FaultProxy {
  /** `127.0.0.1:<port>` of the proxy. */
  readonly host: string;
  readonly port: number;
  readonly mode: ProxyMode;
  /** Connections currently open through the proxy. */
  readonly connections: number;
  /** `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) with its host and port replaced by the proxy's. */
  via(url: string): string;
  cut(): void;
  stall(): void;
  restore(): void;
  /** Resolves once the next answer (the target's first bytes on any connection from now) was dropped. */
  dropNextAnswer(): Promise<void>;
  /** Answers dropped so far. */
  readonly dropped: number;
  close(): Promise<void>;
}

interface Link {
  readonly client: Socket;
  upstream: Socket | undefined;
  /** Bytes read while not open, per direction, delivered on restore. */
  readonly held: { toUpstream: Buffer[]; toClient: Buffer[] };
}

/** Listens on a free port of 127.0.0.1 and resolves with it once the server is listening. */
export async function listenLocal(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  return (server.address() as AddressInfo).port;
}

/** Whether a server can listen on `port` of 127.0.0.1 now (it is closed again before this resolves). */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * Starts a proxy on 127.0.0.1 (a free port) to `target`.
 *
 * @example
 * const proxy = await startFaultProxy('127.0.0.1', 5432)
 * const server = await startDemo({ IDEM_STORE: proxy.via(POSTGRES_URL) })
 * proxy.cut()
 */
export async function startFaultProxy(targetHost: string, targetPort: number): Promise<FaultProxy> {
  let mode: ProxyMode = 'open';
  const links = new Set<Link>();
  let dropNext: (() => void) | undefined;
  let dropped = 0;

  const destroy = (link: Link): void => {
    links.delete(link);
    link.client.destroy();
    link.upstream?.destroy();
  };

  /** Forwards `from` → `to` while open; holds (and stops reading) otherwise. Backpressure pauses the reader. */
  const forward = (link: Link, from: Socket, to: () => Socket | undefined, held: Buffer[]): void => {
    from.on('data', (chunk: Buffer) => {
      if (dropNext !== undefined && from === link.upstream) {
        const done = dropNext;
        dropNext = undefined;
        dropped++;
        destroy(link);
        done();
        return;
      }
      const target = to();
      if (mode !== 'open' || target === undefined || held.length > 0) {
        held.push(chunk);
        from.pause();
        return;
      }
      if (!target.write(chunk)) {
        from.pause();
        target.once('drain', () => {
          if (mode === 'open' && links.has(link)) from.resume();
        });
      }
    });
    from.on('end', () => {
      // Half-close once everything held has gone out (restore flushes first, then ends).
      if (held.length === 0) to()?.end();
      else from.once('flushed', () => to()?.end());
    });
    from.on('error', () => destroy(link));
    from.on('close', () => destroy(link));
  };

  const openUpstream = (link: Link): void => {
    const upstream = connect({ host: targetHost, port: targetPort });
    link.upstream = upstream;
    forward(link, upstream, () => link.client, link.held.toClient);
    upstream.on('connect', () => flush(link));
  };

  const flush = (link: Link): void => {
    if (mode !== 'open' || !links.has(link) || link.upstream === undefined) return;
    const { client, upstream } = link;
    for (const [held, to, from] of [
      [link.held.toUpstream, upstream, client],
      [link.held.toClient, client, upstream],
    ] as const) {
      while (held.length > 0) to.write(held.shift() as Buffer);
      from.emit('flushed');
      from.resume();
    }
  };

  const server: Server = createServer({ pauseOnConnect: false }, (client) => {
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    const link: Link = { client, upstream: undefined, held: { toUpstream: [], toClient: [] } };
    links.add(link);
    client.setNoDelay(true);
    forward(link, client, () => link.upstream, link.held.toUpstream);
    // While stalled the client's connect succeeds, but nothing reaches the store until restore.
    if (mode === 'open') openUpstream(link);
    else client.pause();
  });
  const port = await listenLocal(server);

  return {
    host: '127.0.0.1',
    port,
    get mode() {
      return mode;
    },
    get connections() {
      return links.size;
    },
    get dropped() {
      return dropped;
    },
    dropNextAnswer(): Promise<void> {
      return new Promise((resolve) => (dropNext = resolve));
    },
    via(url: string): string {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    cut(): void {
      mode = 'cut';
      for (const link of [...links]) destroy(link);
    },
    stall(): void {
      mode = 'stalled';
      for (const link of links) {
        link.client.pause();
        link.upstream?.pause();
      }
    },
    restore(): void {
      mode = 'open';
      for (const link of [...links]) {
        if (link.upstream === undefined) openUpstream(link);
        else flush(link);
      }
    },
    close(): Promise<void> {
      mode = 'cut';
      for (const link of [...links]) destroy(link);
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
