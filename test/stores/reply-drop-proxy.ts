/**
 * An HTTP/1.1 proxy that loses one reply on purpose: put it between an HTTP client (the AWS SDK) and its server
 * (dynalite), arm it with a predicate, and the next request that matches is forwarded to the server — which
 * applies it and answers — but the answer never reaches the client: the proxy closes both sockets at its first
 * byte. A client with retries (`maxAttempts: 2`) then sends the same request again, as it would after a reply
 * lost on a real network. Everything else is forwarded untouched. `test/fault-proxy.ts` cuts and stalls links
 * as a whole; this one needs to see request boundaries, so it reads `Content-Length`-framed requests (no
 * chunked bodies, no pipelining: what the SDK sends).
 */
import { connect, createServer, type Socket } from 'node:net';
import { listenLocal } from '../fault-proxy.js';

/** One request as the proxy saw it. */
export interface SeenRequest {
  /** The `x-amz-target` header (e.g. `DynamoDB_20120810.PutItem`), if any. */
  readonly target: string | undefined;
  /** The body, as UTF-8 text. */
  readonly body: string;
}

export interface ReplyDropProxy {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  /** Every request forwarded so far, in order. */
  readonly requests: readonly SeenRequest[];
  /**
   * Drops the reply to the next request `match` accepts. Resolves with that request once its reply was dropped —
   * that is, once the server had answered it, so the server has applied it.
   */
  dropReplyTo(match: (request: SeenRequest) => boolean): Promise<SeenRequest>;
  close(): Promise<void>;
}

/**
 * Starts the proxy on 127.0.0.1 (a free port) in front of `targetHost:targetPort`.
 *
 * @example
 * const proxy = await startReplyDropProxy('127.0.0.1', dynalitePort)
 * const dropped = proxy.dropReplyTo((r) => r.target === 'DynamoDB_20120810.PutItem')
 */
export async function startReplyDropProxy(targetHost: string, targetPort: number): Promise<ReplyDropProxy> {
  const requests: SeenRequest[] = [];
  const sockets = new Set<Socket>();
  let armed: { match: (request: SeenRequest) => boolean; resolve: (request: SeenRequest) => void } | undefined;

  const server = createServer((client) => {
    const upstream = connect({ host: targetHost, port: targetPort });
    sockets.add(client).add(upstream);
    client.setNoDelay(true);
    /** The request whose reply is to be dropped, once this connection has sent it. */
    let dropping: { request: SeenRequest; resolve: (request: SeenRequest) => void } | undefined;
    let pending = Buffer.alloc(0);

    const destroy = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };

    client.on('data', (chunk: Buffer) => {
      // Note each complete request before forwarding its last bytes, so the decision precedes the reply.
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end === -1) break;
        const head = pending.subarray(0, end).toString('latin1');
        const length = Number(/^content-length:\s*(\d+)\s*$/im.exec(head)?.[1] ?? 0);
        if (pending.length < end + 4 + length) break;
        const request: SeenRequest = {
          target: /^x-amz-target:\s*(.+?)\s*$/im.exec(head)?.[1],
          body: pending.subarray(end + 4, end + 4 + length).toString('utf8'),
        };
        pending = pending.subarray(end + 4 + length);
        requests.push(request);
        if (armed?.match(request)) {
          dropping = { request, resolve: armed.resolve };
          armed = undefined;
        }
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (dropping) {
        const { request, resolve } = dropping;
        destroy();
        resolve(request);
        return;
      }
      client.write(chunk);
    });
    client.on('end', () => upstream.end());
    upstream.on('end', () => client.end());
    client.on('error', destroy);
    upstream.on('error', destroy);
    client.on('close', destroy);
    upstream.on('close', destroy);
  });
  const port = await listenLocal(server);

  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests,
    dropReplyTo(match) {
      if (armed) throw new Error('the proxy is already armed');
      return new Promise((resolve) => {
        armed = { match, resolve };
      });
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
