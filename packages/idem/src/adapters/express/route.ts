/**
 * @module Holding an Express response until its outcome is recorded (what `idem/express` wraps around `res`), and
 * the route wrapper that lets it see the handler settle.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response as ExpressResponse } from 'express';
import type { OutcomeKind } from '../../core/engine.js';
import { isThenable } from '../../core/local.js';
import type { StoredResponse } from '../../core/record.js';
import { responseTooLarge, storedResponse, type Claim, type IdempotencyOptions } from '../../http/middleware.js';
import { BodyTooLargeError, joinBytes, storableNodeHeaders } from '../../http/replay.js';
import {
  checkChunk,
  checkHead,
  freesKey,
  holdHead,
  NO_BYTES,
  nodeError,
  NULL_BODY_STATUSES,
  responseParts,
  restoreHeaders,
  toBuffer,
} from '../shared.js';

/**
 * `ExpressIdempotency.route`: one function for every middleware (the state it marks is the response's).
 *
 * @example
 * app.post('/v1/charges', guard, express.json(), route(async (req, res) => { ... }))
 */
export function route<H extends (req: Request, res: ExpressResponse, next: NextFunction) => unknown>(handler: H): H {
  return function idempotentRoute(req: Request, res: ExpressResponse, next: NextFunction): unknown {
    const state = (res as unknown as Partial<Capturing>)[HELD];
    if (!state) return handler(req, res, next);
    state.running = Math.max(state.running, 0) + 1;
    let result: unknown;
    try {
      result = handler(req, res, (error?: unknown) => {
        // Handed on to the next middleware ('route' and 'router' too): the work goes on past the promise's end.
        if (error === undefined || error === 'route' || error === 'router') state.unseen = true;
        next(error);
      });
    } catch (error) {
      handlerSettled(state);
      throw error;
    }
    if (!isThenable(result)) {
      // A callback-style handler, a router, a pre-handler: its return is not the end of its work.
      state.unseen = true;
      handlerSettled(state);
      return result;
    }
    // Settled first, then the rejection goes on to Express (which calls next(err)): its answer finds it settled.
    return Promise.resolve(result).finally(() => handlerSettled(state));
  } as H;
}

function handlerSettled(state: Held<unknown>): void {
  if (--state.running > 0 && !state.unseen) return;
  const waiting = state.whenSettled;
  state.whenSettled = undefined;
  waiting?.();
}

/** The middleware cannot see the work end: no `route()`, or a wrapped function that returned no promise. */
function unseen(state: Held<unknown>): boolean {
  return state.running < 0 || state.unseen;
}

/** One middleware's settings for the responses it holds. */
export interface Settings {
  readonly limit: number;
  readonly replayHeaders: readonly string[];
  readonly classify: IdempotencyOptions<unknown, Request>['classify'];
  /** How long a handler streaming to a client that left has to end its response: half a lease. */
  readonly graceMs: number;
  /** The problem for an error (the gate's): the lease's 409 when the engine gives the key up. */
  readonly answerFor: (error: unknown, request: Request) => Response;
}

/** What {@link capture} keeps for one response: the methods it replaced, and what the handler sent so far. */
interface Held<Tx> {
  /** The lease's signal's listener: see {@link heldAbort}. */
  readonly handleEvent: (this: Held<unknown>) => void;
  readonly res: Capturing;
  readonly claim: Claim<Tx>;
  readonly settings: Settings;
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
  /** The handler wrote part of its body or flushed its head: it is streaming. */
  streamed: boolean;
  /** Handlers wrapped by `route()` still running: -1 before one has begun (the middleware cannot see it settle). */
  running: number;
  /** A wrapped function returned no promise or handed on with `next()`: its settling says nothing of the work. */
  unseen: boolean;
  /** Called once `running` drops to 0: set by a retryable answer that came before the handler settled. */
  whenSettled: (() => void) | undefined;
  /** The answer as it stood at the handler's `end()`: what is recorded is what is sent. */
  status: number;
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
 * larger response is answered as the stored `response-too-large` problem). Chunks, status codes and reason phrases
 * are checked as Node checks them, where the handler sets them: `res.end(12345)` or a reason phrase with a CR throws
 * in the handler as it would without Idem (Express answers 500), never later as an unhandled rejection.
 *
 * What is recorded and what is sent are one snapshot, taken at the handler's `end()`: status, headers and body.
 * Anything the handler (or an error handler) does to the response after its `end()` and before the record is
 * written — set a status, set headers, end it again — is ignored, as it would be on a response already sent.
 *
 * A client that disconnects does not release the key: the handler goes on, its outcome is recorded, and the
 * retry replays it — unless it was streaming, and does not end within half a lease (see {@link heldClose}). A
 * response the server itself destroys before ending it (a failed `pipeline` into `res`) settles the key `failed`,
 * retryable: nothing was answered. An answer that frees the key before the handler has settled waits for it (see
 * {@link answeredEarly}).
 *
 * The replacements are the same five functions for every response, and the state is one object on one property:
 * no closure is made per request, and every response held gets the same hidden class (measured with
 * `npm run bench:instructions`; see docs/BENCHMARKS.md).
 */
