/**
 * @module `idem/express` — idempotency keys as Express 5 middleware. Mount it before any body parser.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response as ExpressResponse } from 'express';
import type { Engine, OutcomeKind } from '../../core/engine.js';
import { createGate, responseTooLarge, storedResponse, type Claim, type HandlerContext, type IdempotencyOptions } from '../../http/middleware.js';
import { BodyTooLargeError, joinBytes, replayParts, storableHeaders } from '../../http/replay.js';
import { headerPairs, headerValue, NO_BYTES, NULL_BODY_STATUSES, responseParts, toBuffer } from '../shared.js';

/** The Web layer's options; `scope`, `required` and `onError` receive the Express request. */
export type ExpressIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, Request>;

const CONTEXT = 'idempotency';

/**
 * Express 5 middleware: the first request with a key runs the route, every retry gets its answer back.
 *
 * Mount it app-wide (`app.use`) or per route, **before** body parsers: it reads the raw body for the
 * fingerprint and puts the bytes back, so `express.json()` mounted after it parses them as usual. On a keyed
 * request the response (head and body) is held until its outcome is recorded, then sent.
 *
 * @example
 * const app = express()
 * app.use(authenticate)
 * app.post('/v1/charges', idempotency({ store, scope: (req) => req.account, required: true }), express.json(),
 *   async (req, res) => {
 *     const charge = await createCharge(req.body, { idempotencyKey: idempotencyContext(res)?.id })
 *     res.status(201).location(`/v1/charges/${charge.id}`).json(charge)
 *   })
 */
export function idempotency<Tx = never>(options: ExpressIdempotencyOptions<Tx>): RequestHandler & { readonly engine: Engine<Tx> } {
  const gate = createGate<Tx, Request>(options);
  const middleware = async function idempotencyMiddleware(req: Request, res: ExpressResponse, next: NextFunction): Promise<void> {
    const admission = await gate.admit({
      native: req,
      method: req.method,
      url: req.originalUrl,
      header: (name) => headerValue(req.headers, name),
      body: (limit) => readAndRestore(req, limit),
    });
    if (admission.kind === 'answer') {
      // A replay is written from the stored parts directly; other answers (problems) from their Response.
      const { status, headers, body } = admission.replay ? replayParts(admission.replay) : await responseParts(admission.response);
      res.statusCode = status;
      for (const [name, value] of headers) res.setHeader(name, value);
      res.end(body);
      return;
    }
    (res.locals as Record<string, unknown>)[CONTEXT] = admission.context;
    if (admission.kind === 'run') capture(res, admission, gate.maxResponseBytes, gate.replayHeaders);
    next();
  };
  return Object.assign(middleware, { engine: gate.engine });
}

/**
 * The idempotency context of the request being answered: the record's stable `id` (pass it downstream as the
 * idempotency key), `declare()`, and the lease's `signal`. Undefined outside the middleware.
 *
 * @example
 * const { id, declare } = idempotencyContext(res) ?? {}
 */
export function idempotencyContext<Tx = never>(res: ExpressResponse): HandlerContext<Tx> | undefined {
  return (res.locals as Record<string, unknown>)[CONTEXT] as HandlerContext<Tx> | undefined;
}

const BODY_ALREADY_READ =
  'idem/express: the request body was already read. Mount idempotency() before express.json() and other body parsers.';

/**
 * Reads the raw body without consuming it: chunks are read in paused mode and, once the message is complete and
 * before `end` is emitted, put back with `unshift`, so the next reader (a body parser) sees an untouched stream.
 */
