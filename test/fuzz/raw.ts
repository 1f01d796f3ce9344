/**
 * Raw HTTP/1.1 over `node:net`, for what `fetch` refuses to send: bare CR or LF in a header, duplicate
 * `Idempotency-Key` headers, invalid methods, non-Latin-1 header bytes, truncated bodies and lying
 * `Content-Length`s. Every exchange is bounded: a socket that neither answers nor closes in time is `hung`.
 */
import { connect } from 'node:net';

/** What came back on the socket. */
export type RawOutcome =
  | {
      readonly kind: 'response';
      readonly status: number;
      readonly headers: ReadonlyMap<string, string>;
      readonly body: Buffer;
    }
  /** The server closed the connection without answering a byte. */
  | { readonly kind: 'closed' }
  /** Neither an answer nor a close within the time limit. */
  | { readonly kind: 'hung' };

export interface RawOptions {
  /** Give up (and report `hung`) after this long. Default 10 s. */
  readonly timeoutMs?: number;
  /** Half-close the socket after writing (the client has nothing more to send). Default true. */
  readonly end?: boolean;
}

/**
 * Writes `bytes` to `url`'s host and port and reads the first response (headers, then `Content-Length` bytes
 * of body or everything up to the close).
 *
 * @example
 * const outcome = await rawExchange(url, 'FOO /v1/charges HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
 */
export function rawExchange(
  url: string,
  bytes: string | Buffer,
  { timeoutMs = 10_000, end = true }: RawOptions = {},
): Promise<RawOutcome> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (outcome: RawOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => finish(parse(Buffer.concat(chunks), false) ?? { kind: 'hung' }), timeoutMs);
    socket.on('connect', () => {
      socket.write(bytes);
      if (end) socket.end();
    });
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const complete = parse(Buffer.concat(chunks), false);
      if (complete) finish(complete);
    });
    // A reset after a complete answer is still that answer (the server may close before reading all we sent).
    socket.on('error', () => finish(parse(Buffer.concat(chunks), true) ?? { kind: 'closed' }));
    socket.on('close', () => finish(parse(Buffer.concat(chunks), true) ?? { kind: 'closed' }));
  });
}

/** The first response in `data`, once complete (or, at `eof`, whatever body arrived); undefined if not yet. */
function parse(data: Buffer, eof: boolean): RawOutcome | undefined {
  const head = data.indexOf('\r\n\r\n');
  if (head < 0)
    return eof && data.length > 0 ? { kind: 'response', status: 0, headers: new Map(), body: data } : undefined;
  const lines = data.subarray(0, head).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  // An interim answer (100 Continue) comes before the real one.
  if (status >= 100 && status < 200 && status !== 101) return parse(data.subarray(head + 4), eof);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  const rest = data.subarray(head + 4);
  const length = headers.get('content-length');
  if (length !== undefined) {
    if (rest.length >= Number(length))
      return { kind: 'response', status, headers, body: rest.subarray(0, Number(length)) };
    return eof ? { kind: 'response', status, headers, body: rest } : undefined;
  }
  if (headers.get('transfer-encoding') === 'chunked') {
    const body = dechunk(rest);
    if (body) return { kind: 'response', status, headers, body };
    return eof ? { kind: 'response', status, headers, body: rest } : undefined;
  }
  return eof ? { kind: 'response', status, headers, body: rest } : undefined;
}

/** The body of a complete chunked message, or undefined while incomplete. */
function dechunk(data: Buffer): Buffer | undefined {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = data.indexOf('\r\n', at);
    if (eol < 0) return undefined;
    const size = parseInt(data.subarray(at, eol).toString('latin1'), 16);
    if (!Number.isFinite(size)) return undefined;
    if (size === 0) return Buffer.concat(parts);
    if (data.length < eol + 2 + size + 2) return undefined;
    parts.push(data.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/**
 * An HTTP/1.1 request as bytes. `headers` are written in order, as given (duplicates and odd bytes included);
 * `Host` and `Connection: close` are added first unless `bare` is set.
 *
 * @example
 * rawRequest('POST', '/v1/charges', [['Idempotency-Key', 'a'], ['Idempotency-Key', 'b']], body)
 */
export function rawRequest(
  method: string,
  target: string,
  headers: ReadonlyArray<readonly [string, string | Buffer]>,
  body: string | Buffer = '',
  { bare = false }: { readonly bare?: boolean } = {},
): Buffer {
  const parts: Buffer[] = [Buffer.from(`${method} ${target} HTTP/1.1\r\n`, 'latin1')];
  if (!bare) parts.push(Buffer.from('Host: 127.0.0.1\r\nConnection: close\r\n', 'latin1'));
  for (const [name, value] of headers) {
    parts.push(
      Buffer.from(`${name}: `, 'latin1'),
      typeof value === 'string' ? Buffer.from(value, 'latin1') : value,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from('\r\n'), typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
  return Buffer.concat(parts);
}
