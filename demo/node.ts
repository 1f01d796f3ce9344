/**
 * @module A node:http server around the Web-standard app, with the lab's drop-after-commit fault.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { problem } from 'idem/http';
import { MAX_BODY_BYTES, type App } from './app.js';

/**
 * Serves `app` on node:http. Bodies over the limit are refused with 413 before the app sees them.
 *
 * @example
 * const server = serve(app); server.listen(4000, '127.0.0.1')
 */
export function serve(app: App): Server & { inFlight(): number } {
  let inFlight = 0;
  const server = createServer((req, res) => {
    inFlight++;
    res.on('close', () => inFlight--);
    handle(app, req, res).catch((error: unknown) => {
      console.error('demo: bridge failed', error);
      res.destroy();
    });
  });
  server.keepAliveTimeout = 5_000;
  return Object.assign(server, { inFlight: () => inFlight });
}

async function handle(app: App, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > MAX_BODY_BYTES) {
      await write(res, problem({ status: 413, slug: 'request-too-large', title: 'Request body too large', detail: `The body is larger than ${MAX_BODY_BYTES} bytes.` }), true);
      return;
    }
    chunks.push(chunk);
  }
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const request = new Request(`http://${req.headers.host ?? 'localhost'}${req.url ?? '/'}`, {
    method: req.method ?? 'GET',
    headers,
    ...(hasBody ? { body: Buffer.concat(chunks) } : {}),
  });
  const response = await app(request);
  if (app.dropsAfterCommit(request)) {
    // The lab's two generals: the work committed; the answer never arrives.
    res.socket?.destroy();
    return;
  }
  await write(res, response, false);
}

async function write(res: ServerResponse, response: Response, close: boolean): Promise<void> {
  const body = Buffer.from(await response.arrayBuffer());
  const headers: Array<[string, string]> = [];
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers.push([name, value]);
  });
  for (const cookie of response.headers.getSetCookie()) headers.push(['set-cookie', cookie]);
  if (close) headers.push(['connection', 'close']);
  res.writeHead(response.status, headers.flat());
  res.end(body);
}
