/**
 * @module `idem/koa` — idempotency keys as Koa 3 middleware, on the Web-standard layer. Written against the public
 * surface alone (`idem/http`), as a third party would write an adapter.
 */
import { STATUS_CODES } from 'node:http';
import { Readable } from 'node:stream';
import type { Context, Middleware } from 'koa';
import {
  classifyStatus,
  createGate,
  problem,
  readAndRestore,
  serveWeb,
  type Engine,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/index.js';

/** The Web layer's options; `scope`, `required` and `onError` receive the Koa context. */
export type KoaIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, Context>;

/** What the middleware sets on the context's state: `ctx.state.idempotency`. */
export interface IdempotencyState {
  idempotency: HandlerContext<unknown>;
}

/** The middleware, and the engine it runs on. */
export type KoaIdempotency<Tx = never> = Middleware<IdempotencyState> & { readonly engine: Engine<Tx> };

/**
 * Koa 3 middleware: the first request with a key runs the rest of the chain, every retry gets its answer back.
 *
 * Mount it **before** body parsers: it reads the raw body for the fingerprint and puts the bytes back, so
 * `bodyParser()` mounted after it parses them as usual. On a keyed request the answer the chain leaves on `ctx`
 * (status, headers, body: a string, bytes, JSON, a stream) is read, recorded, then answered. An error thrown below
 * it is answered as Koa's own `ctx.onerror` answers it, and that answer is recorded (by its status: a 500 leaves the
 * key retryable, a thrown 402 is replayed); the error is emitted on the app as Koa does. So an error handler that
 * formats errors belongs after this middleware, where its answer is the one recorded.
 *
 * A thrown HTTP error with a retryable status (a timeout middleware's `ctx.throw(503)`, mounted after this one) may
 * leave the handler running: the key is then abandoned, not freed — held until its lease lapses (a retry gets 409
 * meanwhile), so no retry runs the work beside it.
 *
 * @example
 * const app = new Koa<IdempotencyState & { account: string }>()
 * app.use(authenticate)
 * app.use(idempotency({ store, scope: (ctx) => ctx.state.account, required: true }))
 * app.use(bodyParser())
 * app.use(async (ctx) => {
 *   const charge = await createCharge(ctx.request.body, { idempotencyKey: ctx.state.idempotency.id })
 *   ctx.status = 201
 *   ctx.set('Location', `/v1/charges/${charge.id}`)
 *   ctx.body = charge
 * })
 */
export function idempotency<Tx = never>(options: KoaIdempotencyOptions<Tx>): KoaIdempotency<Tx> {
  const gate = createGate<Tx, Context>(options);
  const middleware: Middleware<IdempotencyState> = async (ctx, next) => {
    if (UNREQUESTABLE.has(ctx.method)) {
      await next();
      return;
    }
    /** What the chain below threw, if it threw. */
    let thrown: { error: unknown } | undefined;
    const response = await serveWeb(
      gate,
      ctx,
      webRequest(ctx),
      async (_request, context) => {
        ctx.state.idempotency = context;
        try {
          await next();
        } catch (error) {
          thrown = { error };
          // Unguarded: Koa answers the error itself, as without this middleware.
          return context.protected ? errorResponse(ctx, error) : PASSED;
        }
        if (!context.protected) return PASSED;
        return ctx.respond === false ? bypassed(context) : answerOf(ctx);
      },
      (limit) => readAndRestore(ctx.req, limit, BODY_ALREADY_READ),
      { answeredEarly: () => thrown !== undefined && timedOut(thrown.error) },
    );
    if (response !== PASSED) return write(ctx, response);
    if (thrown) throw thrown.error;
  };
  return Object.assign(middleware, { engine: gate.engine });
}

/** Methods a Web `Request` cannot carry: no key guards them, and the chain runs as it is. */
const UNREQUESTABLE = new Set(['CONNECT', 'TRACE', 'TRACK']);

/** The answer of an unguarded request: the chain's own, left on `ctx` for Koa to send. */
const PASSED = new Response(null, { status: 204 });

const BODY_ALREADY_READ =
  'idem/koa: the request body was already read. Mount idempotency() before bodyParser() and other body parsers.';

/**
 * The request as the Web layer sees it: method, target and headers (the body is read from `ctx.req` for the
 * fingerprint), and a signal that aborts when the client leaves before its answer is sent.
 */
function webRequest(ctx: Context): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(ctx.req.headers)) {
    if (typeof value === 'string') headers.append(name, value);
    else if (value) for (const item of value) headers.append(name, item);
  }
  const gone = new AbortController();
  ctx.res.once('close', () => {
    if (!ctx.res.writableFinished) gone.abort();
  });
  return new Request(`http://koa.invalid${ctx.originalUrl}`, { method: ctx.method, headers, signal: gone.signal });
}

/**
 * The answer the chain left on `ctx`, as Koa would send it: a string, bytes, a Node or Web stream, a Blob, a
 * `Response`, or anything else as JSON; no body where the status forbids one or `ctx.body = null` said so; and,
 * for a status set without a body, its status text (what Koa sends then).
 */
