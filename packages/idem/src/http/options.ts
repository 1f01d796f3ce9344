/**
 * @module The options of the Web layer and of every adapter, and what a handler sees of its request's idempotency.
 */
import type { EngineOptions, OutcomeKind, WorkContext } from '../core/engine.js';
import type { StoredResponse } from '../core/record.js';
import type { ReconcileContext } from '../core/takeover.js';
import type { FieldRule } from '../core/fields.js';

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
/**
 * The HTTP layer's `reconcile` answer: as the engine's, with the response also as a Web `Response` (its body read
 * and its headers filtered by `replayHeaders`, as a handler's response is stored).
 */
export type HttpReconcileAnswer =
  | {
      readonly state: 'succeeded' | 'failed';
      readonly response: Response | StoredResponse;
      readonly resultId?: string | null;
    }
  | { readonly state: 'not_done' };

export interface IdempotencyOptions<Tx, Req = Request> extends Omit<EngineOptions<Tx>, 'reconcile'> {
  /**
   * With `takeover: 'reconcile'`: asked, when a retry takes over a lapsed lease, what happened to the dead attempt's
   * `id` (ask the processor or the ledger). `succeeded` and `failed` are recorded with their response and replayed;
   * `not_done` runs the handler; a throw or `reconcileTimeoutMs` answers 503 and runs nothing.
   */
  readonly reconcile?: (context: ReconcileContext) => HttpReconcileAnswer | Promise<HttpReconcileAnswer>;
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
