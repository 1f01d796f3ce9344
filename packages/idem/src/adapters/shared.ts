/**
 * @module Helpers the Node-based adapters (Express, Fastify, Nest) share: header lists, stream reading, answers.
 * Built on the public surface (`idem/http`) only, as any adapter is.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { BodyTooLargeError, classifyStatus, joinBytes, type OutcomeKind } from '../http/index.js';

/** Statuses that carry no body: a stored response for them keeps no bytes. */
export const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 204, 205, 304]);

/** An empty body. */
export const NO_BYTES: Uint8Array = new Uint8Array(0);

/**
 * Node's header map (`res.getHeaders()`) as a list of pairs, one per value.
 *
 * @example
 * storableHeaders(headerPairs(res.getHeaders()), DEFAULT_REPLAY_HEADERS)
 */
export function headerPairs(
  headers: Record<string, string | number | readonly string[] | undefined>,
): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const item of value) pairs.push([name, String(item)]);
    else pairs.push([name, String(value)]);
  }
  return pairs;
}

/**
 * One request header as a string (Node joins repeated headers with `, `; a list is joined the same way).
 *
 * @example
 * headerValue(request.headers, 'idempotency-key')
 */
export function headerValue(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const value = headers[name.toLowerCase()];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * Reads a Node stream to bytes, rejecting with {@link BodyTooLargeError} as soon as it exceeds `limit`.
 *
 * @example
 * const body = await readStream(payload, 1_048_576)
 */
export async function readStream(stream: Readable, limit: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<unknown>) {
    const bytes = toBuffer(chunk);
    size += bytes.byteLength;
    if (size > limit) throw new BodyTooLargeError(limit);
    chunks.push(bytes);
  }
  return joinBytes(chunks, size);
}

/**
 * A chunk a handler wrote (string, Buffer or any byte view) as a Buffer of its own.
 *
 * @example
 * toBuffer('caf\u00e9', 'utf8') // → <Buffer 63 61 66 c3 a9>
 */
export function toBuffer(chunk: unknown, encoding?: unknown): Buffer {
  if (typeof chunk === 'string')
    return Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
  if (ArrayBuffer.isView(chunk)) return Buffer.from(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  if (chunk instanceof ArrayBuffer) return Buffer.from(new Uint8Array(chunk));
  throw new TypeError(`Cannot store a response chunk of type ${typeof chunk}.`);
}

/**
 * A Buffer's bytes as a plain `Uint8Array` over an `ArrayBuffer` of its own (what stores expect).
 *
 * @example
 * const body = toBytes(Buffer.concat(chunks))
 */
export function toBytes(buffer: Buffer): Uint8Array {
  const bytes = new Uint8Array(buffer.byteLength);
  bytes.set(buffer);
  return bytes;
}

/**
 * A Web `Response`'s parts, for writing to a framework's own reply.
 *
 * @example
 * const { status, headers, body } = await responseParts(problemResponse)
 */
export async function responseParts(
  response: Response,
): Promise<{ status: number; headers: Array<[string, string]>; body: Buffer }> {
  return { status: response.status, headers: [...response.headers], body: Buffer.from(await response.arrayBuffer()) };
}

/**
 * Puts the response's headers back to the snapshot taken at `end()`. Usually nothing touched them since, and they
 * stay as they are; a `Content-Length` that does not match the bytes sent (one set before the last write) is
 * removed, so Node frames the body itself. `bodyLength` is undefined for a HEAD answer, which keeps the handler's
 * own Content-Length (it describes the body it did not send).
 */
export function restoreHeaders(res: ServerResponse, sent: OutgoingHttpHeaders, bodyLength: number | undefined): void {
  const current = res.getHeaders();
  let same = true;
  let count = 0;
  for (const name in sent) {
    count++;
    if (current[name] !== sent[name]) {
      same = false;
      break;
    }
  }
  if (same) for (const _ in current) if (--count < 0) break;
  const length = sent['content-length'];
  // A Content-Length stays only where it describes the bytes sent (or, on a HEAD answer, the body not sent).
  const lengthTrue = length !== undefined && (bodyLength === undefined || String(length) === String(bodyLength));
  if (!same || count !== 0) {
    for (const name in current) res.removeHeader(name);
    for (const name in sent) {
      const value = sent[name];
      if (value !== undefined && (name !== 'content-length' || lengthTrue)) res.setHeader(name, value);
    }
    return;
  }
  if (length !== undefined && !lengthTrue) res.removeHeader('content-length');
}

/** Node's own check on a chunk passed to `write`/`end`: a string, a Buffer or a Uint8Array. */
export function checkChunk(chunk: unknown): void {
  if (typeof chunk === 'string' || chunk instanceof Uint8Array) return;
  const got =
    chunk === null
      ? 'null'
      : typeof chunk === 'object'
        ? `an instance of ${chunk.constructor?.name ?? 'Object'}`
        : `type ${typeof chunk}`;
  throw nodeError(
    'ERR_INVALID_ARG_TYPE',
    `The "chunk" argument must be of type string or an instance of Buffer or Uint8Array. Received ${got}`,
  );
}

export function nodeError(code: string, message: string): TypeError {
  return Object.assign(new TypeError(message), { code });
}

/** What Node refuses in a reason phrase or a header value (its `checkInvalidHeaderChar`). */
const INVALID_HEADER_CHAR = /[^\t\x20-\x7e\x80-\xff]/;

/**
 * Node's own checks on the head `writeHead` is about to write, made where the handler set it (a held response
 * writes it later, where a throw would be an unhandled rejection): an integer status code, and a reason phrase of
 * Latin-1 characters without CR, LF or other controls. The status must be 100–599, which a record can hold (Node
 * alone takes up to 999). A refused reason phrase is cleared before the throw: Node would refuse it again on the 500
 * the framework's error handler writes next (Fastify's does not reset it), and none is sent from a held response.
 * Header names and values need no check here: `setHeader` checks them at once.
 *
 * @example
 * checkHead(res) // throws ERR_INVALID_CHAR for a statusMessage of 'Créé ✓' or 'OK\r\nX: 1'
 */
export function checkHead(res: ServerResponse, status: unknown = res.statusCode): void {
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599)
    throw Object.assign(new RangeError(`Invalid status code: ${String(status)}`), {
      code: 'ERR_HTTP_INVALID_STATUS_CODE',
    });
  if (!INVALID_HEADER_CHAR.test(res.statusMessage)) return;
  res.statusMessage = '';
  throw nodeError('ERR_INVALID_CHAR', 'Invalid character in statusMessage');
}