function answerOf(ctx: Context): Response {
  const { status } = ctx;
  const headers = new Headers();
  const sent = ctx.response.headers;
  for (const name in sent) {
    const value = sent[name];
    if (Array.isArray(value)) for (const item of value) headers.append(name, String(item));
    else if (value !== undefined) headers.append(name, String(value));
  }
  const body: unknown = ctx.body;
  if (NULL_BODY_STATUSES.has(status)) return new Response(null, { status, headers });
  if (body === null || body === undefined) {
    if ((ctx.response as { _explicitNullBody?: boolean })._explicitNullBody === true) {
      headers.delete('content-type');
      return new Response(null, { status, headers });
    }
    headers.set('content-type', 'text/plain; charset=utf-8');
    return new Response(ctx.req.httpVersionMajor >= 2 ? String(status) : ctx.message || String(status), {
      status,
      headers,
    });
  }
  return new Response(bodyInit(body), { status, headers });
}

const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([204, 205, 304]);

function bodyInit(body: unknown): BodyInit {
  if (typeof body === 'string' || body instanceof Uint8Array) return body as BodyInit;
  if (body instanceof ReadableStream || body instanceof Blob) return body;
  if (body instanceof Response) return body.body ?? '';
  if (typeof (body as { pipe?: unknown }).pipe === 'function') {
    const stream = body instanceof Readable ? body : new Readable().wrap(body as NodeJS.ReadableStream);
    return Readable.toWeb(stream) as unknown as ReadableStream<Uint8Array>;
  }
  return JSON.stringify(body);
}

/**
 * Koa's own answer to an error that reached it (its `ctx.onerror`): the error's status (500 if it has none), its
 * message when it is exposed (else the status text) as plain text, and its headers. The error is emitted on the app.
 */
function errorResponse(ctx: Context, thrown: unknown): Response {
  const error = thrown instanceof Error ? thrown : new Error(`non-error thrown: ${JSON.stringify(thrown)}`);
  ctx.app.emit('error', error, ctx);
  const status = statusOf(error) ?? 500;
  const { expose, headers: own } = error as { expose?: unknown; headers?: unknown };
  const headers = new Headers();
  if (typeof own === 'object' && own !== null) {
    for (const [name, value] of Object.entries(own))
      if (!/^content-(?:type|length)$/i.test(name)) headers.set(name, String(value));
  }
  headers.set('content-type', 'text/plain; charset=utf-8');
  return new Response(expose === true ? error.message : STATUS_CODES[status], { status, headers });
}

/** An error's HTTP status (`status`, else `statusCode`), when it is one a response can carry. */
function statusOf(error: object): number | undefined {
  const { status, statusCode } = error as { status?: unknown; statusCode?: unknown };
  const code = status ?? statusCode;
  return typeof code === 'number' && code >= 200 && code <= 599 && STATUS_CODES[code] !== undefined ? code : undefined;
}

/**
 * An answer given while the handler may still run. Koa's `compose` hides the handler's own promise from a
 * middleware: a timeout mounted below this one rejects its `next()` with an HTTP error (`ctx.throw(503)`) while the
 * handler's promise goes on. An error with a retryable status is taken for that, and the key abandoned; a handler's
 * own plain `Error` (its promise has settled: it threw) and a final refusal (`ctx.throw(402)`) are recorded.
 */
function timedOut(error: unknown): boolean {
  const status = typeof error === 'object' && error !== null ? statusOf(error) : undefined;
  return status !== undefined && classifyStatus(status) === 'failed-retryable';
}

/**
 * `ctx.respond = false`: the handler answered on `ctx.res` around Koa, and nothing of it can be read. The work ran,
 * so the key must not run it again: a final problem is recorded in its place.
 */
function bypassed(context: HandlerContext<unknown>): Response {
  context.declare({ outcome: 'failed-final' });
  return problem({
    status: 500,
    slug: 'response-not-recorded',
    title: 'Response not recorded',
    detail:
      'The response went out around Koa (ctx.respond = false), so it was not recorded; this key will not run again.',
  });
}

/** Puts the Web layer's answer on `ctx` (status, headers, exact bytes) for Koa to send, unless it has answered. */
async function write(ctx: Context, response: Response): Promise<void> {
  const body = Buffer.from(await response.arrayBuffer());
  if (!ctx.writable || ctx.respond === false) return;
  for (const name of ctx.res.getHeaderNames()) ctx.res.removeHeader(name);
  // Koa turns a null body into a 204 unless the status is set after it; a body sets Content-Type and -Length.
  if (body.byteLength === 0) {
    ctx.body = null;
    ctx.status = response.status;
  } else {
    ctx.status = response.status;
    ctx.body = body;
  }
  const seen = new Set<string>();
  for (const [name, value] of response.headers) {
    if (name === 'content-length') continue;
    if (seen.has(name)) ctx.append(name, value);
    else ctx.set(name, value);
    seen.add(name);
  }
}
