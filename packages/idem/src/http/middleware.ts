/**
 * @module The Web-standard idempotency layer: `(Request) => Promise<Response>` around your handler, and the
 * framework-neutral gate it is built on (which the Express, Fastify and Hono adapters share).
 */
import {
  createEngine,
  type Engine,
  type EngineOptions,
  type Lease,
  type OutcomeKind,
  type RunRequest,
} from '../core/engine.js';
import { selectFields } from '../core/fields.js';
import { configError, IdempotencyError, isIdempotencyError } from '../core/errors.js';
import { fingerprintSoon, isJsonType } from '../core/fingerprint.js';
import { parseKey } from '../core/key.js';
import type { StoredResponse } from '../core/record.js';
import type { HandlerContext, IdempotencyOptions, IdempotentHandler } from './options.js';
import { claim, type ClaimSettings } from './claim.js';
import { problem, problemFor } from './problem.js';
import { BodyTooLargeError, DEFAULT_REPLAY_HEADERS, readBytes, storableHeaders } from './replay.js';
import { responseSize, storedResponse } from './stored.js';
import { serveWeb } from './web.js';

export type {
  Declaration,
  HandlerContext,
  HttpReconcileAnswer,
  IdempotencyOptions,
  IdempotentHandler,
} from './options.js';
export { responseTooLarge, storedProblem, storedResponse } from './stored.js';
export { serveWeb, type ServeOptions } from './web.js';

/** A handler wrapped by {@link idempotency}, and the engine it runs on. */
export interface IdempotentFetch {
  (request: Request): Promise<Response>;
  readonly engine: Engine<unknown>;
}

/** A request as the gate sees it, whatever framework it came from. */
export interface GateRequest<Req> {
  /** The framework's own request, handed to `scope`, `required` and `onError`. */
  readonly native: Req;
  readonly method: string;
  /** The request target: a path with its query, or an absolute URL. */
  readonly url: string;
  header(name: string): string | null | undefined;
  /** The raw body bytes; rejects with {@link BodyTooLargeError} past `limit`. Called only for keyed requests. */
  body(limit: number): Promise<Uint8Array>;
}

/**
 * What the gate decided about a request: let it through unguarded, answer it without running anything
 * (replay, or a problem: nothing was claimed, so nothing is written), or run it under a claim.
 */
export type Admission<Tx> = { readonly kind: 'pass'; readonly context: HandlerContext<Tx> } | Answer | Claim<Tx>;

/**
 * An answer given without running the handler. On a replay, `replay` is the stored response and `response` is
 * built from it only when read, so an adapter can write `replayParts(replay)` without a Web `Response`.
 */
export interface Answer {
  readonly kind: 'answer';
  readonly response: Response;
  readonly replay?: StoredResponse;
}

/**
 * A claimed key: the handler may run under `lease`. Exactly one of `complete` or `fail` follows (a second call
 * changes nothing); until then the lease is renewed.
 */
export interface Claim<Tx> {
  readonly kind: 'run';
  readonly context: HandlerContext<Tx>;
  /** The lease the handler runs under; null on a `local` route, where the open transaction holds the key. */
  readonly lease: Lease<Tx> | null;
  /** The request body the fingerprint was computed over. */
  readonly body: Uint8Array;
  /**
   * Records the response the handler produced (classified by status unless declared). Resolves once the record
   * is written: with `undefined` (send the handler's response), or with the response to send instead — the
   * problem when it could not be recorded (lease lost: 409; store down: 503), or the stored `response-too-large`
   * problem. Never rejects. Send nothing of the handler's response before it resolves.
   */
  complete(response: StoredResponse, outcome?: OutcomeKind): Promise<Response | undefined>;
  /**
   * The handler produced no response (it threw): the key ends `failed`, retryable. With `answered`, it did, but the
   * response could not be read or sent whole (its body failed): the same, except under `takeover: 'reconcile'` or
   * `'quarantine'`, where the outcome is unknown and the key lapses into a takeover. Never rejects.
   */
  fail(answered?: boolean): Promise<void>;
}

/** The framework-neutral core of the Web layer and the adapters: options validated once, one engine. */
export interface Gate<Tx, Req> {
  readonly engine: Engine<Tx>;
  readonly replayHeaders: readonly string[];
  readonly maxBodyBytes: number;
  /** The smaller of the `maxResponseBytes` option and the store's own limit. */
  readonly maxResponseBytes: number;
  /** Never rejects: every refusal or failure becomes an `answer`. */
  admit(request: GateRequest<Req>): Promise<Admission<Tx>>;
  /** False when `admit` would let this request pass without reading its body (unprotected method, or no key header). */
  mayClaim(method: string, header: (name: string) => string | null | undefined): boolean;
  /** The problem for an error; errors that are not Idem's go to `onError` first. */
  answerFor(error: unknown, request: Req): Response;
}

