/**
 * @module Helpers the Node-based adapters (Express, Fastify) share: header lists, stream reading, answers.
 */
import type { Readable } from 'node:stream';
import { BodyTooLargeError, joinBytes } from '../http/replay.js';

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
