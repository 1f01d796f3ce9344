/**
 * @module Reading a Node request's body for the fingerprint without consuming it: what an adapter for a framework
 * on `node:http` (Express, Fastify, Koa…) needs before the framework's own body parser runs.
 */
import { BodyTooLargeError, joinBytes } from './replay.js';

/**
 * The subset of Node's `IncomingMessage` that {@link readAndRestore} calls: any `node:http` request (Express's
 * `req`, Fastify's `request.raw`, Koa's `ctx.req`) fits, and no Node type is imported.
 */
export interface NodeRequestBody {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly complete: boolean;
  readonly readableEnded: boolean;
  readonly readableFlowing: boolean | null;
  readonly readableDidRead: boolean;
  readonly readableLength: number;
  readonly readableEncoding: string | null;
  read(): unknown;
  unshift(chunk: unknown, encoding?: string): void;
  resume(): unknown;
  on(event: 'readable' | 'end' | 'error', listener: (error?: unknown) => void): unknown;
  off(event: 'readable' | 'end' | 'error', listener: (error?: unknown) => void): unknown;
}

const NO_BYTES = new Uint8Array(0);

/**
 * Reads the raw body without consuming it. Usually the whole message is already in the request's buffer by the
 * next microtask (node:http parses a small request's body in the same turn as its head): then its bytes are
 * copied from the buffer, which is left as it is for the next reader. Otherwise chunks are read in paused mode
 * and, once the message is complete and before `end` is emitted, put back with `unshift`, so the next reader (a
 * body parser) sees an untouched stream. Rejects with {@link BodyTooLargeError} past `limit`, and with
 * `new Error(alreadyRead)` when someone read from the stream first.
 *
 * @example
 * const body = await readAndRestore(req, 1_048_576, 'mount idempotency() before the body parser')
 */
export function readAndRestore(req: NodeRequestBody, limit: number, alreadyRead: string): Promise<Uint8Array> {
  if (req.readableEnded || req.readableFlowing === true) return Promise.reject(new Error(alreadyRead));
  return Promise.resolve(req).then((request) => buffered(request, limit) ?? readSlowly(request, limit, alreadyRead));
}

/**
 * The complete body, copied from the request's own buffer without reading it; undefined when that is not the
 * whole story (the message is not complete yet, someone read from it, or its buffer is not plain bytes).
 */
function buffered(req: NodeRequestBody, limit: number): Uint8Array | undefined {
  if (req.readableEnded || req.readableFlowing === true || req.readableDidRead) return undefined;
  const size = req.readableLength;
  // Complete, or holding all the bytes its Content-Length declares (node:http marks it complete a moment later).
  if (
    !req.complete &&
    (req.headers['transfer-encoding'] !== undefined || req.headers['content-length'] !== String(size))
  )
    return undefined;
  if (size > limit) throw new BodyTooLargeError(limit);
  if (size === 0) return NO_BYTES;
  const chunks = (req as unknown as { readonly readableBuffer?: Iterable<unknown> }).readableBuffer;
  if (!chunks || typeof chunks[Symbol.iterator] !== 'function') return undefined;
  const body = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    if (chunk === null) continue; // an entry already consumed (Node keeps them as null in its buffer array)
    if (!(chunk instanceof Uint8Array) || offset + chunk.byteLength > size) return undefined;
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return offset === size ? body : undefined;
}

function readSlowly(req: NodeRequestBody, limit: number, alreadyRead: string): Promise<Uint8Array> {
  if (req.readableEnded || req.readableFlowing === true) return Promise.reject(new Error(alreadyRead));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    // With an encoding set on the request (`setEncoding()`, by an earlier hook) `read()` returns text: it is
    // measured and fingerprinted as its bytes in that encoding, and put back as the same text.
    const encoding = (req.readableEncoding ?? undefined) as BufferEncoding | undefined;
    const texts: string[] = [];
    let size = 0;
    const stop = (): void => {
      req.off('readable', onReadable);
      req.off('end', onEnd);
      req.off('error', onError);
    };
    const onReadable = (): void => {
      for (let chunk = req.read(); chunk !== null; chunk = req.read()) {
        if (typeof chunk === 'string') texts.push(chunk);
        const bytes = typeof chunk === 'string' ? Buffer.from(chunk, encoding ?? 'utf8') : (chunk as Buffer);
        size += bytes.byteLength;
        if (size > limit) {
          stop();
          // The rest is discarded as it arrives: read from, the request is no longer drained by node:http when
          // its answer (413) ends, and the next request on a kept-alive connection would wait behind it forever.
          req.resume();
          reject(new BodyTooLargeError(limit));
          return;
        }
        chunks.push(bytes);
      }
      if (!req.complete) return;
      const body = joinBytes(chunks, size);
      // Node emits 'end' on the next tick only if the buffer is still empty then: this puts the bytes back first.
      if (texts.length > 0) req.unshift(texts.join(''), encoding);
      else if (size > 0)
        req.unshift(chunks.length === 1 ? chunks[0] : Buffer.from(body.buffer, body.byteOffset, body.byteLength));
      stop();
      resolve(body);
    };
    const onEnd = (): void => {
      stop();
      if (size > 0) reject(new Error(alreadyRead));
      else resolve(NO_BYTES);
    };
    const onError = (error: unknown): void => {
      stop();
      reject(error instanceof Error ? error : new Error(String(error)));
    };
    req.on('readable', onReadable);
    req.on('end', onEnd);
    req.on('error', onError);
  });
}
