/**
 * @module `idem/fastify` — idempotency keys as a Fastify 5 plugin, with per-route opt-in through route config.
 */
import { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import {
  BodyTooLargeError,
  configError,
  createGate,
  isThenable,
  readAndRestore,
  replayParts,
  responseTooLarge,
  storedProblem,
  storedResponse,
  type Claim,
  type Engine,
  type Gate,
  type HandlerContext,
  type IdempotencyOptions,
  type StoredResponse,
} from '../../http/index.js';
import { headerValue, NO_BYTES, readStream, responseParts } from '../shared.js';
import { answer, capture, unwritable, writeParts, writeRaw, type Captured, type Parts } from './reply.js';

/** Per-route settings: `config: { idempotency: { required: true } }`, or `idempotency: false` to leave a route alone. */
export type FastifyRouteIdempotency = false | { readonly required?: boolean };

declare module 'fastify' {
  interface FastifyContextConfig {
    idempotency?: FastifyRouteIdempotency;
  }
  interface FastifyRequest {
    /** The request's idempotency context (stable `id`, `declare()`, lease `signal`); null on routes it does not cover. */
    idempotency: HandlerContext<unknown> | null;
  }
}

/** The Web layer's options; `scope`, `required` and `onError` receive the Fastify request. */
export type FastifyIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, FastifyRequest>;

interface State<Tx> {
  body?: Uint8Array;
  claim?: Claim<Tx>;
  phase: 'running' | 'completing' | 'done';
  /** Fastify's handlerTimeout fired: the handler may still be running. */
  timedOut?: boolean;
  /** The connection timed out (`connectionTimeout`, the onTimeout hooks) while the key was held. */
  socketTimedOut?: boolean;
  /**
   * The route's handler: called and not returned (`running`), returned without answering (`detached`: `return
   * reply`, to answer later from a callback), or settled (`done`: it threw, returned a payload, or answered).
   * Undefined on a route the plugin does not wrap.
   */
  handler?: 'running' | 'detached' | 'done';
  /** `reply.send()` was called: a throw after it does not replace that answer (see `guarded`). */
  sending?: boolean;
  /** Calls of `reply.send()`: all of them, and those after the connection timed out (see `answeredBy`). */
  sends?: number;
  lateSends?: number;
  /** An answer that went out while the handler still ran: recorded when it settles. */
  pending?: StoredResponse;
  /**
   * Once onSend has begun recording (or the lease's problem was answered): what any later send of this reply
   * writes, as the record holds it (undefined when the work failed and is retryable). On a replay, the replay
   * itself (no promise: nothing waits for it unless a later hook fails).
   */
  recorded?: Parts | Promise<Parts | undefined>;
}

type States<Tx> = WeakMap<FastifyRequest, State<Tx>>;

const routeOf = (request: FastifyRequest): FastifyRouteIdempotency | undefined =>
  request.routeOptions.config.idempotency;
const covered = (request: FastifyRequest): boolean => routeOf(request) !== false;

/**
 * A Fastify 5 plugin. Registered with `app.register`, its hooks apply to the whole app (it skips Fastify's
 * encapsulation, like `fastify-plugin`); a route opts in to required keys, or out, through its config.
 *
 * It reads the raw body in `preParsing` (and hands Fastify's parser the same bytes), claims in `preHandler`
 * (so put authentication in `onRequest` or `preValidation`, where `scope` can see it), and records the
 * serialized payload in `onSend` before it is written. Stream payloads are buffered, up to `maxResponseBytes`.
 *
 * @example
 * const app = Fastify()
 * app.addHook('onRequest', authenticate)
 * await app.register(idempotency({ store, scope: (request) => request.account }))
 * app.post('/v1/charges', { config: { idempotency: { required: true } } }, async (request, reply) => {
 *   const charge = await createCharge(request.body, { idempotencyKey: request.idempotency?.id })
 *   return reply.code(201).header('location', `/v1/charges/${charge.id}`).send(charge)
 * })
 */
export function idempotency<Tx = never>({
  required = false,
  ...options
}: FastifyIdempotencyOptions<Tx>): FastifyPluginAsync & { readonly engine: Engine<Tx> } {
  if (typeof required !== 'boolean' && typeof required !== 'function') {
    throw configError('required', 'a boolean or a function', required);
  }
  const gate = createGate<Tx, FastifyRequest>({
    ...options,
    required: (request) => {
      const route = routeOf(request);
      if (route && route.required !== undefined) return route.required;
      return typeof required === 'function' ? required(request) : required;
    },
  });
  const states: States<Tx> = new WeakMap();
  const plugin = async (app: FastifyInstance): Promise<void> => {
    if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', null);
    claiming(app, gate, states);
    recording(app, gate, states);
  };
  return Object.assign(plugin, {
    engine: gate.engine,
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: 'idem',
  });
}

/** The hooks up to the handler: preParsing reads the body, preHandler claims, onTimeout marks a held key. */
function claiming<Tx>(app: FastifyInstance, gate: Gate<Tx, FastifyRequest>, states: States<Tx>): void {
  app.addHook('preParsing', async (request, reply, payload) => {
    if (!covered(request) || !gate.mayClaim(request.method, (name) => headerValue(request.headers, name)))
      return payload;
    // The Node request itself, unread (no earlier hook replaced or read it), is read without being consumed and
    // handed on as it is; any other stream (an injected request, a hook's) is read to its end, and Fastify's
    // parser gets the same bytes in a new one. Either way its length check against Content-Length still holds.
    const untouched =
      payload === (request.raw as unknown) &&
      request.raw instanceof IncomingMessage &&
      !request.raw.readableDidRead &&
      request.raw.readableFlowing !== true;
    let body: Uint8Array;
    try {
      body = untouched
        ? await readAndRestore(request.raw, gate.maxBodyBytes, BODY_ALREADY_READ)
        : await readStream(payload, gate.maxBodyBytes);
    } catch (error) {
      states.set(request, { phase: 'done' });
      await answer(reply, gate.answerFor(error, request));
      return reply;
    }
    states.set(request, { body, phase: 'running' });
    return untouched ? payload : Readable.from([Buffer.from(body)], { objectMode: false });
  });

  app.addHook('preHandler', async (request, reply) => {
    // `reply.callNotFound()` runs the preHandler hooks again for the same request: it is already claimed, and its
    // 404 is recorded under that claim.
    if (!covered(request) || states.get(request)?.claim) return;
    const admission = await gate.admit({
      native: request,
      method: request.method,
      url: request.url,
      header: (name) => headerValue(request.headers, name),
      body: () => Promise.resolve(states.get(request)?.body ?? NO_BYTES),
    });
    if (admission.kind === 'answer') {
      if (admission.replay) {
        // A replay is written from the stored parts directly, without a Web Response read back; the state the
        // body was read into is reused: `done`, so onSend passes the bytes on as they are.
        const { status, headers, body } = replayParts(admission.replay);
        const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
        const read = states.get(request);
        if (read) {
          read.phase = 'done';
          read.recorded = { status, headers, body: bytes };
        } else states.set(request, { phase: 'done', recorded: { status, headers, body: bytes } });
        reply.code(status);
        for (const [name, value] of headers) reply.header(name, value);
        void reply.send(bytes);
      } else {
        states.set(request, { phase: 'done' });
        await answer(reply, admission.response);
      }
      return reply;
    }
    request.idempotency = admission.context;
    if (admission.kind === 'pass') return;
    if (reply.sent) {
      // Answered while the claim was on its way (handlerTimeout): Fastify will not run the handler.
      await admission.fail();
      return;
    }
    // A client that goes away does not release the key: the handler goes on and its outcome is recorded.
    // The state the body was read into, now holding the claim.
    let state = states.get(request);
    if (state) state.claim = admission;
    else states.set(request, (state = { claim: admission, phase: 'running' }));
    // After the reply is written or abandoned: see `bypassed`.
    reply.raw.once('close', () => bypassed(state, reply));
    const send = reply.send.bind(reply);
    reply.send = (payload?: unknown) => {
      state.sending = true;
      state.sends = (state.sends ?? 0) + 1;
      if (state.socketTimedOut) state.lateSends = (state.lateSends ?? 0) + 1;
      // A handler that returned without answering settles when it answers (see `answeredBy`).
      if (state.handler === 'detached' && answeredBy(state)) finished(state);
      return send(payload);
    };
    // The engine gives the key up at `maxHoldMs` (a local route's work never is): see `givenUp`.
    admission.lease?.onGivenUp((error) => givenUp(gate, request, reply, state, error));
    return;
  });

  // A connection timeout leaves the handler running; an onTimeout hook may still send (to a closed socket).
  app.addHook('onTimeout', async (request) => {
    const state = states.get(request);
    if (state?.claim) state.socketTimedOut = true;
  });
}

/** The hooks from the handler on: onRoute wraps it, onError and onSend keep to what the record holds. */
function recording<Tx>(app: FastifyInstance, gate: Gate<Tx, FastifyRequest>, states: States<Tx>): void {
  // Each covered route's handler, so the plugin knows when it has settled: see `returned` and `threw`.
  app.addHook('onRoute', (route) => {
    if (route.config?.idempotency === false) return;
    const handler = route.handler;
    route.handler = function guarded(this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
      const state = states.get(request);
      if (state?.claim) state.handler = 'running';
      let result: unknown;
      try {
        result = handler.call(this, request, reply);
      } catch (error) {
        return threw(states.get(request), reply, error);
      }
      // `return reply` (a thenable that resolves once the reply has gone, or the socket closed): returned now.
      if (result === reply || !isThenable(result)) {
        returned(states.get(request), reply, result);
        return result;
      }
      return result.then(
        (value) => {
          returned(states.get(request), reply, value);
          return value;
        },
        (error: unknown) => threw(states.get(request), reply, error),
      );
    };
  });

  // Fastify's handlerTimeout answers (503) while the handler may still be running: it only aborts
  // `request.signal`. A retryable record would let a retry run the work beside it, so that answer is recorded
  // final. Its own bytes, not a problem of Idem's: a handler rejecting on the abort makes Fastify write the same
  // error again, straight to the socket, and whichever goes out first, the record holds the same answer.
  //
  // Any other error once the answer was recorded (or replayed) and handed on comes from after Idem's onSend: a
  // later hook that failed, or a write Node refused. Fastify would answer it around every hook, with a status
  // and body the record does not hold; the recorded answer is written to the socket instead.
  app.addHook('onError', async (request, reply, error) => {
    const state = states.get(request);
    if (!state) return;
    if ((error as { code?: unknown }).code === 'FST_ERR_HANDLER_TIMEOUT') {
      if (state.claim) state.timedOut = true;
      return;
    }
    if (state.phase !== 'done' || !state.recorded) return;
    const recorded = await state.recorded;
    if (recorded && !reply.raw.headersSent) writeRaw(reply, recorded);
  });

  // Not an async function: a request with nothing to record (no key, a replay, a refusal) passes its payload on
  // in the same turn, without a promise; only a claimed one waits for its record.
  app.addHook('onSend', (request, reply, payload, done) => {
    const state = states.get(request);
    if (!state) return done(null, payload);
    // A replay has no reason phrase but the status's own, so the first answer has none either (and one with a
    // CR or LF, which Node refuses, made Fastify's error handler reject a promise nobody handled).
    reply.raw.statusMessage = '';
    // A replay passes on the stored bytes, not what onSend hooks before this one made of them a second time.
    if (!state.claim) return done(null, state.recorded && !('then' in state.recorded) ? state.recorded.body : payload);
    return recordSend(gate, reply, payload, state);
  });
}

/**
 * The engine gave the key up before anything was sent: held past `maxHoldMs`, it is settled failed, retryable,
 * and the handler's signal aborted. The client gets the lease's problem (409) now, rather than a connection held
 * for a handler that may never answer; whatever the handler sends later is not written. (Past its local
 * deadline a lease is still renewed and its answer may still be recorded: that abort is left to the handler.)
 */
function givenUp<Tx>(
  gate: Gate<Tx, FastifyRequest>,
  request: FastifyRequest,
  reply: FastifyReply,
  state: State<Tx>,
  error: unknown,
) {
  if (state.phase !== 'running' || state.sending || reply.sent) return;
  state.phase = 'done';
  const recorded = responseParts(gate.answerFor(error, request));
  state.recorded = recorded;
  void recorded.then((parts) => {
    if (!reply.sent) void reply.send(writeParts(reply, parts));
  });
}

/**
 * The handler returned. With a payload (Fastify sends it) or once it has answered, it has settled; with nothing
 * (`return reply`, or an async handler's promise that adopted `reply`) before it answered, it may still answer
 * from a callback: `detached`, it settles when it does (or when the engine gives the key up at `maxHoldMs`).
 */
function returned<Tx>(state: State<Tx> | undefined, reply: FastifyReply, value: unknown): void {
  if (state?.claim && state.handler === 'running') {
    if ((value !== undefined && value !== reply) || answeredBy(state)) finished(state);
    else state.handler = 'detached';
  }
  bypassed(state, reply);
}

/** The handler settled: an answer held for it (see `settle`) is recorded now. */
function finished<Tx>(state: State<Tx>): void {
  state.handler = 'done';
  if (state.pending && state.claim) void state.claim.complete(state.pending);
}

/**
 * Whether the sends so far include the handler's own answer. One before the connection timed out is; after it,
 * the first may be an onTimeout hook's (the plugin's hook, registered first, marks the timeout before yours
 * run), so only a second one is taken as the handler's.
 */
function answeredBy<Tx>(state: State<Tx>): boolean {
  const late = state.lateSends ?? 0;
  return (state.sends ?? 0) > late || late > 1;
}

/**
 * The handler threw. Before it answered, the error is the answer (Fastify's error handler writes it, and it is
 * recorded). After `reply.send()`, that answer stands: it is what the record holds, or will, so it is what the
 * client gets; the error is logged, as Fastify logs a rejection after a reply was sent, and the handler's
 * promise resolves once the answer is written.
 */
function threw<Tx>(state: State<Tx> | undefined, reply: FastifyReply, error: unknown): FastifyReply {
  if (state?.claim && state.handler !== 'done') finished(state);
  bypassed(state, reply);
  if (!state?.claim || !(state.sending || state.phase !== 'running')) throw error;
  reply.log.error({ err: error }, 'idem: the handler threw after its reply was sent; that reply stands');
  return reply;
}

/**
 * A reply that bypassed onSend has gone out unseen: the work ran, perhaps moved money, and what it answered
 * cannot be replayed — `reply.hijack()` (then written to the socket, or abandoned by the client), or an app's
 * onSend hook that failed before Idem's. Recorded as a final failure, so a retry gets a problem rather than a
 * second run; a retryable record would run the work again. Checked when the handler returns and when the reply
 * closes (`close` follows `finish`, and comes alone when the client left): a hijack can come after either.
 * Only a sent reply counts: one not sent yet may still come through onSend, even when the client has left and
 * the handler has returned (`return reply`, then `reply.send()` from a callback).
 */
function bypassed<Tx>(state: State<Tx> | undefined, reply: FastifyReply): void {
  if (!state?.claim || state.phase !== 'running' || !reply.sent) return;
  state.phase = 'done';
  const claim = state.claim;
  void storedProblem(...NOT_RECORDED).then((stored) => claim.complete(stored, 'failed-final'));
}

/** onSend for a claimed request: records the payload (see `settle`) and resolves with what to write. */
async function recordSend<Tx>(gate: Gate<Tx, FastifyRequest>, reply: FastifyReply, payload: unknown, state: State<Tx>) {
  if (state.phase !== 'running') {
    // A second send while or after the first was recorded (handlerTimeout firing meanwhile, or the lease's
    // problem already answered): the client gets what the record holds, never an answer it does not.
    const recorded = await state.recorded;
    return recorded ? writeParts(reply, recorded) : payload;
  }
  // Thrown before anything is recorded: the error handler's answer to it (a 500) is what is recorded.
  const invalid = unwritable(reply);
  if (invalid) throw invalid;
  state.phase = 'completing';
  const settled = settle(gate, reply, payload, state);
  state.recorded = settled.then(
    (outcome) => outcome.recorded,
    () => undefined,
  );
  try {
    return (await settled).write;
  } finally {
    state.phase = 'done';
  }
}

/**
 * Records the reply's payload (final after a handlerTimeout) and says what to write: the payload itself, or the
 * problem that replaced it; `recorded` is what any later send of this reply writes instead.
 *
 * After a connection timeout, with the handler not settled (still running, or returned to answer from a
 * callback), what is sent reaches no client (an onTimeout hook's 503 goes to a closed socket), and recording it
 * retryable would let a retry run the work beside the handler: it is held until the handler settles
 * (`finished`), then recorded as it was answered; a handler that never does holds the key until `maxHoldMs`. On
 * a route the plugin does not wrap, the handler cannot be seen to settle: the key is abandoned (held until its
 * lease lapses).
 */
async function settle<Tx>(
  gate: Gate<Tx, FastifyRequest>,
  reply: FastifyReply,
  payload: unknown,
  state: State<Tx>,
): Promise<{ write: unknown; recorded: Parts }> {
  const claim = state.claim as Claim<Tx>;
  // An answer that replaces the payload: written now, and by any later send.
  const instead = async (response: Response) => {
    const answered = await responseParts(response);
    return { write: writeParts(reply, answered), recorded: answered };
  };
  let captured: Captured;
  try {
    captured = await capture(reply, payload, gate.maxResponseBytes, gate.replayHeaders);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) {
      await claim.fail(true);
      throw error;
    }
    const stored = await responseTooLarge(error);
    return instead((await claim.complete(stored, 'failed-final')) ?? storedResponse(stored));
  }
  const { status, headers, body } = captured.stored;
  const written = { write: captured.payload, recorded: { status, headers, body: Buffer.from(body) } };
  if (state.socketTimedOut && state.handler !== 'done' && claim.lease) {
    if (state.handler) state.pending = captured.stored;
    else await claim.lease.abandon();
    return written;
  }
  const replacement = await claim.complete(captured.stored, state.timedOut ? 'failed-final' : undefined);
  return replacement ? instead(replacement) : written;
}

const BODY_ALREADY_READ =
  'idem/fastify: the request body was already read. Register idempotency() before hooks that read the raw body.';

const NOT_RECORDED = [
  'response-not-recorded',
  'Response not recorded',
  'The response went out around Idem (reply.hijack(), or an onSend hook that failed before Idem’s), so it was not recorded; this key will not run again.',
] as const;
