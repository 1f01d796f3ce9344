/**
 * @module `idem/express` — idempotency keys as Express 5 middleware. Mount it before any body parser.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response as ExpressResponse } from 'express';
import type { Engine, OutcomeKind } from '../../core/engine.js';
import {
  createGate,
  responseTooLarge,
  storedResponse,
  type Claim,
  type GateRequest,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/middleware.js';
import { BodyTooLargeError, joinBytes, replayParts, storableNodeHeaders } from '../../http/replay.js';
import {
  checkChunk,
  foldHeaders,
  headerValue,
  NO_BYTES,
  nodeError,
  NULL_BODY_STATUSES,
  readAndRestore,
  responseParts,
  restoreHeaders,
  toBuffer,
} from '../shared.js';

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
export function idempotency<Tx = never>(
  options: ExpressIdempotencyOptions<Tx>,
): RequestHandler & { readonly engine: Engine<Tx> } {
  const gate = createGate<Tx, Request>(options);
  const middleware = async function idempotencyMiddleware(
    req: Request,
    res: ExpressResponse,
    next: NextFunction,
  ): Promise<void> {
    const admission = await gate.admit(new ExpressRequest(req));
    if (admission.kind === 'answer') {
      // A replay is written from the stored parts directly; other answers (problems) from their Response.
      const { status, headers, body } = admission.replay
        ? replayParts(admission.replay)
        : await responseParts(admission.response);
      toDictionary(res);
      res.statusCode = status;
      for (const [name, value] of headers) res.setHeader(name, value);
      res.end(asText(body));
      return;
    }
    (res.locals as Record<string, unknown>)[CONTEXT] = admission.context;
    if (admission.kind === 'run') capture(res, admission, gate.maxResponseBytes, gate.replayHeaders);
    next();
  };
  return Object.assign(middleware, { engine: gate.engine });
}

/** Strict UTF-8 (a bad byte throws); without `stream` it keeps no state between calls, so one serves all. */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Answers up to this size are written as text when they are UTF-8 (see {@link asText}). */
const TEXT_LIMIT = 16_384;

/**
 * A small answer's bytes as the string they encode, when they are valid UTF-8: Node writes a string body in one
 * piece with the head, bytes as a second chunk. Valid UTF-8 decodes and encodes back to the same bytes.
 */
