/**
 * @module Holding a Node response until its outcome is recorded: what `idem/express` wraps around `res`, and
 * `idem/nest` around `res` (Express) or `reply.raw` (Fastify), below every interceptor, filter and serializer.
 *
 * Why: the answer must not reach the client before the outcome is recorded. A client that got a 201 and retries
 * (its connection dropped before it read the body) must be replayed that 201; if the record could not be written
 * (store down) or was refused (lease lost), the retry would run the work again or see another answer. So the
 * status, headers and body are held, the outcome is written, and only then is the answer sent — or, when it could
 * not be recorded, the 503/409 problem in its place, on a connection that has not seen a byte of the handler's.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import {
  BodyTooLargeError,
  joinBytes,
  responseTooLarge,
  storableNodeHeaders,
  storedResponse,
  type Claim,
  type IdempotencyOptions,
  type OutcomeKind,
  type StoredResponse,
} from '../../http/index.js';
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

/** One middleware's (or route's) settings for the responses it holds: shared by all of them. */
export interface HoldSettings<Req> {
  /** The most bytes held: a larger body is answered and recorded as the `response-too-large` problem. */
  readonly limit: number;
  readonly replayHeaders: readonly string[];
  readonly classify: IdempotencyOptions<unknown, Req>['classify'];
  /** How long a handler streaming to a client that left has to end its response (half a lease); `Infinity`: no end. */
  readonly graceMs: number;
  /**
   * The problem for the error the engine gave the key up with (past `maxHoldMs`: the lease's 409), sent at once to a
   * client still waiting. Without it, that client gets the problem when the handler ends (from `complete`).
   */
  readonly answerFor?: (error: unknown, request: Req) => Response;
}

/** How the holder sees the handler settle (Express: `route()`; Nest: its innermost watcher). */
export interface Run {
  readonly settled: boolean;
  /** The work's end cannot be seen (a bare Express middleware): a retryable answer then abandons the lease. */
  readonly unseen: boolean;
  /** Resolves true once settled; with `soon`, false if it has not by the next turn of the event loop. */
  whenSettled(soon: boolean): Promise<boolean>;
}

/** What records the outcome: the gate's claim, or a fixed answer sent in place of whatever the response says. */
export type Recorder = Pick<Claim<unknown>, 'lease' | 'complete' | 'fail'>;

/** What {@link hold} keeps for one response: the methods it replaced, and what the handler sent so far. */
export interface Held {
  /** The lease's give-up listener: see {@link heldAbort}. */
  readonly handleEvent: (this: Held, error: unknown) => void;
  readonly res: Holding;
  readonly request: unknown;
  readonly claim: Recorder;
  readonly settings: HoldSettings<unknown>;
  /** Replaced by Express's `route()` when it first wraps a handler of this response. */
  run: Run;
  // Whoever wrapped these methods before us (a compression middleware), every call below is theirs, called on this
  // response with `.call`/`.apply` (cheaper than bound copies, and the same `this`).
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
  /** True until the recorded response (or its replacement) is written, or the response is abandoned. */
  held: boolean;
  /** The handler ended the response (what is recorded is fixed then), or the engine's problem was sent. */
  ended: boolean;
  /** The handler wrote part of its body or flushed its head: it is streaming. */
  streamed: boolean;
  /** The answer as it stood at the handler's `end()`: what is recorded is what is sent. */
  status: number;
  headers: OutgoingHttpHeaders | undefined;
}

/** The response's {@link Held} state, on one symbol-keyed property (the wrappers below are shared, not per request). */
const HELD = Symbol('idem.held');
type Holding = ServerResponse & { [HELD]: Held };

/** The state of a response {@link hold} holds; undefined for one it does not. */
export function heldState(res: object): Held | undefined {
  return (res as Partial<Holding>)[HELD];
}