const MiB = 1_048_576;

/** No fingerprinted headers (the default): one empty list for every request. */
const NO_HEADERS: ReadonlyArray<readonly [string, string]> = Object.freeze([]);

/** The signal of unguarded work: nothing can abort it, so one serves every request. */
const NEVER_ABORTED: AbortSignal = new AbortController().signal;

/**
 * Builds the gate: validates the options (errors name the option) and creates the engine. Adapters call this;
 * applications use {@link idempotency} or an adapter.
 *
 * @example
 * const gate = createGate<never, IncomingMessage>({ store: memoryStore(), scope: (req) => accountOf(req) })
 * const admission = await gate.admit({ native: req, method: req.method, url: req.url, header, body })
 */
export function createGate<Tx, Req>({
  scope,
  required = false,
  methods = ['POST', 'PATCH'],
  fingerprintHeaders = [],
  fingerprintFields,
  fingerprintBody,
  keyHeader = 'idempotency-key',
  key: keyOf,
  ttlFor,
  classify,
  mismatchStatus = 400,
  replayHeaders = DEFAULT_REPLAY_HEADERS,
  maxBodyBytes = MiB,
  maxResponseBytes = MiB,
  onError = (error) => console.error('idem: handler failed', error),
  local = false,
  ...engineOptions
}: IdempotencyOptions<Tx, Req>): Gate<Tx, Req> {
  const { onEvent } = engineOptions;
  checkOptions(
    { scope, required, mismatchStatus, maxBodyBytes, maxResponseBytes, keyHeader, local },
    { fingerprintBody, key: keyOf, ttlFor, classify, fingerprintFields, takeover: engineOptions.takeover },
  );
  const scopeOf = scope === 'single-tenant' ? () => 'single-tenant' : scope;
  const keyName = keyHeader.toLowerCase();
  const engine = createEngine(withStoredAnswers(engineOptions, replayHeaders, () => responseLimit));
  if (local && (typeof engine.store.runLocal !== 'function' || engine.store.localWork !== 'async')) {
    throw configError(
      'local',
      'false with this store: a local route needs a store whose transactions can wait for the handler (PostgreSQL); on SQLite call runLocal() with synchronous work inside the handler',
      local,
    );
  }
  const responseLimit = Math.min(maxResponseBytes, engine.store.maxResponseBytes ?? Infinity);
  const protectedMethods = new Set(methods.map((m) => m.toUpperCase()));
  const fingerprinted = fingerprintHeaders.map((h) => h.toLowerCase());
  const settings = Object.freeze({ mismatchStatus });

  function answerFor(error: unknown, request: Req): Response {
    if (isIdempotencyError(error)) return problemFor(error, settings);
    if (error instanceof BodyTooLargeError) {
      return problem({
        status: 413,
        slug: 'request-too-large',
        title: 'Request body too large',
        detail: error.message,
      });
    }
    try {
      onError(error, request);
    } catch {
      // A logging hook must not turn an answer into a hung request.
    }
    return problem({ status: 500, slug: 'internal-error', title: 'Internal server error' });
  }

  const claims: ClaimSettings<Tx, Req> = { engine, local, responseLimit, classify, answerFor };

  async function admit(request: GateRequest<Req>): Promise<Admission<Tx>> {
    try {
      if (!protectedMethods.has(request.method.toUpperCase())) return pass();
      const raw = (keyOf ? await keyOf(request.native) : request.header(keyName)) ?? null;
      if (raw === null) {
        const mustHave = typeof required === 'function' ? required(request.native) : required;
        if (mustHave)
          throw new IdempotencyError(
            'KEY_MISSING',
            `${request.method} requests to this route need an ${keyHeader} header.`,
          );
        return pass();
      }
      const key = parseKey(raw);
      const body = await request.body(maxBodyBytes);
      const url = target(request.url);
      // Awaited only when it is a promise: each await of a plain value costs the request a turn of the microtask queue.
      const scoped = scopeOf(request.native);
      const tenant = typeof scoped === 'string' ? scoped : await scoped;
      if (typeof tenant !== 'string' || tenant.length === 0)
        throw new TypeError('`scope(request)` must return a non-empty string.');
      const contentType = request.header('content-type') ?? null;
      const chosen =
        fingerprintBody || fingerprintFields
          ? await payload(fingerprintBody, fingerprintFields, body, contentType, request.native)
          : undefined;
      const soon = fingerprintSoon({
        method: request.method,
        path: url.pathname,
        query: url.search,
        contentType: chosen ? chosen.contentType : contentType,
        body: chosen ? chosen.body : body,
        headers:
          fingerprinted.length === 0
            ? NO_HEADERS
            : fingerprinted.map((name) => [name, request.header(name) ?? ''] as const),
      });
      // A promise only where the runtime lacks node:crypto (WebCrypto answers asynchronously).
      const print = typeof soon === 'string' ? soon : await soon;
      const ttlMs = ttlFor?.(request.native);
      const run: RunRequest =
        ttlMs === undefined
          ? { scope: tenant, key, fingerprint: print, route: url.pathname }
          : { scope: tenant, key, fingerprint: print, route: url.pathname, ttlMs };
      return await claim(claims, run, body, request.native);
    } catch (error) {
      refusedEvent(onEvent, error, request.url);
      return { kind: 'answer', response: answerFor(error, request.native) };
    }
  }

  const mayClaim = (method: string, header: (name: string) => string | null | undefined): boolean =>
    protectedMethods.has(method.toUpperCase()) && (keyOf !== undefined || (header(keyName) ?? null) !== null);

  return { engine, replayHeaders, maxBodyBytes, maxResponseBytes: responseLimit, admit, mayClaim, answerFor };
}

