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
  type WorkContext,
} from '../core/engine.js';
import { selectFields, type FieldRule } from '../core/fields.js';
import { runLocal, type LocalWorkResult } from '../core/local.js';
import { configError, IdempotencyError, isIdempotencyError } from '../core/errors.js';
import { fingerprint, isJsonType, utf8Length } from '../core/fingerprint.js';
import { parseKey } from '../core/key.js';
import type { StoredResponse } from '../core/record.js';
import { problem, problemFor } from './problem.js';
import {
  BodyTooLargeError,
  DEFAULT_REPLAY_HEADERS,
  readBytes,
  replayResponse,
  storableHeaders,
  bodyFor,
} from './replay.js';

/** What the handler may declare about its outcome, beyond the response itself. */
export interface Declaration<Tx> {
  /** Override the classification by status code. */
  readonly outcome?: OutcomeKind;
  /** What the work produced, e.g. the charge id; shown in the record. */
  readonly resultId?: string;
  /** Writes committed in the same transaction as the record's completion (SQL stores). Keyed requests only. */
  readonly effects?: (tx: Tx) => unknown;
}

/** The handler's view of the request's idempotency. */
export interface HandlerContext<Tx> extends WorkContext {
  /** False when the request carries no key (or its method is not protected): the work runs unguarded. */
  readonly protected: boolean;
  /** Declare the outcome, result id or transactional effects before returning the response. */
  declare(declaration: Declaration<Tx>): void;
  /**
   * On a `local` route: the transaction that holds the claim (a pg client inside `BEGIN`). Write through it only;
   * its writes commit with the record, or roll back with it. Undefined on other routes.
   */
  readonly tx?: Tx;
}

export type IdempotentHandler<Tx> = (request: Request, context: HandlerContext<Tx>) => Response | Promise<Response>;

/**
 * Options of the Web layer and of every adapter. `Req` is the request type the callbacks receive: a Web
 * `Request` here, the framework's own request (or context) in an adapter.
 */
export interface IdempotencyOptions<Tx, Req = Request> extends EngineOptions<Tx> {
  /**
   * The tenant a request belongs to (the authenticated account): two scopes never share a key, so one tenant's
   * key can neither replay another's response nor reveal that it exists. Required: a service with one tenant
   * says so with `'single-tenant'` (every request shares one scope).
   */
  readonly scope: ((request: Req) => string | Promise<string>) | 'single-tenant';
  /** Reject keyless requests with 400 `idempotency-key-missing`. A function decides per request. Default false. */
  readonly required?: boolean | ((request: Req) => boolean);
  /** Methods the layer protects; others pass straight through. Default `POST`, `PATCH`. */
  readonly methods?: readonly string[];
  /** Request headers that take part in the fingerprint. Default none. */
  readonly fingerprintHeaders?: readonly string[];
  /**
   * The JSON body fields (dotted paths into objects) that take part in the fingerprint: `{ include: [...] }` keeps
   * only those, `{ exclude: [...] }` leaves those out (a client timestamp, a trace id). Members are chosen as raw
   * text, so numbers keep every digit. Other bodies are fingerprinted whole. Default: the whole body.
   */
  readonly fingerprintFields?: FieldRule;
  /**
   * Replaces the fingerprint's body part: return the text that stands for the request's payload (hashed with the
   * method, path, query and `fingerprintHeaders`). Runs on every keyed request; keep it linear in the body.
   */
  readonly fingerprintBody?: (body: Uint8Array, request: Req) => string | Promise<string>;
  /** The request header that carries the key. Default `Idempotency-Key`. */
  readonly keyHeader?: string;
  /** Reads the key from the request instead of a header; `null`/`undefined` means the request has none. */
  readonly key?: (request: Req) => string | null | undefined | Promise<string | null | undefined>;
  /** This request's record lifetime, in ms (more than `leaseMs`); `undefined` keeps `ttlMs`. */
  readonly ttlFor?: (request: Req) => number | undefined;
  /**
   * Chooses the outcome of a status the handler answered, before the default classification (2xx/3xx succeed,
   * deterministic 4xx are final, the rest retryable). Return `'release'` to save nothing, as Stripe does for a
   * request that failed validation: the client can fix its payload and retry with the same key.
   *
   * @example
   * classify: (status) => (status === 400 || status === 422 ? 'release' : undefined)
   */
  readonly classify?: (status: number, request: Req) => OutcomeKind | undefined;
  /** Status for a reused key with another payload: 400 (Stripe) or 422 (IETF draft). Default 400. */
  readonly mismatchStatus?: 400 | 422;
  /** Response headers stored and replayed. Default {@link DEFAULT_REPLAY_HEADERS}. */
  readonly replayHeaders?: readonly string[];
  /** Largest request body accepted, in bytes. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /**
   * Largest response stored, in bytes. A larger one is answered and recorded as the final 500
   * `response-too-large` problem. Default 1 MiB, or less where the store declares a smaller `maxResponseBytes`
   * (body plus header names and values; DynamoDB's item limit).
   */
  readonly maxResponseBytes?: number;
  /** Called with errors the handler threw (answered as a 500 problem). Default `console.error`. */
  readonly onError?: (error: unknown, request: Req) => void;
  /**
   * Database-local work, opt-in per route: the claim, the handler's writes (through `context.tx`) and the record's
   * completion run in ONE transaction with one commit; a concurrent duplicate waits on the key's row, then replays.
   * Safe only when every write of the handler goes to the store's own database through `tx` and it calls nothing
   * outside it (no processor, no HTTP call, no message): a rollback undoes the writes, never an outside call. A
   * retryable answer (5xx, 408, 429) or a throw rolls everything back and frees the key. Needs a store whose
   * transactions can wait for the handler (PostgreSQL); see docs/STORES.md. Default false.
   */
  readonly local?: boolean;
}

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
  /** The handler produced no response (it threw): the key ends `failed`, retryable. Never rejects. */
  fail(): Promise<void>;
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