/**
 * Replaces `writeHead`/`write`/`end`/`flushHeaders`/`destroy` to hold what the handler (or the platform: Express's
 * `res.json`, Fastify's serializer, a `StreamableFile`, an exception filter) sends — status, headers and body —
 * until `claim` has recorded it, then sends it, or the problem `claim.complete` answers in its place. Holding is
 * bounded by `settings.limit` (a larger response is answered as the stored `response-too-large` problem). Chunks,
 * status codes (100–599: what a record holds), reason phrases and `writeHead`'s arguments are checked as Node checks
 * them, where the handler sets them: `res.end(12345)` or a reason phrase with a CR throws in the handler as it would
 * without Idem, never later as an unhandled rejection. The reason phrase sent is Node's own for the status, as on a
 * replay (a record keeps none). `headersSent` stays false meanwhile, so a compression middleware below still
 * compresses what is let go.
 *
 * What is recorded and what is sent are one snapshot, taken at the handler's `end()`. Anything done to the response
 * after it and before the record is written — set a status, set headers, end it again — is ignored, as it would be
 * on a response already sent.
 *
 * A client that disconnects does not release the key: the handler goes on, its outcome is recorded, and the retry
 * replays it — unless it was streaming, and does not end within `graceMs` (see {@link heldClose}). A response
 * destroyed before its end (a failed `pipeline` into `res`; Fastify destroys it when a streamed body fails) settles
 * the key `failed`, retryable: nothing was answered. An answer that frees the key before `run` has settled waits for
 * it (see {@link answeredEarly}).
 *
 * The replacements are the same five functions for every response, and the state is one object on one property: no
 * closure is made per request, and every response held gets the same hidden class (measured with
 * `npm run bench:instructions`; see docs/BENCHMARKS.md).
 *
 * @example
 * hold(res, req, admission, settings, UNSEEN)
 */
export function hold<Req>(
  res: ServerResponse,
  request: Req,
  claim: Recorder,
  settings: HoldSettings<Req>,
  run: Run,
): Held {
  /* eslint-disable @typescript-eslint/unbound-method */
  const held: Held = {
    handleEvent: heldAbort,
    res: res as Holding,
    request,
    claim,
    settings: settings as HoldSettings<unknown>,
    run,
    writeHead: res.writeHead as Held['writeHead'],
    write: res.write as Held['write'],
    end: res.end as Held['end'],
    flushHeaders: res.flushHeaders,
    destroy: res.destroy,
    chunks: [],
    text: undefined,
    size: 0,
    tooLarge: undefined,
    held: true,
    ended: false,
    streamed: false,
    status: 0,
    headers: undefined,
  };
  /* eslint-enable @typescript-eslint/unbound-method */
  (res as Holding)[HELD] = held;
  res.writeHead = heldWriteHead;
  res.flushHeaders = heldFlushHeaders;
  res.write = heldWrite as ServerResponse['write'];
  res.end = heldEnd as ServerResponse['end'];
  res.destroy = heldDestroy;
  // The engine gives the key up at `maxHoldMs`: see heldAbort.
  if (settings.answerFor) claim.lease?.onGivenUp(held);
  return held;
}

/**
 * The response will never be ended (its body's source was destroyed): the key is settled `failed`, retryable (under
 * `'reconcile'` and `'quarantine'`, left to lapse: the work answered, so it may have had its effect), and nothing is
 * held any more. Does nothing once the response has ended.
 */
export function abandonHeld(state: Held): void {
  if (!state.held || state.ended) return;
  state.held = false;
  void state.claim.fail(true);
}

/**
 * The engine gave the key up (`handleEvent` of a {@link Held}, called by `lease.onGivenUp`: no closure per
 * response): held past `maxHoldMs`, it is settled failed, retryable. If nothing was sent, the client gets the
 * lease's problem (409) now rather than a connection held for a handler that may never answer; whatever the handler
 * sends later is dropped, as after its own `end()`.
 */
function heldAbort(this: Held, error: unknown): void {
  const { settings } = this;
  if (!this.held || this.ended || !settings.answerFor) return;
  this.ended = true;
  void responseParts(settings.answerFor(error, this.request)).then((parts) => {
    if (!this.held) return; // destroyed meanwhile
    send(this.res, this, parts, undefined);
    this.held = true; // stays ended: the handler's later writes are dropped, not written after our end
    // And its later headers (`res.status(201).json(…)` sets some first): dropped, not thrown from a callback of its.
    Object.assign(this.res, DROPPED_HEADERS);
  });
}

/** A response's header setters once the lease's problem went out in the handler's place: they do nothing. */
const DROPPED_HEADERS = {
  setHeader(this: ServerResponse) {
    return this;
  },
  appendHeader(this: ServerResponse) {
    return this;
  },
  removeHeader() {},
};

