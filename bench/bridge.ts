/**
 * @module The bench's one node:http bridge to a fetch handler (Hono, idem/http).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';

/**
 * node:http to a fetch handler and back, the way @hono/node-server and the demo's node adapter do it: a Web
 * `Request` over the IncomingMessage (its body a Web stream of the message), then the `Response`'s status, headers
 * and body written to the ServerResponse. The same bridge serves Hono and the Web layer, so they differ only in
 * what runs between. bench/server.ts serves the HTTP runs through it, bench/instructions-run.ts the counted ones.
 *
 * @example
 * createServer((req, res) => void bridge(app.fetch, req, res))
 */
export async function bridge(
  handle: (request: Request) => Promise<Response>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const headers = new Headers();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i] as string, raw[i + 1] as string);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const init: RequestInit & { duplex?: 'half' } = { method: req.method ?? 'GET', headers };
  if (hasBody) {
    init.body = Readable.toWeb(req) as unknown as ReadableStream<Uint8Array>;
    init.duplex = 'half';
  }
  try {
    const response = await handle(new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, init));
    res.statusCode = response.status;
    for (const [name, value] of response.headers) res.appendHeader(name, value);
    res.end(response.body ? Buffer.from(await response.arrayBuffer()) : undefined);
  } catch {
    if (!res.headersSent) {
      res.statusCode = 500;
      res.end();
    } else {
      res.destroy();
    }
  }
}
