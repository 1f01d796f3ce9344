/**
 * @module The node:http ↔ Web bridge of `idem/testing`: serves a Web-standard fetch handler (or a Node request
 * listener) with Node's HTTP server, for adapter harnesses.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import type { ServedApp } from './adapter-harness.js';

/**
 * Serves a Web-standard fetch handler (`(Request) => Promise<Response>`) with Node's HTTP server on 127.0.0.1:0,
 * for harnesses of Web-standard adapters. The request's `signal` aborts if the client goes away first.
 *
 * @example
 * const served = await serveFetch((request) => app.fetch(request))
 * await fetch(`${served.url}/v1/charges`, { method: 'POST', body })
 * await served.close()
 */
export function serveFetch(handle: (request: Request) => Promise<Response>): Promise<ServedApp> {
  return serveNode((req, res) => void bridge(handle, req, res));
}

/**
 * Serves a Node request listener (Koa's `app.callback()`, any `node:http` handler) on 127.0.0.1:0; `close()`
 * ends its open connections too.
 *
 * @example
 * const served = await serveNode(app.callback())
 */
export async function serveNode(listener: (req: IncomingMessage, res: ServerResponse) => unknown): Promise<ServedApp> {
  const server = createServer(listener);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function bridge(
  handle: (request: Request) => Promise<Response>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2)
    headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const init: RequestInit & { duplex?: 'half' } = {
    method: req.method ?? 'GET',
    headers,
    signal: gone.signal,
    ...(hasBody ? { body: Readable.toWeb(req) as unknown as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  };
  try {
    const response = await handle(new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, init));
    const grouped = new Map<string, string[]>();
    for (const [name, value] of response.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
    res.statusCode = response.status;
    for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values);
    if (response.body) {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        if (res.destroyed) break;
        res.write(chunk);
      }
    }
    res.end();
  } catch {
    if (!res.headersSent && !res.destroyed) {
      res.statusCode = 500;
      res.end();
    } else {
      res.destroy();
    }
  }
}
