/**
 * @module `idem/express` — idempotency keys as Express 5 middleware, mounted before or after Express's body parsers.
 */
import type { NextFunction, Request, RequestHandler, Response as ExpressResponse } from 'express';
import {
  BodyTooLargeError,
  configError,
  createGate,
  problem,
  readAndRestore,
  replayParts,
  type Engine,
  type GateRequest,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/index.js';
import { hold, type HoldSettings } from '../node/hold.js';
import { headerValue, responseParts } from '../shared.js';
import { route, toDictionary, UNSEEN } from './route.js';

/** The Web layer's options; `scope`, `required` and `onError` receive the Express request. */
export type ExpressIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, Request>;

/** The middleware, its engine, and {@link ExpressIdempotency.route} for the handlers it guards. */
export interface ExpressIdempotency<Tx = never> extends RequestHandler {
  readonly engine: Engine<Tx>;
  /**
   * Wraps an async route handler so the middleware sees it settle (its promise, which must end when its work ends;
   * a function returning no promise, or calling `next()`, is treated as unwrapped): a retryable answer sent before then — a timeout middleware's 503, an error handler reached by `next(err)` while the handler
   * goes on — is recorded only once the handler has settled, and retries get 409 until then. Without it such an
   * answer keeps the key refused until the lease lapses (see docs/ADAPTERS.md). Unguarded requests just call it.
   *
   * @example
   * app.post('/v1/charges', guard, express.json(), guard.route(async (req, res) => { ... }))
   */
  route<H extends (req: Request, res: ExpressResponse, next: NextFunction) => unknown>(handler: H): H;
}

const CONTEXT = 'idempotency';

/**
 * Express 5 middleware: the first request with a key runs the route, every retry gets its answer back.
 *
 * Mount it app-wide (`app.use`) or per route, before or after Express's body parsers. Before, it reads the raw
 * body for the fingerprint and puts the bytes back, so `express.json()` after it parses them as usual. After, it
 * fingerprints what the parser left: `req.body` (JSON and forms as canonical JSON, text and bytes as they are), or
 * the exact bytes kept by `express.json({ verify: rawBody })`. A body read by anything else (a multipart parser) is
 * answered 500 with the fix in the problem's detail. On a keyed request the response (head and body) is held until
 * its outcome is recorded, then sent.
 *
 * `guard.route(handler)` lets it see the handler settle, so an answer sent before then (a timeout middleware's 503)
 * keeps retries out until it has (see {@link ExpressIdempotency.route}).
 *
 * @example
 * const app = express()
 * app.use(authenticate)
 * const guard = idempotency({ store, scope: (req) => req.account, required: true })
 * app.post('/v1/charges', guard, express.json(),
 *   guard.route(async (req, res) => {
 *     const charge = await createCharge(req.body, { idempotencyKey: idempotencyContext(res)?.id })
 *     res.status(201).location(`/v1/charges/${charge.id}`).json(charge)
 *   }))
 */
export function idempotency<Tx = never>(options: ExpressIdempotencyOptions<Tx>): ExpressIdempotency<Tx> {
  const gate = createGate<Tx, Request>(options);
  const settings: HoldSettings<Request> = Object.freeze({
    limit: gate.maxResponseBytes,
    replayHeaders: gate.replayHeaders,
    classify: options.classify,
    graceMs: Math.ceil(gate.engine.leaseMs / 2),
    answerFor: (error: unknown, request: Request) => gate.answerFor(error, request),
  });
  let warned = false;
  const middleware = async function idempotencyMiddleware(
    req: Request,
    res: ExpressResponse,
    next: NextFunction,
  ): Promise<void> {
    const request = new ExpressRequest(req);
    let admission = await gate.admit(request);
    if (admission.kind === 'answer' && request.refused !== undefined) {
      // The body was read by a middleware that kept neither the bytes nor all of them in `req.body`: a server
      // mistake, answered 500 with the fix in its detail (and one line in the log), never a request run unguarded.
      if (!warned) {
        warned = true; // one line per middleware (`--no-warnings` silences it)
        process.emitWarning(request.refused, { type: 'IdemWarning', code: 'IDEM_BODY_READ' });
      }
      admission = {
        kind: 'answer',
        response: problem({
          status: 500,
          slug: 'internal-error',
          title: 'Internal server error',
          detail: request.refused,
        }),
      };
    }
    if (answered(req, res)) {
      // Answered while the body was read (connect-timeout's 503 goes out before the response is held): nothing
      // ran, nothing will (the chain is halted or has ended), so the key is given back at once.
      if (admission.kind === 'run') void (admission.lease ? admission.lease.release() : admission.fail());
      return;
    }
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
    if (admission.kind === 'run') {
      toDictionary(res);
      hold(res, req, admission, settings, UNSEEN);
    }
    next();
  };
  return Object.assign(middleware, { engine: gate.engine, route });
}

/** The response was answered before the middleware could hold it, or a timeout middleware fired meanwhile. */
function answered(req: Request, res: ExpressResponse): boolean {
  return res.headersSent || res.writableEnded || (req as Request & { timedout?: boolean }).timedout === true;
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
  /** Set when the body cannot be had (see {@link refusal}): why, and the fix. */
  declare refused: string | undefined;
  constructor(req: Request) {
    this.native = req;
    this.method = req.method;
    this.url = req.originalUrl;
    this.refused = undefined;
  }
  header(name: string): string | null {
    return headerValue(this.native.headers, name);
  }
  body(limit: number): Promise<Uint8Array> {
    // Read only for a keyed request: from here on Express, its body parser and Node touch `req` as a dictionary
    // (see toDictionary), which costs them less than its hidden class of its own.
    const req = this.native;
    toDictionary(req);
    if (req.readableEnded || req.readableFlowing === true) return this.#parsed(limit);
    return readAndRestore(req, limit, BODY_ALREADY_READ).catch((error: unknown) => {
      throw error instanceof Error && error.message === BODY_ALREADY_READ ? this.#refuse(refusal(req)) : error;
    });
  }

  /**
   * The body after a parser read the stream (`express.json()` mounted first): the bytes kept by {@link rawBody} (or
   * a Buffer in `req.rawBody`, where a `verify` hook of the application's own or Nest's `rawBody: true` put it),
   * else what the parser left in `req.body` — bytes (`express.raw()`) and text (`express.text()`) as they are, a
   * JSON body as JSON text (a string too: `express.json({ strict: false })` parses `"1"` to the string `1`), which
   * the fingerprint makes canonical (key order does not count). That is what the handler reads; a JSON number
   * beyond a double's precision is the one difference from the raw bytes. A parsed form stays a form, never JSON:
   * see {@link formText}.
   */
  #parsed(limit: number): Promise<Uint8Array> {
    const req = this.native;
    const own = req as { body?: unknown; rawBody?: unknown };
    const body: unknown = KEPT.get(req) ?? (own.rawBody instanceof Uint8Array ? own.rawBody : own.body);
    const type = mediaType(req);
    let bytes: Uint8Array;
    if (body instanceof Uint8Array) {
      bytes = body;
    } else if (typeof body === 'string' && !isJson(type)) {
      bytes = ENCODER.encode(body);
    } else {
      const text =
        body === undefined ? undefined : isJson(type) ? jsonText(body) : isForm(type) ? formText(body) : undefined;
      if (text === undefined) return Promise.reject(this.#refuse(refusal(req)));
      bytes = ENCODER.encode(text);
    }
    return bytes.byteLength > limit ? Promise.reject(new BodyTooLargeError(limit)) : Promise.resolve(bytes);
  }

  /** The gate's error (CONFIG_INVALID: no store call, no `onError`); the middleware answers with `message`. */
  #refuse(message: string): Error {
    this.refused = message;
    return configError('the request body', 'unread before idempotency(), or kept by rawBody');
  }
}

