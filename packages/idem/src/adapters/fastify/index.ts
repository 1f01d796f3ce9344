/**
 * @module `idem/fastify` — idempotency keys as a Fastify 5 plugin, with per-route opt-in through route config.
 */
import { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Engine } from '../../core/engine.js';
import { configError } from '../../core/errors.js';
import { isThenable } from '../../core/local.js';
import type { StoredResponse } from '../../core/record.js';
import {
  createGate,
  responseTooLarge,
  storedProblem,
  storedResponse,
  type Claim,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/middleware.js';
import {
  BodyTooLargeError,
  bodyFor,
  readBytes,
  replayParts,
  storableHeaders,
  storableNodeHeaders,
} from '../../http/replay.js';
import {
  headerPairs,
  headerValue,
  NO_BYTES,
  NULL_BODY_STATUSES,
  readAndRestore,
  readStream,
  responseParts,
  toBuffer,
  toBytes,
} from '../shared.js';

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
  /** Once onSend has begun recording: what the record holds (undefined when the work failed and is retryable). */
  recorded?: Promise<Parts | undefined>;
}

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
  const routeOf = (request: FastifyRequest): FastifyRouteIdempotency | undefined =>
    request.routeOptions.config.idempotency;
  const gate = createGate<Tx, FastifyRequest>({
    ...options,
    required: (request) => {
      const route = routeOf(request);
      if (route && route.required !== undefined) return route.required;
      return typeof required === 'function' ? required(request) : required;
    },
  });
  const states = new WeakMap<FastifyRequest, State<Tx>>();
  const covered = (request: FastifyRequest): boolean => routeOf(request) !== false;

  const plugin = async (app: FastifyInstance): Promise<void> => {
    if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', null);

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
        body: async () => states.get(request)?.body ?? NO_BYTES,
      });
      if (admission.kind === 'answer') {
        states.set(request, { phase: 'done' });
        if (admission.replay) {
          // A replay is written from the stored parts directly, without a Web Response read back.
          const { status, headers, body } = replayParts(admission.replay);
          reply.code(status);
          for (const [name, value] of headers) reply.header(name, value);
          void reply.send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
        } else {
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
      const state: State<Tx> = { claim: admission, phase: 'running' };
      states.set(request, state);
      // After the reply is written or abandoned: see `bypassed`.
      reply.raw.once('close', () => bypassed(request, reply));
      return;
    });

    // Each covered route's handler, so the plugin knows when it has returned: see `bypassed`.
    app.addHook('onRoute', (route) => {
      if (route.config?.idempotency === false) return;
      const handler = route.handler;
      route.handler = function guarded(this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
        const result: unknown = handler.call(this, request, reply);
        if (isThenable(result)) {
          const after = () => bypassed(request, reply);
          result.then(after, after);
        } else {
          bypassed(request, reply);
        }
        return result;
      };
    });

    /**
     * A reply that bypassed onSend has gone out unseen: the work ran, perhaps moved money, and what it answered
     * cannot be replayed — `reply.hijack()` (then written to the socket, or abandoned by the client), or an app's
     * onSend hook that failed before Idem's. Recorded as a final failure, so a retry gets a problem rather than a
     * second run; a retryable record would run the work again. Checked when the handler returns and when the reply
     * closes (`close` follows `finish`, and comes alone when the client left): a hijack can come after either.
     * Only a sent reply counts: one not sent yet may still come through onSend, even when the client has left and
     * the handler has returned (`return reply`, then `reply.send()` from a callback).
     */
    function bypassed(request: FastifyRequest, reply: FastifyReply): void {
      const state = states.get(request);
      if (!state?.claim || state.phase !== 'running' || !reply.sent) return;
      state.phase = 'done';
      const claim = state.claim;
      void storedProblem(...NOT_RECORDED).then((stored) => claim.complete(stored, 'failed-final'));
    }

    // Fastify's handlerTimeout answers (503) while the handler may still be running: it only aborts
    // `request.signal`. A retryable record would let a retry run the work beside it, so that answer is recorded
    // final. Its own bytes, not a problem of Idem's: a handler rejecting on the abort makes Fastify write the same
    // error again, straight to the socket, and whichever goes out first, the record holds the same answer.
    app.addHook('onError', async (request, _reply, error) => {
      const state = states.get(request);
      if (state?.claim && (error as { code?: unknown }).code === 'FST_ERR_HANDLER_TIMEOUT') state.timedOut = true;
    });

    app.addHook('onSend', async (request, reply, payload) => {
      const state = states.get(request);
      const claim = state?.claim;
      if (!state || !claim) return payload;
      if (state.phase !== 'running') {
        // A second send while or after the first was recorded (handlerTimeout firing meanwhile, or a handler that
        // rejected after it answered): the client gets what the record holds, never an answer it does not.
        const recorded = await state.recorded;
        return recorded ? writeParts(reply, recorded) : payload;
      }
      state.phase = 'completing';
      const settled = settle(claim, reply, payload, state.timedOut === true);
      state.recorded = settled.then(
        (outcome) => outcome.recorded,
        () => undefined,
      );
      try {
        return (await settled).write;
      } finally {
        state.phase = 'done';
      }
    });

    /**
     * Records the reply's payload (final after a handlerTimeout) and says what to write: the payload itself, or the
     * problem that replaced it; `recorded` is what any later send of this reply writes instead.
     */
    async function settle(
      claim: Claim<Tx>,
      reply: FastifyReply,
      payload: unknown,
      timedOut: boolean,
    ): Promise<{ write: unknown; recorded: Parts }> {
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
          await claim.fail();
          throw error;
        }
        const stored = await responseTooLarge(error);
        return instead((await claim.complete(stored, 'failed-final')) ?? storedResponse(stored));
      }
      const replacement = await claim.complete(captured.stored, timedOut ? 'failed-final' : undefined);
      if (replacement) return instead(replacement);
      const { status, headers, body } = captured.stored;
      return { write: captured.payload, recorded: { status, headers, body: Buffer.from(body) } };
    }
  };
  return Object.assign(plugin, {
    engine: gate.engine,
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: 'idem',
  });
}

const BODY_ALREADY_READ =
  'idem/fastify: the request body was already read. Register idempotency() before hooks that read the raw body.';

const NOT_RECORDED = [
  'response-not-recorded',
  'Response not recorded',
  'The response went out around Idem (reply.hijack(), or an onSend hook that failed before Idem’s), so it was not recorded; this key will not run again.',
] as const;

interface Captured {
  readonly stored: StoredResponse;
  /** What Fastify writes: the payload as it was, or its bytes when it was a stream (now consumed). */
  readonly payload: unknown;
}

/** The serialized payload `onSend` sees (string, bytes, Node or Web stream, or a Web `Response`) as a stored response. */
async function capture(
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
interface Parts {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Buffer;
}

/** Replaces the reply's status, headers and payload from inside `onSend` (nothing has been written yet). */
function writeParts(reply: FastifyReply, { status, headers, body }: Parts): Buffer {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.code(status);
  for (const [name, value] of headers) reply.header(name, value);
  return body;
}

/** Sends an answer (replay or problem) from a hook; the caller returns `reply` so Fastify stops there. */
async function answer(reply: FastifyReply, response: Response): Promise<void> {
  const { status, headers, body } = await responseParts(response);
  reply.code(status);
  for (const [name, value] of headers) reply.header(name, value);
  void reply.send(body);
}
