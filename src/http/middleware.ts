/**
 * @module The Web-standard idempotency layer: `(Request) => Promise<Response>` around your handler.
 */
import { createEngine, type Engine, type EngineOptions, type OutcomeKind, type WorkContext } from '../core/engine.js';
import { configError, IdempotencyError, isIdempotencyError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { parseKey } from '../core/key.js';
import type { StoredResponse } from '../core/record.js';
import { problem, problemFor } from './problem.js';
import { BodyTooLargeError, DEFAULT_REPLAY_HEADERS, readBytes, replayResponse, storableHeaders, bodyFor } from './replay.js';

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
}

export type IdempotentHandler<Tx> = (request: Request, context: HandlerContext<Tx>) => Response | Promise<Response>;

export interface IdempotencyOptions<Tx> extends EngineOptions<Tx> {
  /** The tenant a request belongs to (the authenticated account). Two scopes never share a key. Default: one global scope. */
  readonly scope?: (request: Request) => string | Promise<string>;
  /** Reject keyless requests with 400 `idempotency-key-missing`. A function decides per request. Default false. */
  readonly required?: boolean | ((request: Request) => boolean);
  /** Methods the layer protects; others pass straight through. Default `POST`, `PATCH`. */
  readonly methods?: readonly string[];
  /** Request headers that take part in the fingerprint. Default none. */
  readonly fingerprintHeaders?: readonly string[];
  /** Status for a reused key with another payload: 400 (Stripe) or 422 (IETF draft). Default 400. */
  readonly mismatchStatus?: 400 | 422;
  /** Response headers stored and replayed. Default {@link DEFAULT_REPLAY_HEADERS}. */
  readonly replayHeaders?: readonly string[];
  /** Largest request body accepted, in bytes. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** Largest response body stored, in bytes. A larger one is answered and recorded as a final 500. Default 1 MiB. */
  readonly maxResponseBytes?: number;
  /** Called with errors the handler threw (answered as a 500 problem). Default `console.error`. */
  readonly onError?: (error: unknown, request: Request) => void;
}

/** A handler wrapped by {@link idempotency}, and the engine it runs on. */
export interface IdempotentFetch {
  (request: Request): Promise<Response>;
  readonly engine: Engine<unknown>;
}

const MiB = 1_048_576;

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
export function idempotency<Tx = never>({
  scope = () => 'global',
  required = false,
  methods = ['POST', 'PATCH'],
  fingerprintHeaders = [],
  mismatchStatus = 400,
  replayHeaders = DEFAULT_REPLAY_HEADERS,
  maxBodyBytes = MiB,
  maxResponseBytes = MiB,
  onError = (error) => console.error('idem: handler failed', error),
  ...engineOptions
}: IdempotencyOptions<Tx>): (handler: IdempotentHandler<Tx>) => IdempotentFetch {
  if (typeof scope !== 'function') throw configError('scope', 'a function (request) => string', scope);
  if (typeof required !== 'boolean' && typeof required !== 'function') {
    throw configError('required', 'a boolean or a function', required);
  }
  if (mismatchStatus !== 400 && mismatchStatus !== 422) throw configError('mismatchStatus', '400 or 422', mismatchStatus);
  for (const [name, value] of [['maxBodyBytes', maxBodyBytes], ['maxResponseBytes', maxResponseBytes]] as const) {
    if (!Number.isInteger(value) || value <= 0) throw configError(name, 'a positive integer', value);
  }
  const engine = createEngine(engineOptions);
  const protectedMethods = new Set(methods.map((m) => m.toUpperCase()));
  const fingerprinted = fingerprintHeaders.map((h) => h.toLowerCase());
  const settings = Object.freeze({ mismatchStatus });

  return (handler) => {
    const fetch = async (request: Request): Promise<Response> => {
      try {
        return await handle(request);
      } catch (error) {
        if (isIdempotencyError(error)) return problemFor(error, settings);
        if (error instanceof BodyTooLargeError) {
          return problem({ status: 413, slug: 'request-too-large', title: 'Request body too large', detail: error.message });
        }
        onError(error, request);
        return problem({ status: 500, slug: 'internal-error', title: 'Internal server error' });
      }
    };

    const unguarded = (request: Request): Promise<Response> | Response =>
      handler(request, {
        scope: '',
        key: '',
        id: crypto.randomUUID(),
        reclaimed: false,
        signal: new AbortController().signal,
        protected: false,
        declare: () => {},
      });

    async function handle(request: Request): Promise<Response> {
      if (!protectedMethods.has(request.method.toUpperCase())) return unguarded(request);
      const raw = request.headers.get('idempotency-key');
      if (raw === null) {
        const mustHave = typeof required === 'function' ? required(request) : required;
        if (mustHave) throw new IdempotencyError('KEY_MISSING', `${request.method} requests to this route need an Idempotency-Key header.`);
        return unguarded(request);
      }
      const key = parseKey(raw);
      const body = await readBytes(request.body, maxBodyBytes);
      const url = new URL(request.url);
      const tenant = await scope(request);
      if (typeof tenant !== 'string' || tenant.length === 0) throw new TypeError('`scope(request)` must return a non-empty string.');
      const print = fingerprint({
        method: request.method,
        path: url.pathname,
        query: url.search,
        contentType: request.headers.get('content-type'),
        body,
        headers: fingerprinted.map((name) => [name, request.headers.get(name) ?? ''] as const),
      });

      // The first attempt's own answer keeps every header (e.g. Set-Cookie); only the stored copy is filtered.
      let firstHeaders: Headers | undefined;
      const result = await engine.run({ scope: tenant, key, fingerprint: print }, async (work) => {
        let declared: Declaration<Tx> = {};
        const replica = new Request(request.url, {
          method: request.method,
          headers: request.headers,
          body: bodyFor(200, body),
          signal: work.signal,
        });
        const response = await handler(replica, { ...work, protected: true, declare: (d) => (declared = { ...declared, ...d }) });
        firstHeaders = response.headers;
        let bytes: Uint8Array;
        try {
          bytes = await readBytes(response.body, maxResponseBytes);
        } catch (error) {
          if (!(error instanceof BodyTooLargeError)) throw error;
          firstHeaders = undefined;
          const tooLarge = await frozen(
            problem({ status: 500, slug: 'response-too-large', title: 'Response too large to store', detail: error.message }),
          );
          return { response: tooLarge, outcome: 'failed-final' as const };
        }
        const stored: StoredResponse = {
          status: response.status,
          headers: storableHeaders(response.headers, replayHeaders),
          body: bytes,
        };
        return { response: stored, ...declared };
      });
      if (result.replayed) return replayResponse(result.response);
      const { status, headers, body: bytes } = result.response;
      return new Response(bodyFor(status, bytes), { status, headers: firstHeaders ?? new Headers(headers as Array<[string, string]>) });
    }

    return Object.assign(fetch, { engine: engine });
  };
}

async function frozen(response: Response): Promise<StoredResponse> {
  return {
    status: response.status,
    headers: storableHeaders(response.headers, ['content-type']),
    body: new Uint8Array(await response.arrayBuffer()),
  };
}