/** A replay's answer: the stored response, and the Web `Response` for it built on first read only. */
function replayAnswer(stored: StoredResponse): Answer {
  let built: Response | undefined;
  return {
    kind: 'answer',
    replay: stored,
    get response(): Response {
      return (built ??= replayResponse(stored));
    },
  };
}

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
  const { onEvent, generateId } = engineOptions;
  const localOptions = { ...(generateId ? { generateId } : {}), ...(onEvent ? { onEvent } : {}) };
  if (typeof scope !== 'function' && scope !== 'single-tenant') {
    throw configError(
      'scope',
      "a function (request) => tenant, or 'single-tenant' for a service with one tenant",
      scope,
    );
  }
  const scopeOf = scope === 'single-tenant' ? () => 'single-tenant' : scope;
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
  const keyName = keyHeader.toLowerCase();
  const engine = createEngine(engineOptions);
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

  const pass = (): Admission<Tx> => ({
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
        fingerprintBody || fingerprintFields ? await payload(body, contentType, request.native) : undefined;
      const print = fingerprint({
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
      const ttlMs = ttlFor?.(request.native);
      const run: RunRequest =
        ttlMs === undefined
          ? { scope: tenant, key, fingerprint: print, route: url.pathname }
          : { scope: tenant, key, fingerprint: print, route: url.pathname, ttlMs };
      return await (local ? claimLocal(run, body, request.native) : claim(run, body, request.native));
    } catch (error) {
      refusedEvent(error, request.url);
      return { kind: 'answer', response: answerFor(error, request.native) };
    }
  }

  /** A refusal before any claim is an event too (the engine reports the ones after). */
  function refusedEvent(error: unknown, url: string): void {
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
  async function payload(
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

  /** Claims the key: a replay or refusal is answered at once; a lease becomes a claim the caller's handler runs under. */
  async function claim(request: RunRequest, body: Uint8Array, native: Req): Promise<Admission<Tx>> {
    const decision = await engine.begin(request);
    if (decision.kind === 'replay') return replayAnswer(decision.response);
    if (decision.kind === 'refused') return { kind: 'answer', response: answerFor(decision.error, native) };
    const { lease } = decision;
    let declared: Declaration<Tx> = {};
    return {
      kind: 'run',
      body,
      lease,
      context: {
        scope: lease.scope,
        key: lease.key,
        id: lease.id,
        reclaimed: lease.reclaimed,
        // Read now, an own property: a context is spread, copied and proxied by handlers, which a getter on a class
        // would not survive; and a getter on an object literal is built by the runtime, which costs more
        // (callgrind: 18k instructions a request) than the AbortController it would save.
        signal: lease.signal,
        protected: true,
        declare: (d) => (declared = { ...declared, ...d }),
      },
      async complete(response, outcome) {
        if (lease.settled) {
          // Settled already (by the adapter, or by the engine past maxHoldMs): any call returns that first
          // settlement and writes nothing. Its refusal is the answer: the handler's response is not what is recorded.
          const first = await lease.fail();
          return first.ok ? undefined : answerFor(first.error, native);
        }
        if (responseSize(response) > responseLimit) {
          // Final, so the work's declared writes commit with it: the work ran and will never run again.
          const stored = await responseTooLarge(new BodyTooLargeError(responseLimit));
          const settled = await lease.complete({ ...declared, response: stored, outcome: 'failed-final' });
          return settled.ok ? storedResponse(stored) : answerFor(settled.error, native);
        }
        // The adapter's own outcome (a too-large replacement) wins over what the handler declared for its response.
        const chosen = outcome ?? declared.outcome ?? classify?.(response.status, native);
        const settled = await lease.complete({
          response,
          ...declared,
          ...(chosen === undefined ? {} : { outcome: chosen }),
        });
        return settled.ok ? undefined : answerFor(settled.error, native);
      },
      async fail() {
        await lease.fail();
      },
    };
  }

  /**
   * A local route's claim: the store opens the transaction and claims the key in it; once it has, the handler runs
   * with `tx`, and `complete` hands its response back into the transaction, which writes the record and commits.
   * A record in the way is answered at once, as `claim` does; nothing of this attempt is visible before the commit.
   */
  function claimLocal(request: RunRequest, body: Uint8Array, native: Req): Promise<Admission<Tx>> {
    return new Promise<Admission<Tx>>((admitted) => {
      let started = false;
      const done = runLocal(
        engine,
        request,
        (tx, { scope, key, id, reclaimed }) =>
          new Promise<LocalWorkResult>((finish, abort) => {
            started = true;
            let declared: Declaration<Tx> = {};
            /** Runs the declared effects in the transaction, then hands the outcome over; a throw rolls back. */
            const settle = async (result: LocalWorkResult): Promise<void> => {
              try {
                if (declared.effects) await declared.effects(tx);
                finish(declared.resultId === undefined ? result : { ...result, resultId: declared.resultId });
              } catch (error) {
                abort(error instanceof Error ? error : new Error(String(error)));
              }
            };
            let settled = false;
            admitted({
              kind: 'run',
              body,
              lease: null,
              context: {
                scope,
                key,
                id,
                reclaimed,
                signal: NEVER_ABORTED,
                protected: true,
                tx,
                declare: (d) => (declared = { ...declared, ...d }),
              },
              async complete(response, outcome) {
                if (settled) return undefined;
                settled = true;
                if (responseSize(response) > responseLimit) {
                  const stored = await responseTooLarge(new BodyTooLargeError(responseLimit));
                  await settle({ response: stored, outcome: 'failed-final' });
                  return (await committed()) ?? storedResponse(stored);
                }
                const chosen = outcome ?? declared.outcome ?? classify?.(response.status, native);
                await settle(chosen === undefined ? { response } : { response, outcome: chosen });
                return committed();
              },
              async fail() {
                if (settled) return;
                settled = true;
                abort(new Error('idem: the handler produced no response'));
                await done.catch(() => {});
              },
            });
          }),
        localOptions,
      );
      /** Resolves once the transaction ended: undefined when it committed (or rolled back a retryable answer). */
      const committed = (): Promise<Response | undefined> =>
        done.then(
          () => undefined,
          (error: unknown) => answerFor(error, native),
        );
      // Settled before the work started: the key was someone else's (a replay or a refusal), or the store failed.
      done.then(
        (result) => {
          if (!started) admitted(replayAnswer(result.response));
        },
        (error: unknown) => {
          if (!started) admitted({ kind: 'answer', response: answerFor(error, native) });
        },
      );
    });
  }

  const mayClaim = (method: string, header: (name: string) => string | null | undefined): boolean =>
    protectedMethods.has(method.toUpperCase()) && (keyOf !== undefined || (header(keyName) ?? null) !== null);

  return { engine, replayHeaders, maxBodyBytes, maxResponseBytes: responseLimit, admit, mayClaim, answerFor };
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
 * What a stored response weighs against a store's limit: its body bytes plus its headers as the stores encode
 * them (a JSON list of pairs, in UTF-8), framing and escapes included.
 */
function responseSize({ body, headers }: StoredResponse): number {
  if (headers.length === 0) return body.byteLength;
  // `[["name","value"],…]` without building it: each pair is its two strings and 7 bytes of framing, plus the
  // brackets and commas. Exact when no character needs escaping or more than one UTF-8 byte; else the long way.
  let size = headers.length + 1;
  for (const [name, value] of headers) {
    if (!PLAIN_JSON.test(name) || !PLAIN_JSON.test(value)) return body.byteLength + utf8Length(JSON.stringify(headers));
    size += name.length + value.length + 7;
  }
  return body.byteLength + size;
}

/** Printable ASCII but `"` and `\`: JSON.stringify writes it as it is, one byte a character. */
const PLAIN_JSON = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * What is stored (and answered) instead of a response too large to store: a final 500 problem.
 *
 * @example
 * const stored = await responseTooLarge(new BodyTooLargeError(1_048_576))
 */
export function responseTooLarge(error: BodyTooLargeError): Promise<StoredResponse> {
  return storedProblem('response-too-large', 'Response too large to store', error.message);
}

/**
 * A 500 problem as a stored response: what is recorded, final, when the work ran but its own response cannot be
 * (too large; written around the adapter). The key then answers this problem and never runs its work again.
 *
 * @example
 * await lease.complete({ response: await storedProblem('response-not-recorded', 'Response not recorded', detail), outcome: 'failed-final' })
 */
export async function storedProblem(slug: string, title: string, detail: string): Promise<StoredResponse> {
  const response = problem({ status: 500, slug, title, detail });
  return {
    status: response.status,
    headers: storableHeaders(response.headers, ['content-type']),
    body: new Uint8Array(await response.arrayBuffer()),
  };
}

/**
 * A Web `Response` for a stored response (without the replay marker): what the first attempt answers when
 * the stored copy replaced the handler's own response.
 *
 * @example
 * return storedResponse(await responseTooLarge(error))
 */
export function storedResponse({ status, headers, body }: StoredResponse): Response {
  return new Response(bodyFor(status, body), { status, headers: new Headers(headers as Array<[string, string]>) });
}

/**
 * Runs a Web-standard handler behind the gate: the Web layer's engine room, shared with the Hono adapter.
 * The fingerprint reads a clone of the body, so the handler gets the request itself — its own class (a
 * `NextRequest` stays one), fields and unread body. The response is buffered and recorded before it is answered.
 *
 * @example
 * const response = await serveWeb(gate, request, request, handler)
 */
export async function serveWeb<Tx, Req>(
  gate: Gate<Tx, Req>,
  native: Req,
  request: Request,
  handler: IdempotentHandler<Tx>,
  readBody: (limit: number) => Promise<Uint8Array> = (limit) => readBytes(request.clone().body, limit),
): Promise<Response> {
  try {
    const admission = await gate.admit({
      native,
      method: request.method,
      url: request.url,
      header: (name) => request.headers.get(name),
      body: readBody,
    });
    if (admission.kind === 'answer') return admission.response;
    if (admission.kind === 'pass') return await handler(request, admission.context);

    let response: Response;
    try {
      response = await handler(request, admission.context);
    } catch (error) {
      // The work threw: nothing was promised to the client, so the next attempt may run it again.
      await admission.fail();
      // A handler that honoured `signal` threw because the lease was lost: answer that (409), not a 500.
      const { signal } = admission.context;
      throw signal.aborted && isIdempotencyError(signal.reason) ? signal.reason : error;
    }
    let bytes: Uint8Array;
    try {
      bytes = await readBytes(response.body, gate.maxResponseBytes);
    } catch (error) {
      if (!(error instanceof BodyTooLargeError)) {
        await admission.fail();
        throw error;
      }
      const stored = await responseTooLarge(error);
      return (await admission.complete(stored, 'failed-final')) ?? storedResponse(stored);
    }
    const { status } = response;
    const stored: StoredResponse = {
      status,
      headers: storableHeaders(response.headers, gate.replayHeaders),
      body: bytes,
    };
    // The first attempt's own answer keeps every header (e.g. Set-Cookie); only the stored copy is filtered.
    return (
      (await admission.complete(stored)) ?? new Response(bodyFor(status, bytes), { status, headers: response.headers })
    );
  } catch (error) {
    return gate.answerFor(error, native);
  }
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
