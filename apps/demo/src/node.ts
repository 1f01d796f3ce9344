/**
 * @module A node:http server around the Web-standard app, with the lab's drop-after-commit fault.
 */
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { problem } from 'idem/http';
import { MAX_BODY_BYTES, type App } from './app.js';

/**
 * Serves `app` on node:http. Bodies over the limit are refused with 413 before the app sees them. Requests the
 * HTTP parser refuses (a bad method, a control byte in a header, a lying Content-Length, headers over 16 KiB) and
 * requests without a usable Host or target get a problem+json answer too, never a bare status line or a dropped
 * socket; and an error in bytes that follow a request never replaces that request's own answer.
 *
 * @example
 * const server = serve(app); server.listen(4000, '127.0.0.1')
 */
export function serve(app: App): Server & { inFlight(): number } {
  let inFlight = 0;
  /** The response being produced on each socket: a parse error in what follows must not answer over it. */
  const answering = new WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>();
  // Node's own Host check answers a bare 400; `handle` answers it with a problem instead.
  const server = createServer({ requireHostHeader: false }, (req, res) => {
    inFlight++;
    answering.set(req.socket, { req, res });
    res.on('close', () => {
      inFlight--;
      if (answering.get(req.socket)?.res === res) answering.delete(req.socket);
    });
    handle(app, req, res).catch((error: unknown) => {
      console.error('demo: bridge failed', error);
      res.destroy();
    });
  });
  server.on('clientError', (error: Error & { code?: string }, socket: Socket) => {
    const pending = answering.get(socket);
    if (pending?.req.complete && !pending.res.writableFinished) {
      // Garbage after a complete request (e.g. a body longer than its Content-Length): that request is being
      // answered; let the answer out, then close. Answering 400 here would hide a charge behind an error.
      pending.res.shouldKeepAlive = false;
      pending.res.once('finish', () => socket.end());
      return;
    }
    if (error.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const status = error.code === 'HPE_HEADER_OVERFLOW' ? 431 : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    socket.end(rawProblem(status, 'The request is not valid HTTP/1.1 (its request line, headers or framing).'));
  });
  server.keepAliveTimeout = 5_000;
  return Object.assign(server, { inFlight: () => inFlight });
}

/** A complete HTTP/1.1 problem+json response as bytes, for answers written before node:http has a response. */
function rawProblem(status: number, detail: string): string {
  const body = JSON.stringify({ type: 'urn:idem:problem:http-invalid', title: STATUS_CODES[status] ?? 'Bad Request', status, detail });
  return [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Bad Request'}`,
    'content-type: application/problem+json',
    'cache-control: no-store',
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
    '',
    body,
  ].join('\r\n');
}

/** How much of an oversized body is read and dropped so its sender still gets the 413; beyond it, the socket is cut. */
const DRAIN_LIMIT_BYTES = 16 * MAX_BODY_BYTES;

/** A Host header value: empty, or a reg-name, IPv4 or bracketed IPv6 address with an optional port (RFC 3986 §3.2). */
const HOST = /^(?:(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]+)(?::\d{1,5})?)?$/;

/**
 * The request's URL, from its target alone: the Host header never changes the route. Origin-form
 * (`/path?query`) and absolute-form (`http://host/path`) targets are accepted; anything else is undefined.
 */
function requestUrl(target: string): URL | undefined {
  try {
    if (target.startsWith('/')) return new URL(`http://localhost${target}`);
    const absolute = new URL(target);
    if (absolute.protocol !== 'http:' && absolute.protocol !== 'https:') return undefined;
    return new URL(`http://localhost${absolute.pathname}${absolute.search}`);
  } catch {
    return undefined;
  }
}

async function handle(app: App, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    // Past the limit, keep reading (and dropping) the rest before answering: closing on unread bytes makes TCP
    // reset the connection, and the client would see the reset (EPIPE) instead of the 413. Past DRAIN_LIMIT,
    // stop reading and answer anyway.
    if (size > DRAIN_LIMIT_BYTES) break;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  }
  if (size > MAX_BODY_BYTES) {
    await write(res, problem({ status: 413, slug: 'request-too-large', title: 'Request body too large', detail: `The body is larger than ${MAX_BODY_BYTES} bytes.` }), true);
    return;
  }
  const url = requestUrl(req.url ?? '/');
  // HTTP/1.1 requires exactly one valid Host (RFC 9112 §3.2); node:http's own check is off so this answer is a problem.
  const hosts = req.rawHeaders.filter((_, i) => i % 2 === 0 && req.rawHeaders[i]?.toLowerCase() === 'host').length;
  const hostInvalid = req.httpVersion === '1.1' && (hosts !== 1 || !HOST.test(req.headers.host ?? ''));
  if (!url || hostInvalid) {
    const detail = url ? 'An HTTP/1.1 request needs one valid Host header.' : 'The request target must be a path (or an absolute http URL).';
    await write(res, problem({ status: 400, slug: 'http-invalid', title: 'Bad Request', detail }), true);
    return;
  }
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const request = new Request(url, {
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
