/**
 * @module What a harness implements to put an adapter under {@link describeAdapterConformance}: the reply styles
 * the suite's handler answers with, the options it serves with, and the server it gets back.
 */
import type { OutcomeKind } from '../core/engine.js';
import type { IdempotencyStore } from '../core/record.js';

/** What the suite's handler may declare, as an adapter's `declare()` takes it. */
export interface SuiteDeclaration<Tx> {
  readonly outcome?: OutcomeKind;
  readonly resultId?: string;
  readonly effects?: (tx: Tx) => unknown;
}

/** The adapter's idempotency context, as the suite's handler uses it. */
export interface SuiteContext<Tx> {
  readonly id: string;
  /** False for a keyless request, which runs unguarded. */
  readonly protected: boolean;
  readonly signal: AbortSignal;
  declare(declaration: SuiteDeclaration<Tx>): void;
}

/** What the harness hands the suite's handler for each request. */
export interface SuiteInput<Tx> {
  /** The request body, parsed as JSON by the framework's own parser. */
  readonly body: unknown;
  /** The request's query string with its `?`, or `''`. */
  readonly query: string;
  /** The adapter's context (`idempotencyContext(res)`, `request.idempotency`, `c.get('idempotency')`…). */
  readonly context: SuiteContext<Tx> | undefined;
}

/** How the handler answers; the harness answers in the framework's own idiom for each style. */
export type SuiteReply =
  /** `res.status().json()`, `reply.code().send(object)`, `c.json()`, `Response.json()`. */
  | {
      readonly style: 'json';
      readonly status: number;
      readonly headers?: Record<string, string>;
      readonly json: unknown;
    }
  /**
   * A streamed body, its head sent first: Express `writeHead` then one `write` per chunk then `end`; Fastify
   * `reply.send(Readable)`; Hono `c.body(ReadableStream)`; Web `new Response(ReadableStream)` (see {@link replyStream}).
   */
  | {
      readonly style: 'stream';
      readonly status: number;
      readonly headers?: Record<string, string>;
      readonly chunks: readonly string[];
    }
  /** No body, e.g. a 303 with a Location. */
  | { readonly style: 'empty'; readonly status: number; readonly headers?: Record<string, string> }
  /** The handler throws `new Error(message)`; the framework's own error handling answers. */
  | { readonly style: 'throw'; readonly message: string }
  /** Express only (`supports.rawEnd`): `res.end(value)` with a value Node refuses (an ArrayBuffer, a number). */
  | { readonly style: 'raw-end'; readonly value: unknown };

export type SuiteHandler<Tx> = (input: SuiteInput<Tx>) => Promise<SuiteReply>;

/** The layer's options the suite sets; the harness adds `scope` and passes the rest to the adapter as they are. */
export interface AdapterSuiteOptions<Tx> {
  readonly store: IdempotencyStore<Tx>;
  readonly leaseMs?: number;
  readonly required?: boolean;
  readonly maxBodyBytes?: number;
  readonly maxResponseBytes?: number;
  readonly onError?: (error: unknown) => void;
}

export interface ServeSetup<Tx> {
  readonly options: AdapterSuiteOptions<Tx>;
  /** Mount the framework's gzip middleware after the idempotency middleware. */
  readonly compress: boolean;
  readonly handler: SuiteHandler<Tx>;
}

/** A server listening on 127.0.0.1. `close()` ends its open connections too. */
export interface ServedApp {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

/** How one adapter is put under the suite. */
export interface AdapterHarness {
  /** Shown in the test names. */
  readonly name: string;
  readonly supports?: {
    /** The framework has a compression middleware the harness mounts when `compress` is set. */
    readonly compression?: boolean;
    /** The framework hands the raw Node response to the handler (`raw-end` replies). */
    readonly rawEnd?: boolean;
  };
  /**
   * Serves `handler` for `POST /v1/charges` on 127.0.0.1:0 behind the adapter, with `options` plus a `scope` read
   * from the `x-tenant` request header (default `acct_suite`), and gzip after the middleware when `compress` is set.
   */
  serve<Tx>(setup: ServeSetup<Tx>): Promise<ServedApp>;
}

export interface AdapterConformanceOptions<Tx, S extends IdempotencyStore<Tx>> {
  readonly harness: AdapterHarness;
  /** A new, empty store with a ledger beside it (its own file, table or schema). The suite closes it. */
  readonly createStore: () => Promise<S>;
  /** The work's own write, run by the store inside the completion's transaction: one ledger row for `ref`. */
  readonly effect: (tx: Tx, ref: string) => void;
  /** How many ledger rows `ref` has in `store`. */
  readonly countEffects: (ref: string, store: S) => Promise<number>;
}

/**
 * A Web `ReadableStream` that yields one chunk per read, for harnesses answering a `stream` reply.
 *
 * @example
 * return new Response(replyStream(reply.chunks), { status: reply.status, headers: reply.headers })
 */
export function replyStream(chunks: readonly string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let next = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      // One chunk per macrotask, so the body really arrives in pieces.
      await new Promise((resolve) => setImmediate(resolve));
      const chunk = chunks[next++];
      if (chunk === undefined) controller.close();
      else controller.enqueue(encoder.encode(chunk));
    },
  });
}