/**
 * `writeHead` on a held response: what Node does to the response's head, without writing it. The reason phrase and
 * status are set and checked (see {@link checkHead}), then the headers folded in with `setHeader`, which checks each:
 * as in Node, they take precedence over headers set before.
 *
 * @example
 * holdHead(res, 201, ['Created', { location: '/v1/charges/ch_1' }])
 */
export function holdHead(res: ServerResponse, statusCode: number, rest: readonly unknown[]): void {
  const reason = typeof rest[0] === 'string' ? rest[0] : undefined;
  const headers = reason === undefined ? rest[0] : rest[1];
  if (reason !== undefined) res.statusMessage = reason;
  checkHead(res, statusCode);
  res.statusCode = statusCode;
  if (headers) foldHeaders(res, headers);
}

/**
 * Whether an answer with this status frees the key — retryable or released, by the route's `classify` or else by
 * status — so that a retry may run the work again. Such an answer must not be recorded while the handler still runs.
 *
 * @example
 * freesKey(503, req, options.classify) // → true
 */
export function freesKey<Req>(
  status: number,
  request: Req,
  classify: ((status: number, request: Req) => OutcomeKind | undefined) | undefined,
): boolean {
  const kind = classify?.(status, request) ?? classifyStatus(status);
  return kind === 'failed-retryable' || kind === 'release';
}

/** Applies `writeHead`'s headers argument (an object, a flat `[name, value, ...]` list, or pairs) with setHeader. */
export function foldHeaders(res: ServerResponse, headers: unknown): void {
  if (Array.isArray(headers)) {
    const pairs: Array<[string, string]> = [];
    if (headers.every((item) => Array.isArray(item))) {
      for (const [name, value] of headers as Array<[string, string]>) pairs.push([String(name), String(value)]);
    } else {
      for (let i = 0; i + 1 < headers.length; i += 2) pairs.push([String(headers[i]), String(headers[i + 1])]);
    }
    const grouped = new Map<string, string[]>();
    for (const [name, value] of pairs) grouped.set(name, [...(grouped.get(name) ?? []), value]);
    for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values);
    return;
  }
  if (typeof headers === 'object' && headers !== null) {
    for (const [name, value] of Object.entries(headers as Record<string, unknown>)) {
      if (typeof value === 'string' || typeof value === 'number') res.setHeader(name, String(value));
      else if (Array.isArray(value))
        res.setHeader(
          name,
          value.map((item) => String(item as string)),
        );
    }
  }
}