function keep(state: Held, chunk: unknown, encoding: unknown): void {
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

function heldWriteHead(this: Holding, statusCode: number, ...rest: unknown[]): ServerResponse {
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
function checkWriteHead(state: Held, rest: readonly unknown[]): void {
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

function heldFlushHeaders(this: Holding): void {
  const state = this[HELD];
  if (!state.held) return state.flushHeaders.call(this);
  checkHead(this);
  if (!state.ended) stream(this, state);
}

function heldWrite(this: Holding, chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
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

function heldEnd(this: Holding, first?: unknown, second?: unknown, third?: unknown): ServerResponse {
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
    void state.claim.fail(true);
    state.destroy.call(this, error instanceof Error ? error : undefined);
  });
  return this;
}

// A response destroyed before its end (a failed pipeline into `res`) answered nothing: the key is retryable. A
// client that goes away does not call this (Node closes the socket, not the response).
function heldDestroy(this: Holding, error?: Error): ServerResponse {
  const state = this[HELD];
  abandonHeld(state);
  return state.destroy.call(this, error);
}

/** The handler begins to stream: from now on a client that leaves is watched for (see {@link heldClose}). */
function stream(res: Holding, state: Held): void {
  if (state.streamed) return;
  state.streamed = true;
  // Only now: a response that is never streamed (most) costs no listener. A client already gone counts at once.
  if (res.destroyed) heldClose.call(res);
  else res.on('close', heldClose);
}

/**
 * The client left before the response ended. A handler that has not written yet is waited for: its outcome is
 * recorded and replayed. One that was streaming (a `pipe()` that the gone client unpiped, server-sent events) may
 * never end: it gets `graceMs` (half a lease) to, then the lease is abandoned — nothing is recorded, renewals stop,
 * and the key is taken over (same id) once the lease lapses, within one lease of the client leaving.
 */
function heldClose(this: Holding): void {
  const state = this[HELD];
  if (!state.held || state.ended || !state.streamed || state.settings.graceMs === Infinity) return;
  setTimeout(giveUp, state.settings.graceMs, this).unref();
}

function giveUp(res: Holding): void {
  const state = res[HELD];
  if (!state.held || state.ended) return;
  state.held = false;
  const { claim } = state;
  void (claim.lease ? claim.lease.abandon() : claim.fail());
}

async function finish(res: Holding, state: Held, callback: (() => void) | undefined): Promise<void> {
  const { status, claim, settings } = state;
  const sent = state.headers as OutgoingHttpHeaders;
  const head = res.req?.method === 'HEAD';
  let replacement: Response | undefined;
  let body: Uint8Array = NO_BYTES;
  if (state.tooLarge) {
    const stored = await responseTooLarge(state.tooLarge);
    replacement = (await claim.complete(stored, 'failed-final' satisfies OutcomeKind)) ?? storedResponse(stored);
  } else {
    const empty = head || NULL_BODY_STATUSES.has(status);
    body = empty ? NO_BYTES : joinBytes(state.chunks, state.size);
    const stored = { status, headers: storableNodeHeaders(sent, settings.replayHeaders), body };
    const frees = !state.run.settled && freesKey(status, state.request, settings.classify);
    if (frees && (await answeredEarly(res, state, stored, callback))) return;
    replacement = await claim.complete(stored);
  }
  if (!state.held) return; // destroyed meanwhile: nothing to send
  send(res, state, replacement ? await responseParts(replacement) : body, callback);
}

/**
 * An answer that would free the key (retryable, or released) while the handler may still be running — a timeout
 * middleware's 503 or interceptor's 408, an error handler reached by `next(err)` while the handler goes on — is sent
 * at once, and the key is kept from a retry until the handler has settled: a handler the run sees is waited for,
 * then the answer is recorded; one it cannot see settle (`run.unseen`) has its lease abandoned (409 until it lapses,
 * then a takeover). False when the answer is recorded the usual way, first: the handler settled before it, or
 * settles in the same turn (it answered, then returned), or the key is a local route's transaction's.
 */
async function answeredEarly(
  res: Holding,
  state: Held,
  stored: StoredResponse,
  callback: (() => void) | undefined,
): Promise<boolean> {
  const { lease } = state.claim;
  if (!state.run.unseen && (await state.run.whenSettled(true)) && !state.run.unseen) return false;
  if (state.run.unseen && !lease) return false;
  send(res, state, stored.body, callback);
  if (!state.run.unseen) await state.run.whenSettled(false);
  if (state.run.unseen && lease) await lease.abandon();
  else await state.claim.complete(stored);
  return true;
}

/**
 * Writes the answer: the handler's own (its snapshot at `end()`), or the replacement's parts. The reason phrase is
 * Node's own for the status, as on a replay: a record keeps no reason phrase, so the first answer does not either.
 */
function send(
  res: Holding,
  state: Held,
  answer: Uint8Array | { status: number; headers: Array<[string, string]>; body: Buffer },
  callback: (() => void) | undefined,
): void {
  state.held = false;
  res.statusMessage = '';
  let body: Uint8Array;
  if (answer instanceof Uint8Array) {
    body = answer;
    res.statusCode = state.status;
    restoreHeaders(res, state.headers as OutgoingHttpHeaders, res.req?.method === 'HEAD' ? undefined : body.byteLength);
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
