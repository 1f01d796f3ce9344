/**
 * @module The Fastify plugin's reply-level helpers: a payload captured as a stored response, an answer written in
 * its place, and the checks Node would make only when it writes the head.
 */
import { validateHeaderName, validateHeaderValue } from 'node:http';
import type { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import {
  BodyTooLargeError,
  bodyFor,
  readBytes,
  storableHeaders,
  storableNodeHeaders,
  type StoredResponse,
} from '../../http/index.js';
import {
  headerPairs,
  NO_BYTES,
  nodeError,
  NULL_BODY_STATUSES,
  readStream,
  responseParts,
  toBuffer,
  toBytes,
} from '../shared.js';

export interface Captured {
  readonly stored: StoredResponse;
  /** What Fastify writes: the payload as it was, or its bytes when it was a stream (now consumed). */
  readonly payload: unknown;
}

/** The serialized payload `onSend` sees (string, bytes, Node or Web stream, or a Web `Response`) as a stored response. */
export async function capture(
  reply: FastifyReply,
  payload: unknown,
  limit: number,
  replayHeaders: readonly string[],
): Promise<Captured> {
  const stored = (
    status: number,
    body: Uint8Array,
    headers = storableNodeHeaders(reply.getHeaders(), replayHeaders),
  ): StoredResponse => ({ status, headers, body: NULL_BODY_STATUSES.has(status) ? NO_BYTES : body });
  if (payload instanceof Response) {
    const body = await readBytes(payload.body, limit);
    const set = headerPairs(reply.getHeaders()).filter(([name]) => !payload.headers.has(name));
    return {
      stored: stored(payload.status, body, storableHeaders([...set, ...payload.headers], replayHeaders)),
      payload: new Response(bodyFor(payload.status, body), {
        status: payload.status,
        statusText: payload.statusText,
        headers: payload.headers,
      }),
    };
  }
  if (payload === undefined || payload === null) return { stored: stored(reply.statusCode, NO_BYTES), payload };
  if (isNodeStream(payload)) {
    const body = await readStream(payload, limit);
    return { stored: stored(reply.statusCode, body), payload: Buffer.from(body) };
  }
  if (payload instanceof ReadableStream) {
    const body = await readBytes(payload as ReadableStream<Uint8Array>, limit);
    return { stored: stored(reply.statusCode, body), payload: Buffer.from(body) };
  }
  const bytes = toBuffer(payload);
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return { stored: stored(reply.statusCode, toBytes(bytes)), payload };
}

function isNodeStream(value: unknown): value is Readable {
  return typeof value === 'object' && value !== null && typeof (value as { pipe?: unknown }).pipe === 'function';
}

/** An answer as written: status, headers and body bytes. */
export interface Parts {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Buffer;
}

/** Replaces the reply's status, headers and payload from inside `onSend` (nothing has been written yet). */
export function writeParts(reply: FastifyReply, { status, headers, body }: Parts): Buffer {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.code(status);
  for (const [name, value] of headers) reply.header(name, value);
  return body;
}

/** Sends an answer (replay or problem) from a hook; the caller returns `reply` so Fastify stops there. */
export async function answer(reply: FastifyReply, response: Response): Promise<void> {
  const { status, headers, body } = await responseParts(response);
  reply.code(status);
  for (const [name, value] of headers) reply.header(name, value);
  void reply.send(body);
}

/**
 * What Node would refuse when it writes the head, checked before anything is recorded: a status no record can
 * hold (outside 100–599, or not an integer: Node sends 600–999), or a header name or value it rejects (a CR or LF
 * in a value set through `reply.header`, which Fastify does not check). The offending headers are removed and the
 * status set to 500, so the error handler's answer to the returned error can be written, and recorded as it is.
 */
export function unwritable(reply: FastifyReply): Error | undefined {
  const status = reply.statusCode;
  let error: Error | undefined =
    Number.isInteger(status) && status >= 100 && status <= 599
      ? undefined
      : nodeError('ERR_HTTP_INVALID_STATUS_CODE', `Invalid status code: ${String(status)}`);
  const headers = reply.getHeaders();
  for (const name in headers) {
    try {
      validateHeaderName(name);
      validateHeaderValue(name, headers[name] as string);
    } catch (invalid) {
      reply.removeHeader(name);
      error ??= invalid as Error;
    }
  }
  if (error) reply.code(500);
  return error;
}

/**
 * Writes an answer straight to the socket, around Fastify: for when what Fastify would write is an error raised
 * after the answer was recorded (an onSend hook after Idem's that failed), which no retry would get.
 */
export function writeRaw(reply: FastifyReply, { status, headers, body }: Parts): void {
  const res = reply.raw;
  reply.hijack();
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  const grouped = new Map<string, string[]>();
  for (const [name, value] of headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
  for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values);
  res.statusMessage = '';
  res.writeHead(status);
  res.end(body);
}