/** The options {@link createGate} checks that always have a value: given, or their default. */
type AlwaysSet<Tx, Req> = Required<
  Pick<
    IdempotencyOptions<Tx, Req>,
    'scope' | 'required' | 'mismatchStatus' | 'maxBodyBytes' | 'maxResponseBytes' | 'keyHeader' | 'local'
  >
>;

/** The options {@link createGate} checks that may be absent. */
type MaybeSet<Tx, Req> = {
  readonly [K in 'fingerprintBody' | 'key' | 'ttlFor' | 'classify' | 'fingerprintFields' | 'takeover']:
    IdempotencyOptions<Tx, Req>[K] | undefined;
};

/** Throws the `configError` naming the first of these options that is not what it must be. */
function checkOptions<Tx, Req>(
  { scope, required, mismatchStatus, maxBodyBytes, maxResponseBytes, keyHeader, local }: AlwaysSet<Tx, Req>,
  { fingerprintBody, key: keyOf, ttlFor, classify, fingerprintFields, takeover }: MaybeSet<Tx, Req>,
): void {
  if (typeof scope !== 'function' && scope !== 'single-tenant') {
    throw configError(
      'scope',
      "a function (request) => tenant, or 'single-tenant' for a service with one tenant",
      scope,
    );
  }
  if (typeof required !== 'boolean' && typeof required !== 'function') {
    throw configError('required', 'a boolean or a function', required);
  }
  if (mismatchStatus !== 400 && mismatchStatus !== 422)
    throw configError('mismatchStatus', '400 or 422', mismatchStatus);
  for (const [name, value] of [
    ['maxBodyBytes', maxBodyBytes],
    ['maxResponseBytes', maxResponseBytes],
  ] as const) {
    if (!Number.isInteger(value) || value <= 0) throw configError(name, 'a positive integer', value);
  }
  for (const [name, value] of [
    ['fingerprintBody', fingerprintBody],
    ['key', keyOf],
    ['ttlFor', ttlFor],
    ['classify', classify],
  ] as const) {
    if (value !== undefined && typeof value !== 'function') throw configError(name, 'a function', value);
  }
  if (typeof keyHeader !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(keyHeader)) {
    throw configError('keyHeader', 'an HTTP header name', keyHeader);
  }
  if (fingerprintFields) {
    const paths =
      (fingerprintFields as { include?: unknown }).include ?? (fingerprintFields as { exclude?: unknown }).exclude;
    if (!Array.isArray(paths) || paths.some((p) => typeof p !== 'string' || p === '')) {
      throw configError('fingerprintFields', '{ include: string[] } or { exclude: string[] }', fingerprintFields);
    }
  }
  if (typeof local !== 'boolean') throw configError('local', 'a boolean', local);
  if (local && (takeover ?? 'rerun') !== 'rerun')
    throw configError('takeover', "'rerun' on a local route (its work has no outside call to be unsure of)", takeover);
}

/** The admission of a request that runs unguarded: nothing claimed, nothing to abort. */
const pass = <Tx>(): Admission<Tx> => ({
  kind: 'pass',
  context: {
    scope: '',
    key: '',
    id: crypto.randomUUID(),
    reclaimed: false,
    signal: NEVER_ABORTED,
    protected: false,
    declare: () => {},
  },
});