function asText(body: Uint8Array): string | Uint8Array {
  if (body.byteLength === 0 || body.byteLength > TEXT_LIMIT) return body;
  try {
    return UTF8.decode(body);
  } catch {
    return body;
  }
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

/** The gate's view of an Express request: one object, its methods shared (no closures made per request). */
class ExpressRequest implements GateRequest<Request> {
  // Declared, not defined: assigned once in the constructor (a class field would be defined first, then assigned).
  declare readonly native: Request;
  declare readonly method: string;
  declare readonly url: string;
  constructor(req: Request) {
    this.native = req;
    this.method = req.method;
    this.url = req.originalUrl;
  }
  header(name: string): string | null {
    return headerValue(this.native.headers, name);
  }
  body(limit: number): Promise<Uint8Array> {
    // Read only for a keyed request: from here on Express, its body parser and Node touch `req` as a dictionary
    // (see toDictionary), which costs them less than its hidden class of its own.
    toDictionary(this.native);
    return readAndRestore(this.native, limit, BODY_ALREADY_READ);
  }
}

const BODY_ALREADY_READ =
  'idem/express: the request body was already read. Mount idempotency() before express.json() and other body parsers.';

/** What {@link capture} keeps for one response: the methods it replaced, and what the handler sent so far. */
interface Held<Tx> {
  readonly claim: Claim<Tx>;
  readonly limit: number;
  readonly replayHeaders: readonly string[];
  // Whoever wrapped these methods before us, every call below is theirs, called on this response with
  // `.call`/`.apply` (cheaper than bound copies, and the same `this`).
  readonly writeHead: (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  readonly write: (this: ServerResponse, ...args: unknown[]) => boolean;
  readonly end: (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  readonly flushHeaders: (this: ServerResponse) => void;
  readonly destroy: (this: ServerResponse, error?: Error) => ServerResponse;
  chunks: Buffer[];
  /**
   * The body as the handler wrote it, when that was one string in UTF-8 (what `res.send` writes): sent as that
   * string, Node writes it in one piece with the head; sent as bytes, the head and the body go out as two chunks.
   */
  text: string | undefined;
  size: number;
  tooLarge: BodyTooLargeError | undefined;
  /** True until the recorded response (or its replacement) is written, or the response is destroyed. */
  held: boolean;
  ended: boolean;
  /** The answer as it stood at the handler's `end()`: what is recorded is what is sent. */
  status: number;
  message: string;
  headers: OutgoingHttpHeaders | undefined;
}

/** The response's {@link Held} state, on one symbol-keyed property (the wrappers below are shared, not per request). */
const HELD = Symbol('idem.held');
const SCRATCH = Symbol('idem.scratch');
const SCRATCH_2 = Symbol('idem.scratch.2');
type Capturing = ServerResponse & { [HELD]: Held<unknown> };

/**
 * Replaces `writeHead`/`write`/`end`/`flushHeaders`/`destroy` to hold what the handler sends — status, headers and
 * body — until the outcome is recorded. A client never receives a success that the record does not hold: if
 * recording fails (store down: 503) or is refused (lease lost: 409), the held response is dropped and the problem
 * is sent instead, on a connection that has not seen a byte of it. Holding is bounded by `maxResponseBytes` (a
 * larger response is answered as the stored `response-too-large` problem). Chunks are checked as Node checks them,
 * so `res.end(12345)` throws in the handler as it would without Idem (Express answers 500).
 *
 * What is recorded and what is sent are one snapshot, taken at the handler's `end()`: status, headers and body.
 * Anything the handler (or an error handler) does to the response after its `end()` and before the record is
 * written — set a status, set headers, end it again — is ignored, as it would be on a response already sent.
 *
 * A client that disconnects does not release the key: the handler goes on, its outcome is recorded, and the
 * retry replays it. A response the server itself destroys before ending it (a failed `pipeline` into `res`)
 * settles the key `failed`, retryable: nothing was answered.
 *
 * The replacements are the same five functions for every response, and the state is one object on one property:
 * no closure is made per request, and every response held gets the same hidden class (measured with
 * `npm run bench:instructions`; see docs/BENCHMARKS.md).
 */
function capture<Tx>(res: ServerResponse, claim: Claim<Tx>, limit: number, replayHeaders: readonly string[]): void {
  /* eslint-disable @typescript-eslint/unbound-method */
  const held: Held<Tx> = {
    claim,
    limit,
    replayHeaders,
    writeHead: res.writeHead as Held<Tx>['writeHead'],
    write: res.write as Held<Tx>['write'],
    end: res.end as Held<Tx>['end'],
    flushHeaders: res.flushHeaders,
    destroy: res.destroy,
    chunks: [],
    text: undefined,
    size: 0,
    tooLarge: undefined,
    held: true,
    ended: false,
    status: 0,
    message: '',
    headers: undefined,
  };
  /* eslint-enable @typescript-eslint/unbound-method */
  toDictionary(res);
  (res as Capturing)[HELD] = held;
  res.writeHead = heldWriteHead;
  res.flushHeaders = heldFlushHeaders;
  res.write = heldWrite as ServerResponse['write'];
  res.end = heldEnd as ServerResponse['end'];
  res.destroy = heldDestroy;
}

/**
 * Turns a request or response into a dictionary (V8's slow properties) without adding a property. Under Express
 * every request and response has a hidden class of its own (their prototypes are set per request), so each
 * property added to one (a held response's wrappers; `req.body` from a body parser) makes V8 build yet another:
 * about 4 µs apiece (measured: see docs/BENCHMARKS.md); and every later access to it, by Node and Express, misses
 * its inline cache. A property deleted out of order turns the object into a dictionary, where additions are table
 * inserts and objects share a hidden class. The property deleted is EventEmitter's first own one, `_events`, put
 * straight back; a scratch property added and deleted is the fallback for an object without an own, configurable
 * `_events`. Nothing observable changes but the position of `_events` among the object's keys.
 */
function toDictionary(res: ServerResponse | IncomingMessage): void {
  const own = res as unknown as Record<PropertyKey, unknown>;
  const events = own._events;
  if (Object.hasOwn(own, '_events') && Reflect.deleteProperty(own, '_events')) {
    own._events = events;
  } else {
    own[SCRATCH] = 0;
    own[SCRATCH_2] = 0;
    delete own[SCRATCH];
    delete own[SCRATCH_2];
  }
}

function keep(state: Held<unknown>, chunk: unknown, encoding: unknown): void {
  if (state.tooLarge) return;
  const bytes = toBuffer(chunk, encoding);
  state.text =
    state.chunks.length === 0 &&
    typeof chunk === 'string' &&
    (encoding === undefined || encoding === 'utf8' || encoding === 'utf-8')
      ? chunk
      : undefined;
  state.size += bytes.byteLength;
  if (state.size > state.limit) {
    state.tooLarge = new BodyTooLargeError(state.limit);
    state.chunks.length = 0;
  } else {
    state.chunks.push(bytes);
  }
}

function heldWriteHead(this: Capturing, statusCode: number, ...rest: unknown[]): ServerResponse {
  const state = this[HELD];
  if (!state.held) return state.writeHead.call(this, statusCode, ...rest);
  checkStatus(statusCode);
  if (state.ended) return this;
  const reason = typeof rest[0] === 'string' ? rest[0] : undefined;
  const headers = reason === undefined ? rest[0] : rest[1];
  // Headers passed here take precedence over setHeader ones (as in Node); folding them in keeps them visible.
  if (headers) foldHeaders(this, headers);
  this.statusCode = statusCode;
  if (reason !== undefined) this.statusMessage = reason;
  return this;
}

function heldFlushHeaders(this: Capturing): void {
  const state = this[HELD];
  if (!state.held) state.flushHeaders.call(this);
}

function heldWrite(this: Capturing, chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
  const state = this[HELD];
  // eslint-disable-next-line prefer-rest-params
  if (!state.held) return state.write.apply(this, arguments as unknown as unknown[]);
  if (chunk === null) throw nodeError('ERR_STREAM_NULL_VALUES', 'May not write null values to stream');
  checkChunk(chunk);
  if (state.ended) return false;
  keep(state, chunk, typeof encoding === 'function' ? undefined : encoding);
  const done = typeof encoding === 'function' ? encoding : callback;
  if (typeof done === 'function') queueMicrotask(() => (done as () => void)());
  return true;
}

function heldEnd(this: Capturing, first?: unknown, second?: unknown, third?: unknown): ServerResponse {
  const state = this[HELD];
  // eslint-disable-next-line prefer-rest-params
  if (!state.held) return state.end.apply(this, arguments as unknown as unknown[]);
  const chunk = typeof first === 'function' ? undefined : first;
  if (chunk !== undefined && chunk !== null) checkChunk(chunk);
  if (state.ended) return this;
  checkStatus(this.statusCode);
  state.ended = true;
  // The answer is fixed now: what is recorded is what is sent, whatever touches `res` before the record is written.
  state.status = this.statusCode;
  state.message = this.statusMessage;
  state.headers = this.getHeaders();
  if (chunk !== undefined && chunk !== null) keep(state, chunk, typeof second === 'function' ? undefined : second);
  const callback =
    typeof first === 'function'
      ? first
      : typeof second === 'function'
        ? second
        : typeof third === 'function'
          ? third
          : undefined;
  void finish(this, state, callback as (() => void) | undefined);
  return this;
}

// A response the server destroys before its end (a failed pipeline into `res`) answered nothing: the key is
// retryable. A client that goes away does not call this (Node closes the socket, not the response).
function heldDestroy(this: Capturing, error?: Error): ServerResponse {
  const state = this[HELD];
  if (state.held && !state.ended) {
    state.held = false;
    void state.claim.fail();
  }
  return state.destroy.call(this, error);
}

async function finish(res: ServerResponse, state: Held<unknown>, callback: (() => void) | undefined): Promise<void> {
  const { status, message, claim } = state;
  const sent = state.headers as OutgoingHttpHeaders;
  const head = res.req.method === 'HEAD';
  let replacement: Response | undefined;
  let body: Uint8Array = NO_BYTES;
  if (state.tooLarge) {
    const stored = await responseTooLarge(state.tooLarge);
    replacement = (await claim.complete(stored, 'failed-final' satisfies OutcomeKind)) ?? storedResponse(stored);
  } else {
    const empty = head || NULL_BODY_STATUSES.has(status);
    body = empty ? NO_BYTES : joinBytes(state.chunks, state.size);
    const headers = storableNodeHeaders(sent, state.replayHeaders);
    replacement = await claim.complete({ status, headers, body });
  }
  if (!state.held) return; // destroyed meanwhile: nothing to send
  state.held = false;
  if (replacement) {
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    const parts = await responseParts(replacement);
    res.statusCode = parts.status;
    for (const [name, value] of parts.headers) res.setHeader(name, value);
    body = parts.body;
  } else {
    res.statusCode = status;
    res.statusMessage = message;
    restoreHeaders(res, sent, head ? undefined : body.byteLength);
  }
  // The same bytes either way: the handler's own UTF-8 string is what was recorded, encoded.
  const out =
    !replacement && body.byteLength > 0 && state.chunks.length === 1 && state.text !== undefined ? state.text : body;
  if (callback) state.end.call(res, out, callback);
  else state.end.call(res, out);
}

/** Node's own check on a status code (`writeHead` throws it): a three-digit integer from 100. */
function checkStatus(status: unknown): void {
  if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999) return;
  throw Object.assign(new RangeError(`Invalid status code: ${String(status)}`), {
    code: 'ERR_HTTP_INVALID_STATUS_CODE',
  });
}