export function capture<Tx>(res: ServerResponse, claim: Claim<Tx>, settings: Settings): void {
  /* eslint-disable @typescript-eslint/unbound-method */
  const held: Held<Tx> = {
    handleEvent: heldAbort,
    res: res as Capturing,
    claim,
    settings,
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
    streamed: false,
    running: -1,
    unseen: false,
    whenSettled: undefined,
    status: 0,
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
  // The engine gives the key up at `maxHoldMs`: it aborts the signal and settles the lease in the same turn.
  claim.lease?.signal.addEventListener('abort', held, { once: true });
}

/**
 * The lease's signal aborted (`handleEvent` of a {@link Held}: no closure per response). If the engine gave the key
 * up (held past `maxHoldMs`: settled failed, retryable) and nothing was sent, the client gets the lease's problem
 * (409) now rather than a connection held for a handler that may never answer; whatever the handler sends later is
 * dropped, as after its own `end()`. A signal aborted past the local deadline alone leaves the lease renewed, and
 * the handler's answer may still be recorded: that is left to the handler.
 */
function heldAbort(this: Held<unknown>): void {
  queueMicrotask(() => {
    const { claim, res } = this;
    if (!claim.lease?.settled || !this.held || this.ended) return;
    this.ended = true;
    void responseParts(this.settings.answerFor(claim.lease.signal.reason, res.req as Request)).then((parts) => {
      if (!this.held) return; // destroyed meanwhile
      send(res, this, parts, undefined);
      this.held = true; // stays ended: the handler's later writes are dropped, not written after our end
    });
  });
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
export function toDictionary(res: ServerResponse | IncomingMessage): void {
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
  if (state.size > state.settings.limit) {
    state.tooLarge = new BodyTooLargeError(state.settings.limit);
    state.chunks.length = 0;
  } else {
    state.chunks.push(bytes);
  }
}

function heldWriteHead(this: Capturing, statusCode: number, ...rest: unknown[]): ServerResponse {
  const state = this[HELD];
  if (!state.held) return state.writeHead.call(this, statusCode, ...rest);
  if (state.ended) return this;
  checkWriteHead(state, rest);
  holdHead(this, statusCode, rest);
  return this;
}

/**
 * What Node refuses in `writeHead` and a held response would otherwise take: a head after the body began (or after
 * `flushHeaders`), a flat header list of odd length, an undefined header value. Thrown in the handler, as by Node.
 */
function checkWriteHead(state: Held<unknown>, rest: readonly unknown[]): void {
  if (state.streamed)
    throw Object.assign(new Error('Cannot write headers after they are sent to the client'), {
      code: 'ERR_HTTP_HEADERS_SENT',
    });
  const headers = typeof rest[0] === 'string' ? rest[1] : rest[0];
  if (Array.isArray(headers)) {
    if (headers.length % 2 !== 0 && !Array.isArray(headers[0]))
      throw nodeError('ERR_INVALID_ARG_VALUE', "The argument 'headers' is invalid.");
  } else if (typeof headers === 'object' && headers !== null) {
    for (const [name, value] of Object.entries(headers))
      if (value === undefined)
        throw nodeError('ERR_HTTP_INVALID_HEADER_VALUE', `Invalid value "undefined" for header "${name}"`);
  }
}

function heldFlushHeaders(this: Capturing): void {
  const state = this[HELD];
  if (!state.held) return state.flushHeaders.call(this);
  checkHead(this);
  if (!state.ended) stream(this, state);
}

function heldWrite(this: Capturing, chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
  const state = this[HELD];
  // eslint-disable-next-line prefer-rest-params
  if (!state.held) return state.write.apply(this, arguments as unknown as unknown[]);
  if (chunk === null) throw nodeError('ERR_STREAM_NULL_VALUES', 'May not write null values to stream');
  checkChunk(chunk);
  if (state.ended) return false;
  // Node writes the head with the first chunk, and throws there for a bad status or reason.
  checkHead(this);
  stream(this, state);
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
  checkHead(this);
  state.ended = true;
  // The answer is fixed now: what is recorded is what is sent, whatever touches `res` before the record is written.
  state.status = this.statusCode;
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
  finish(this, state, callback as (() => void) | undefined).catch((error: unknown) => {
    // Unreachable by what a handler sets (checked above); still, no answer of ours may take the process down.
    state.held = false;
    void state.claim.fail();
    state.destroy.call(this, error instanceof Error ? error : undefined);
  });
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

/** The handler begins to stream: from now on a client that leaves is watched for (see {@link heldClose}). */
function stream(res: Capturing, state: Held<unknown>): void {
  if (state.streamed) return;
  state.streamed = true;
  // Only now: a response that is never streamed (most) costs no listener. A client already gone counts at once.
  if (res.destroyed) heldClose.call(res);
  else res.on('close', heldClose);
}

/**
 * The client left before the response ended. A handler that has not written yet is waited for: its outcome is
 * recorded and replayed. One that was streaming (a `pipe()` that the gone client unpiped, server-sent events) may
 * never end: it gets half a lease to, then the lease is abandoned — nothing is recorded, renewals stop, and the key
 * is taken over (same id) once the lease lapses, within one lease of the client leaving.
 */
function heldClose(this: Capturing): void {
  const state = this[HELD];
  if (!state.held || state.ended || !state.streamed) return;
  setTimeout(giveUp, state.settings.graceMs, this).unref();
}

function giveUp(res: Capturing): void {
  const state = res[HELD];
  if (!state.held || state.ended) return;
  state.held = false;
  const { claim } = state;
  void (claim.lease ? claim.lease.abandon() : claim.fail());
}

async function finish(res: ServerResponse, state: Held<unknown>, callback: (() => void) | undefined): Promise<void> {
  const { status, claim } = state;
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
    const stored = { status, headers: storableNodeHeaders(sent, state.settings.replayHeaders), body };
    const frees =
      (state.running !== 0 || state.unseen) && freesKey(status, res.req as Request, state.settings.classify);
    if (frees && (await answeredEarly(res, state, stored, callback))) return;
    replacement = await claim.complete(stored);
  }
  if (!state.held) return; // destroyed meanwhile: nothing to send
  send(res, state, replacement ? await responseParts(replacement) : body, callback);
}

/**
 * An answer that would free the key (retryable, or released) while the handler may still be running — a timeout
 * middleware's 503, an error handler reached by `next(err)` while the handler goes on — is sent at once, and the key
 * is kept from a retry until the handler has settled: a handler wrapped by `route()` is waited for, then the answer
 * is recorded; one the middleware cannot see settle (no `route()`, or a wrapped function that returned no promise or
 * called `next()`) has its lease abandoned (409 until it lapses, then a takeover).
 * False when the answer is recorded the usual way, first: the handler settled before it, or settles in the same
 * turn (it answered, then returned), or the key is a local route's transaction's.
 */
async function answeredEarly(
  res: ServerResponse,
  state: Held<unknown>,
  stored: StoredResponse,
  callback: (() => void) | undefined,
): Promise<boolean> {
  const { lease } = state.claim;
  if (!unseen(state) && (await handlerSettles(state, true)) && !unseen(state)) return false;
  if (unseen(state) && !lease) return false;
  send(res, state, stored.body, callback);
  if (!unseen(state)) await handlerSettles(state, false);
  if (unseen(state) && lease) await lease.abandon();
  else await state.claim.complete(stored);
  return true;
}

/** Resolves true once the handlers wrapped by `route()` have settled; with `soon`, false if not by the next turn. */
function handlerSettles(state: Held<unknown>, soon: boolean): Promise<boolean> {
  return new Promise((resolve) => {
    if (state.running <= 0) return resolve(true);
    const turn = soon
      ? setImmediate(() => {
          state.whenSettled = undefined;
          resolve(false);
        })
      : undefined;
    state.whenSettled = () => {
      clearImmediate(turn);
      resolve(true);
    };
  });
}

/**
 * Writes the answer: the handler's own (its snapshot at `end()`), or the replacement's parts. The reason phrase is
 * Node's own for the status, as on a replay: a record keeps no reason phrase, so the first answer does not either.
 */
function send(
  res: ServerResponse,
  state: Held<unknown>,
  answer: Uint8Array | { status: number; headers: Array<[string, string]>; body: Buffer },
  callback: (() => void) | undefined,
): void {
  state.held = false;
  res.statusMessage = '';
  let body: Uint8Array;
  if (answer instanceof Uint8Array) {
    body = answer;
    res.statusCode = state.status;
    restoreHeaders(res, state.headers as OutgoingHttpHeaders, res.req.method === 'HEAD' ? undefined : body.byteLength);
  } else {
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    res.statusCode = answer.status;
    for (const [name, value] of answer.headers) res.setHeader(name, value);
    body = answer.body;
  }
  // The same bytes either way: the handler's own UTF-8 string is what was recorded, encoded.
  const out =
    answer instanceof Uint8Array && body.byteLength > 0 && state.chunks.length === 1 && state.text !== undefined
      ? state.text
      : body;
  if (callback) state.end.call(res, out, callback);
  else state.end.call(res, out);
}
