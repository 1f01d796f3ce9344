/**
 * @module A node:http server around the Web-standard app, with the lab's drop-after-commit fault.
 */
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { MAX_BODY_BYTES, type App } from './app.js';
import { LOOPBACK_HOSTS } from './config.js';
import { shareConnections, shareOf } from './connections.js';
import { stripeProblem } from './stripe-error.js';

export interface ServeOptions {
  /**
   * `Host` names served, lowercase: `name` matches it with any port (or none), `name:port` that port only, `*` any
   * Host. Any other Host (a DNS-rebinding page names its own domain) is answered 421 before anything else is looked
   * at. Default: the loopback names (`localhost`, `127.0.0.1`, `[::1]`).
   */
  readonly allowedHosts?: readonly string[];
  /** Connections held at once; beyond it a new one is closed unanswered, or evicts one (below). Default 256. */
  readonly maxConnections?: number;
  /**
   * Connections one remote address (an IPv6 /64) is sure to get: under it a new connection is admitted even at the
   * cap, by evicting one that holds no work from the address holding the most. Above it the address borrows free
   * slots, up to half of `maxConnections` (or this, if more); a new connection beyond that is closed unanswered.
   * At most `maxConnections`. Default an eighth of `maxConnections`, at least 16.
   */
  readonly maxConnectionsPerAddress?: number;
  /**
   * A connection that has sent no byte this long after it was accepted is closed unanswered. At most
   * `headersTimeoutMs`. Default 2 s (or `headersTimeoutMs` when that is shorter).
   */
  readonly firstByteTimeoutMs?: number;
  /** Time to receive a request's headers, then 408 (`server.headersTimeout`). Default 10 s. */
  readonly headersTimeoutMs?: number;
  /** Time to receive a whole request, then 408 (`server.requestTimeout`). Default 30 s. */
  readonly requestTimeoutMs?: number;
  /** How long an idle keep-alive connection is held (`server.keepAliveTimeout`). Default 5 s. */
  readonly keepAliveTimeoutMs?: number;
  /**
   * How long an address that pipelined more than 32 requests unanswered (on one connection, or queued behind the first
   * on each of its connections together) has every connection refused. Default 10 s.
   */
  readonly penaltyMs?: number;
  /** Called for each connection closed because `maxConnections` were held and none could be evicted. */
  readonly onDrop?: () => void;
  /** Called for each connection closed because its address held its ceiling (half the cap, or its share). */
  readonly onOverShare?: () => void;
  /** Called for each connection closed because it sent nothing within `firstByteTimeoutMs`. */
  readonly onSilent?: () => void;
  /**
   * Called for each connection closed because its answers did not drain for `requestTimeoutMs` (it does not read),
   * or held over 128 KiB of them that did not drain for 5 s; because it or its address pipelined more than 32 requests
   * unanswered (see `penaltyMs`), or its address did so in the last 10 s.
   */
  readonly onStalled?: () => void;
  /** Called for each connection evicted, at the cap, to make room for an address holding less than its share. */
  readonly onEvicted?: () => void;
}

/**
 * Serves `app` on node:http. Each request is judged on its line and headers first: an invalid or unlisted Host
 * (400, 421) or a refusal from `app.admit` (a missing or bad API key: 401) is answered at once, its body never read
 * (and with `Expect: 100-continue`, never sent). Only then is the body read, and over the limit it is a 413.
 * Requests the HTTP parser refuses (a bad method, a control byte in a header, a lying Content-Length, headers over
 * 16 KiB, headers or a request too slow to arrive) get a problem+json answer too, never a bare status line or a
 * dropped socket; and an error in bytes that follow a request never replaces that request's own answer.
 *
 * @example
 * const server = serve(app, { maxConnections: 256 }); server.listen(4000, '127.0.0.1')
 */