/** Bodies kept by {@link rawBody}, by request: nothing is added to the request object itself. */
const KEPT = new WeakMap<object, Uint8Array>();

/**
 * A body parser's `verify` hook that keeps the raw bytes for the fingerprint, for a route where `idempotency()` is
 * mounted after a parser whose result it cannot read as the whole payload (a custom type parsed to an object), or
 * to fingerprint exactly the bytes sent (a JSON number beyond a double's precision included).
 *
 * @example
 * app.use(express.json({ verify: rawBody }))
 * app.post('/v1/charges', idempotency({ store, scope }), handler)
 */
export function rawBody(req: object, _res: unknown, bytes: Uint8Array): void {
  KEPT.set(req, bytes);
}

const ENCODER = new TextEncoder();

/** The request's media type, lower-cased, without parameters. */
function mediaType(req: Request): string {
  return (headerValue(req.headers, 'content-type') ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** A JSON type (the fingerprint's own test): `express.json()` leaves the whole payload in `req.body`. */
function isJson(type: string): boolean {
  return type === 'application/json' || type.endsWith('+json');
}

/** The form type: `express.urlencoded()` leaves the whole payload in `req.body`. */
function isForm(type: string): boolean {
  return type === 'application/x-www-form-urlencoded';
}

/**
 * A parsed form (`express.urlencoded()`, either parser) as JSON text with its object keys sorted (a form's field
 * order does not count) and every `&` escaped (`\u0026`), fingerprinted under the request's own form type: one
 * field, so the form canonicalisation leaves it as it is, and raw bytes, never JSON, so a JSON body that spells
 * the same object is another request, as it is when idempotency() is mounted before the parsers.
 */
function formText(value: unknown): string | undefined {
  const text = jsonText(value, sortedKeys);
  return text?.replaceAll('&', '\\u0026');
}

/** A `JSON.stringify` replacer: a plain object's keys in sorted order, anything else as it is. */
function sortedKeys(_key: string, value: unknown): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const sorted = Object.create(null) as Record<string, unknown>; // `__proto__` stays an own key
  for (const key of Object.keys(value).sort()) sorted[key] = (value as Record<string, unknown>)[key];
  return sorted;
}

/** `value` as JSON text, or undefined where it has none (a function, a BigInt, a cycle). */
function jsonText(value: unknown, replacer?: (key: string, value: unknown) => unknown): string | undefined {
  try {
    return JSON.stringify(value, replacer);
  } catch {
    return undefined;
  }
}

/** Why the body cannot be had, and the fix: one line. */
function refusal(req: Request): string {
  const reader = mediaType(req).startsWith('multipart/')
    ? 'a multipart parser'
    : 'a middleware mounted before idempotency()';
  return (
    `idem/express: the request body was read by ${reader}, which left no copy Idem can fingerprint. ` +
    'Mount idempotency() before it, or keep the bytes with its verify hook: express.json({ verify: rawBody }).'
  );
}

const BODY_ALREADY_READ =
  'idem/express: the request body was already read. Mount idempotency() before express.json() and other body parsers.';