/** A refusal before any claim is an event too (the engine reports the ones after). */
function refusedEvent(onEvent: EngineOptions<unknown>['onEvent'], error: unknown, url: string): void {
  if (!onEvent) return;
  const reason = isIdempotencyError(error, 'KEY_MISSING')
    ? 'KEY_MISSING'
    : isIdempotencyError(error, 'KEY_INVALID')
      ? 'KEY_INVALID'
      : error instanceof BodyTooLargeError
        ? 'BODY_TOO_LARGE'
        : undefined;
  if (reason === undefined) return;
  try {
    onEvent({ type: 'refused', reason, route: target(url).pathname });
  } catch {
    // A metrics hook must never change what happens to a payment.
  }
}

/** What the fingerprint hashes as the payload: the body, its chosen fields, or the caller's own text. */
async function payload<Req>(
  fingerprintBody: IdempotencyOptions<unknown, Req>['fingerprintBody'],
  fingerprintFields: IdempotencyOptions<unknown, Req>['fingerprintFields'],
  body: Uint8Array,
  contentType: string | null,
  native: Req,
): Promise<{ contentType: string | null; body: Uint8Array }> {
  if (fingerprintBody)
    return { contentType: 'text/plain', body: new TextEncoder().encode(await fingerprintBody(body, native)) };
  if (!fingerprintFields || !isJsonType(contentType)) return { contentType, body };
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return { contentType, body };
  }
  const chosen = selectFields(text, fingerprintFields);
  return { contentType, body: chosen === undefined ? body : new TextEncoder().encode(chosen) };
}

/**
 * The engine's options with the `reconcile` hook's answers stored as a handler's response is: either form goes
 * through a Web `Response` (which refuses a header name or value no replay could send), its headers filtered by
 * `replayHeaders`, its size bounded by `limit()`; an answer that fails any of it is a failed hook (503).
 */
function withStoredAnswers<Tx, Req>(
  { reconcile, ...options }: Omit<IdempotencyOptions<Tx, Req>, 'scope'>,
  replayHeaders: readonly string[],
  limit: () => number,
): EngineOptions<Tx> {
  if (typeof reconcile !== 'function') return { ...options, ...(reconcile === undefined ? {} : { reconcile }) };
  return {
    ...options,
    reconcile: async (context) => {
      const answer = await reconcile(context);
      if (answer?.state !== 'succeeded' && answer?.state !== 'failed') return answer as never;
      const given = answer.response;
      if (!(given instanceof Response) && !(given?.body instanceof Uint8Array))
        throw new TypeError('reconcile answered a response whose body is not bytes');
      const response = given instanceof Response ? given : storedResponse(given);
      // Read no further than a record can hold: a larger answer is a failed hook (BodyTooLargeError).
      const body = await readBytes(response.body, limit());
      const stored = { status: response.status, headers: storableHeaders(response.headers, replayHeaders), body };
      if (responseSize(stored) > limit()) throw new BodyTooLargeError(limit());
      return { state: answer.state, response: stored, resultId: answer.resultId ?? null };
    },
  };
}

/**
 * A path of plain segments: nothing the URL parser would rewrite (no dot segment, escape or backslash, and no
 * leading `//`, which it reads as a host).
 */
const PLAIN_PATH = /^\/(?:[A-Za-z0-9_~-]+(?:\/[A-Za-z0-9_~-]*)*)?$/;

/**
 * The request target's path and query as the fingerprint sees them: what `new URL(target, base)` gives, without
 * parsing a URL for the usual plain path with no query.
 */
function target(url: string): { pathname: string; search: string } {
  if (PLAIN_PATH.test(url)) return { pathname: url, search: '' };
  return new URL(url, 'http://idem.invalid');
}

/**
 * Wraps a Web-standard handler so retries with the same `Idempotency-Key` run it once.
 *
 * @example
 * const protect = idempotency({ store: memoryStore(), scope: (req) => accountOf(req), required: true })
 * const handle = protect(async (request, { id }) => {
 *   const charge = await createCharge(await request.json(), { idempotencyKey: id })
 *   return Response.json(charge, { status: 201 })
 * })
 * const response = await handle(new Request('http://x/v1/charges', { method: 'POST', headers, body }))
 */
export function idempotency<Tx = never>(
  options: IdempotencyOptions<Tx>,
): (handler: IdempotentHandler<Tx>) => IdempotentFetch {
  const gate = createGate<Tx, Request>(options);
  return (handler) =>
    Object.assign((request: Request) => serveWeb(gate, request, request, handler), { engine: gate.engine });
}