export function serve(
  app: App,
  {
    allowedHosts = LOOPBACK_HOSTS,
    maxConnections = 256,
    headersTimeoutMs = 10_000,
    requestTimeoutMs = 30_000,
    keepAliveTimeoutMs = 5_000,
    maxConnectionsPerAddress = shareOf(maxConnections),
    firstByteTimeoutMs = Math.min(2_000, headersTimeoutMs),
    penaltyMs = 10_000,
    onDrop,
    onOverShare,
    onSilent,
    onStalled,
    onEvicted,
  }: ServeOptions = {},
): Server & {
  inFlight(): number;
  connectionsByAddress(): ReadonlyMap<string, number>;
  /** `maxConnections`, enforced with the shares (node's own `server.maxConnections` is unset: it cannot evict). */
  readonly connectionCap: number;
} {
  checkServeOptions({
    maxConnections,
    maxConnectionsPerAddress,
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs,
    firstByteTimeoutMs,
    penaltyMs,
  });
  const allowed = hostAllowList(allowedHosts);
  let inFlight = 0;
  /** The response being produced on each socket: a parse error in what follows must not answer over it. */
  const answering = new WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>();
  /** Sockets whose framing-error answer waits behind an earlier answer. */
  const queued = new WeakSet<Socket>();
  /** Each socket's requests still counted in flight, ended when it closes. */
  const ends = new WeakMap<Socket, Set<() => void>>();
  const inFlightOn = (socket: Socket): Set<() => void> => {
    const known = ends.get(socket);
    if (known) return known;
    const requests = new Set<() => void>();
    ends.set(socket, requests);
    socket.once('close', () => {
      for (const end of [...requests]) end();
    });
    return requests;
  };
  const onRequest = (expectsContinue: boolean) => (req: IncomingMessage, res: ServerResponse) => {
    // A request parsed behind a connection already cut (a pipelining client that does not read) costs nothing.
    if (req.socket.destroyed) return void res.destroy();
    inFlight++;
    answering.set(req.socket, { req, res });
    // A pipelined response still queued when its socket dies never emits `close`: the socket's close ends it too,
    // through one listener per socket (one per request made node warn, a line on stderr per pipelining client).
    const requests = inFlightOn(req.socket);
    const done = () => {
      if (!requests.delete(done)) return;
      res.off('close', done);
      inFlight--;
      if (answering.get(req.socket)?.res === res) answering.delete(req.socket);
    };
    requests.add(done);
    res.once('close', done);
    handle(app, allowed, req, res, expectsContinue).catch((error: unknown) => {
      // A body cut short (the client went away, or the request timed out and was answered 408) is not a failure.
      if ((error as { code?: string }).code !== 'ECONNRESET') console.error('demo: bridge failed', error);
      res.destroy();
    });
  };
  const server = createServer(
    {
      // Node's own Host check answers a bare 400; `handle` answers it with a problem instead.
      requireHostHeader: false,
      headersTimeout: headersTimeoutMs,
      requestTimeout: requestTimeoutMs,
      keepAliveTimeout: keepAliveTimeoutMs,
      // Node checks the two timeouts above on this period (default 30 s, which would let a 30 s limit run to 60).
      connectionsCheckingInterval: Math.min(1_000, headersTimeoutMs),
    },
    onRequest(false),
  );
  // A client may close its side once it has sent its request (a FIN) and still read the answer. Node's default
  // aborts the requests in flight and ends the socket at that FIN: a charge still running was made, and its 201
  // went nowhere. Half-open, node writes the answers in flight, then closes.
  (server as typeof server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // `Expect: 100-continue`: the 100 is sent only once the request is admitted, so a refused sender never sends its body.
  server.on('checkContinue', onRequest(true));
  // CONNECT (a proxy tunnel) is not something this server does: a 405 rather than node's silent close.
  server.on('connect', (_req: IncomingMessage, socket: Socket) => {
    socket.end('HTTP/1.1 405 Method Not Allowed\r\nallow: GET, POST\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
  });
  server.on('clientError', clientErrorAnswer(answering, queued));
  // Past the cap a new connection is closed at once, unanswered (so memory stays bounded), unless its address holds
  // less than its share: then a connection holding no work, of the address holding the most, is closed for it. No
  // address holds more than half the cap, one that sends nothing goes in seconds, and one that does not read its
  // answers goes after `requestTimeoutMs`, or after 5 s once it holds over 128 KiB of them (connections.ts).
  const connectionsByAddress = shareConnections(server, {
    maxConnections,
    perAddress: maxConnectionsPerAddress,
    firstByteTimeoutMs,
    writeTimeoutMs: requestTimeoutMs,
    penaltyMs,
    onDrop,
    onOverShare,
    onSilent,
    onStalled,
    onEvicted,
  });
  server.keepAliveTimeout = keepAliveTimeoutMs;
  return Object.assign(server, { inFlight: () => inFlight, connectionsByAddress, connectionCap: maxConnections });
}

/** Refuses limits that are not positive integers, or that contradict each other. */
function checkServeOptions(limits: {
  readonly maxConnections: number;
  readonly maxConnectionsPerAddress: number;
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
  readonly firstByteTimeoutMs: number;
  readonly penaltyMs: number;
}): void {
  const { maxConnections, maxConnectionsPerAddress, headersTimeoutMs, requestTimeoutMs, firstByteTimeoutMs } = limits;
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new TypeError(`Expected \`${name}\` to be a positive integer, got ${value}.`);
  }
  if (headersTimeoutMs > requestTimeoutMs)
    throw new TypeError('Expected `headersTimeoutMs` to be at most `requestTimeoutMs`.');
  if (firstByteTimeoutMs > headersTimeoutMs)
    throw new TypeError('Expected `firstByteTimeoutMs` to be at most `headersTimeoutMs`.');
  if (maxConnectionsPerAddress > maxConnections)
    throw new TypeError('Expected `maxConnectionsPerAddress` to be at most `maxConnections`.');
}

/**
 * Node's `clientError` handler: a problem+json answer for what the HTTP parser refused, never written over the
 * answer a request on the same socket is being given.
 */
function clientErrorAnswer(
  answering: WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>,
  queued: WeakSet<Socket>,
): (error: Error & { code?: string }, socket: Socket) => void {
  return (error, socket) => {
    const pending = answering.get(socket);
    if (pending?.req.complete && !pending.res.writableFinished) {
      // Garbage after a complete request (e.g. a body longer than its Content-Length): that request is being
      // answered; let the answer out, then close. Answering 400 here would hide a charge behind an error.
      // Node closes the connection once that answer is written (`destroySoon`), over the garbage still arriving:
      // a reset, which a client still sending sees instead of its 201. It lingers instead, as any early answer does.
      pending.res.shouldKeepAlive = false;
      socket.destroySoon = () => endLingering(socket);
      return;
    }
    // Our answer is out and the client is still sending: the parser fails again on each chunk, which is dropped.
    // Cutting here would reset the connection over the unread bytes, and the client could lose the answer.
    if (socket.writableEnded) return;
    if (error.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    if (queued.has(socket)) return;
    const status = error.code === 'HPE_HEADER_OVERFLOW' ? 431 : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const bytes =
      status === 408
        ? rawProblem(408, 'request-timeout', 'The request did not arrive in time: its headers, or the whole request.')
        : rawProblem(
            status,
            'http-invalid',
            'The request is not valid HTTP/1.1 (its request line, headers or framing).',
          );
    if (pending && !pending.res.socket) {
      // A pipelined request whose framing failed behind an answer still being written (a charge's 201): its 400
      // waits its turn, as answerEarly's does. Node hands this request's response the socket once those are out.
      queued.add(socket);
      pending.res.once('socket', () => endLingering(socket, bytes));
      return;
    }
    endLingering(socket, bytes);
  };
}

/** A matcher for `Host` values (and absolute-form authorities) against the allow-list. */
function hostAllowList(entries: readonly string[]): (host: string) => boolean {
  if (entries.includes('*')) return () => true;
  const names = new Set(entries.map((entry) => entry.toLowerCase()));
  return (host) => {
    const value = host.toLowerCase();
    if (names.has(value)) return true;
    const port = /:\d{1,5}$/.exec(value);
    return port !== null && names.has(value.slice(0, port.index));
  };
}

/** A complete HTTP/1.1 problem+json response as bytes, for answers written before node:http has a response. */
function rawProblem(status: number, slug: string, detail: string): string {
  const body = JSON.stringify({
    type: `urn:idem:problem:${slug}`,
    title: STATUS_CODES[status] ?? 'Bad Request',
    status,
    detail,
  });
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

/** The authority of an absolute-form target (`http://host:port/path`), which RFC 9112 §3.2.2 puts above Host. */
function targetAuthority(target: string): string | undefined {
  if (target.startsWith('/')) return undefined;
  try {
    return new URL(target).host;
  } catch {
    return undefined;
  }
}

/**
 * How long a connection whose request was answered before its body was read is kept open, the rest of that body
 * left unread, before it is cut. Cutting at once would reset the connection over the unread bytes, and a client
 * still sending could see the reset instead of its answer (the "lingering close" of Apache and nginx).
 */
const LINGER_MS = 2_000;

/**
 * Answers `req` without reading its body. When the body is still to come, the answer goes straight onto the
 * socket with `Connection: close` and a FIN, and the body is left unread: node reads at most the request stream's
 * small buffer (16 KiB) before it stops reading the socket, and the connection is cut after LINGER_MS. Under
 * `Expect: 100-continue` the body was never asked for, so the answer simply closes the connection.
 */
async function answerEarly(
  req: IncomingMessage,
  res: ServerResponse,
  response: Response,
  close: boolean,
  expectsContinue: boolean,
): Promise<void> {
  const pending =
    !req.complete && (req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0');
  if (!pending || expectsContinue) {
    await write(res, response, close || expectsContinue);
    return;
  }
  const bytes = await rawResponse(response, req.method === 'HEAD');
  // A pipelined request's answer waits its turn: node gives a response the socket only once the answers before it
  // are written, and writing to the socket before then would put this one ahead of theirs (a charge's 201 lost).
  if (!res.socket) await new Promise((resolve) => res.once('socket', resolve));
  // The rest of the body is not wanted: reading stops now (node would stop once its 16 KiB buffer is full), so a
  // client still sending costs nothing until the cut, however it dribbles its bytes.
  req.socket.pause();
  endLingering(req.socket, bytes);
}

/** Ends `socket` after `bytes` (a FIN), then cuts it LINGER_MS later unless the client has closed by then. */
function endLingering(socket: Socket, bytes: string | Buffer = ''): void {
  const cut = setTimeout(() => socket.destroy(), LINGER_MS);
  socket.once('close', () => clearTimeout(cut));
  socket.end(bytes);
}

/** `response` as the bytes of a complete HTTP/1.1 answer that closes the connection, for writing to the socket. */
async function rawResponse(response: Response, head: boolean): Promise<Buffer> {
  const body = Buffer.from(await response.arrayBuffer());
  const lines = [
    `HTTP/1.1 ${response.status} ${STATUS_CODES[response.status] ?? ''}`,
    `date: ${new Date().toUTCString()}`,
  ];
  response.headers.forEach((value, name) => {
    if (!['connection', 'content-length', 'transfer-encoding', 'set-cookie'].includes(name))
      lines.push(`${name}: ${value}`);
  });
  for (const cookie of response.headers.getSetCookie()) lines.push(`set-cookie: ${cookie}`);
  lines.push(`content-length: ${body.byteLength}`, 'connection: close', '', '');
  return Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), head ? Buffer.alloc(0) : body]);
}

async function handle(
  app: App,
  allowed: (host: string) => boolean,
  req: IncomingMessage,
  res: ServerResponse,
  expectsContinue: boolean,
): Promise<void> {
  const url = requestUrl(req.url ?? '/');
  /** A request refused before the app sees it: a problem answered at once, the connection closed after. */
  const refuse = (problem: Parameters<typeof stripeProblem>[0]) =>
    answerEarly(req, res, stripeProblem(problem), true, expectsContinue);
  // HTTP/1.1 requires exactly one valid Host (RFC 9112 §3.2); node:http's own check is off so this answer is a problem.
  const hosts = req.rawHeaders.filter((_, i) => i % 2 === 0 && req.rawHeaders[i]?.toLowerCase() === 'host').length;
  const hostInvalid = req.httpVersion === '1.1' && (hosts !== 1 || !HOST.test(req.headers.host ?? ''));
  if (!url || hostInvalid) {
    const detail = url
      ? 'An HTTP/1.1 request needs one valid Host header.'
      : 'The request target must be a path (or an absolute http URL).';
    return refuse({ status: 400, slug: 'http-invalid', title: 'Bad Request', detail });
  }
  // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 reaches this server with
  // `Host: evil.example`. Only the names the server is known by are served (an HTTP/1.0 request without Host is
  // not a browser's).
  const named = [req.headers.host, targetAuthority(req.url ?? '/')].filter(
    (host): host is string => host !== undefined && host !== '',
  );
  const stranger = named.find((host) => !allowed(host));
  if (stranger !== undefined) {
    const detail = `This server does not serve the host ${JSON.stringify(stranger.slice(0, 100))}. Use the name it is configured for (IDEM_ALLOWED_HOSTS).`;
    return refuse({ status: 421, slug: 'host-not-allowed', title: 'Misdirected Request', detail });
  }
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const method = req.method ?? 'GET';
  const head = new Request(url, { method, headers });
  // Decided on the head alone: a caller without a valid API key is answered now, and its body is never read.
  const admission = app.admit(head);
  if (admission instanceof Response) {
    await answerEarly(req, res, admission, false, expectsContinue);
    return;
  }
  if (admission === 'no-body') {
    await answerEarly(req, res, await app(head), false, expectsContinue);
    return;
  }
  if (expectsContinue) res.writeContinue();
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
    await write(
      res,
      stripeProblem({
        status: 413,
        slug: 'request-too-large',
        title: 'Request body too large',
        detail: `The body is larger than ${MAX_BODY_BYTES} bytes.`,
      }),
      true,
    );
    return;
  }
  const request = new Request(url, { method, headers, body: Buffer.concat(chunks) });
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