function readAndRestore(req: IncomingMessage, limit: number): Promise<Uint8Array> {
  if (req.readableEnded || req.readableFlowing === true) return Promise.reject(new Error(BODY_ALREADY_READ));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = (): void => {
      req.off('readable', onReadable);
      req.off('end', onEnd);
      req.off('error', onError);
    };
    const onReadable = (): void => {
      for (let chunk = req.read() as Buffer | null; chunk !== null; chunk = req.read() as Buffer | null) {
        size += chunk.byteLength;
        if (size > limit) {
          stop();
          reject(new BodyTooLargeError(limit));
          return;
        }
        chunks.push(chunk);
      }
      if (!req.complete) return;
      const body = joinBytes(chunks, size);
      // Node emits 'end' on the next tick only if the buffer is still empty then: this puts the bytes back first.
      if (size > 0) req.unshift(chunks.length === 1 ? chunks[0] : Buffer.from(body.buffer, body.byteOffset, body.byteLength));
      stop();
      resolve(body);
    };
    const onEnd = (): void => {
      stop();
      if (size > 0) reject(new Error(BODY_ALREADY_READ));
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

/**
 * Wraps `writeHead`/`write`/`end`/`flushHeaders` to hold what the handler sends — status, headers and body —
 * until the outcome is recorded. A client never receives a success that the record does not hold: if recording
 * fails (store down: 503) or is refused (lease lost: 409), the held response is dropped and the problem is sent
 * instead, on a connection that has not seen a byte of it. Holding is bounded by `maxResponseBytes` (a larger
 * response is answered as the stored `response-too-large` problem). Chunks are checked as Node checks them, so
 * `res.end(12345)` throws in the handler as it would without Idem (Express answers 500).
 *
 * What is recorded and what is sent are one snapshot, taken at the handler's `end()`: status, headers and body.
 * Anything the handler (or an error handler) does to the response after its `end()` and before the record is
 * written — set a status, set headers, end it again — is ignored, as it would be on a response already sent.
 *
 * A client that disconnects does not release the key: the handler goes on, its outcome is recorded, and the
 * retry replays it. A response the server itself destroys before ending it (a failed `pipeline` into `res`)
 * settles the key `failed`, retryable: nothing was answered.
 */
function capture<Tx>(res: ServerResponse, claim: Claim<Tx>, limit: number, replayHeaders: readonly string[]): void {
  // Whoever wrapped these methods before us, every call below is theirs, called on this response with
  // `.call`/`.apply` (cheaper than bound copies, and the same `this`).
  /* eslint-disable @typescript-eslint/unbound-method */
  const writeHead = res.writeHead as (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  const write = res.write as (this: ServerResponse, ...args: unknown[]) => boolean;
  const end = res.end as (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  const flushHeaders = res.flushHeaders;
  const destroy = res.destroy;
  /* eslint-enable @typescript-eslint/unbound-method */
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge: BodyTooLargeError | undefined;
  let held = true;
  let ended = false;
  let snapshot: { status: number; message: string; headers: OutgoingHttpHeaders } | undefined;

  const keep = (chunk: unknown, encoding: unknown): void => {
    if (tooLarge) return;
    const bytes = toBuffer(chunk, encoding);
    size += bytes.byteLength;
    if (size > limit) {
      tooLarge = new BodyTooLargeError(limit);
      chunks.length = 0;
    } else {
      chunks.push(bytes);
    }
  };

  res.writeHead = function (statusCode: number, ...rest: unknown[]): ServerResponse {
    if (!held) return writeHead.call(res, statusCode, ...rest);
    checkStatus(statusCode);
    if (ended) return res;
    const reason = typeof rest[0] === 'string' ? rest[0] : undefined;
    const headers = reason === undefined ? rest[0] : rest[1];
    // Headers passed here take precedence over setHeader ones (as in Node); folding them in keeps them visible.
    if (headers) foldHeaders(res, headers);
    res.statusCode = statusCode;
    if (reason !== undefined) res.statusMessage = reason;
    return res;
  };

  res.flushHeaders = function (): void {
    if (!held) flushHeaders.call(res);
  };

  res.write = function (...args: unknown[]): boolean {
    if (!held) return write.apply(res, args);
    const [chunk, encoding, callback] = args;
    if (chunk === null) throw nodeError('ERR_STREAM_NULL_VALUES', 'May not write null values to stream');
    checkChunk(chunk);
    if (ended) return false;
    keep(chunk, typeof encoding === 'function' ? undefined : encoding);
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') queueMicrotask(() => (done as () => void)());
    return true;
  } as ServerResponse['write'];

  res.end = function (...args: unknown[]): ServerResponse {
    if (!held) return end.apply(res, args);
    const chunk = typeof args[0] === 'function' ? undefined : args[0];
    if (chunk !== undefined && chunk !== null) checkChunk(chunk);
    if (ended) return res;
    checkStatus(res.statusCode);
    ended = true;
    // The answer is fixed now: what is recorded is what is sent, whatever touches `res` before the record is written.
    snapshot = { status: res.statusCode, message: res.statusMessage, headers: res.getHeaders() };
    if (chunk !== undefined && chunk !== null) keep(chunk, typeof args[1] === 'function' ? undefined : args[1]);
    const callback = args.find((arg) => typeof arg === 'function') as (() => void) | undefined;
    void finish(callback);
    return res;
  } as ServerResponse['end'];

  // A response the server destroys before its end (a failed pipeline into `res`) answered nothing: the key is
  // retryable. A client that goes away does not call this (Node closes the socket, not the response).
  res.destroy = function (error?: Error): ServerResponse {
    if (held && !ended) {
      held = false;
      void claim.fail();
    }
    return destroy.call(res, error);
  };

  async function finish(callback: (() => void) | undefined): Promise<void> {
    const { status, message, headers: sent } = snapshot as NonNullable<typeof snapshot>;
    let replacement: Response | undefined;
    let body: Uint8Array = NO_BYTES;
    if (tooLarge) {
      const stored = await responseTooLarge(tooLarge);
      replacement = (await claim.complete(stored, 'failed-final' satisfies OutcomeKind)) ?? storedResponse(stored);
    } else {
      const empty = NULL_BODY_STATUSES.has(status) || res.req.method === 'HEAD';
      body = empty ? NO_BYTES : joinBytes(chunks, size);
      const headers = storableHeaders(headerPairs(sent), replayHeaders);
      replacement = await claim.complete({ status, headers, body });
    }
    if (!held) return; // destroyed meanwhile: nothing to send
    held = false;
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    if (replacement) {
      const parts = await responseParts(replacement);
      res.statusCode = parts.status;
      for (const [name, value] of parts.headers) res.setHeader(name, value);
      body = parts.body;
    } else {
      res.statusCode = status;
      res.statusMessage = message;
      // Content-Length is left to Node, from the bytes actually sent: a header set before the last write is stale
      // (a HEAD answer keeps the handler's own, which describes the body it did not send).
      const head = res.req.method === 'HEAD';
      for (const [name, value] of Object.entries(sent)) {
        if (value !== undefined && (name !== 'content-length' || head)) res.setHeader(name, value);
      }
    }
    end.apply(res, callback ? [body, callback] : [body]);
  }
}

/** Node's own check on a status code (`writeHead` throws it): a three-digit integer from 100. */
function checkStatus(status: unknown): void {
  if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999) return;
  throw Object.assign(new RangeError(`Invalid status code: ${String(status)}`), { code: 'ERR_HTTP_INVALID_STATUS_CODE' });
}

/** Node's own check on a chunk passed to `write`/`end`: a string, a Buffer or a Uint8Array. */
function checkChunk(chunk: unknown): void {
  if (typeof chunk === 'string' || chunk instanceof Uint8Array) return;
  const got = chunk === null ? 'null' : typeof chunk === 'object' ? `an instance of ${chunk.constructor?.name ?? 'Object'}` : `type ${typeof chunk}`;
  throw nodeError('ERR_INVALID_ARG_TYPE', `The "chunk" argument must be of type string or an instance of Buffer or Uint8Array. Received ${got}`);
}

function nodeError(code: string, message: string): TypeError {
  return Object.assign(new TypeError(message), { code });
}

/** Applies `writeHead`'s headers argument (an object, a flat `[name, value, ...]` list, or pairs) with setHeader. */
function foldHeaders(res: ServerResponse, headers: unknown): void {
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
      else if (Array.isArray(value)) res.setHeader(name, value.map((item) => String(item as string)));
    }
  }
}
