/**
 * @module `idem/hono` — idempotency keys as Hono 4 middleware, on the Web-standard layer.
 */
import type { Context, MiddlewareHandler } from 'hono';
import {
  BodyTooLargeError,
  classifyStatus,
  createGate,
  requestBytes,
  serveWeb,
  type Engine,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/index.js';

/** The Web layer's options; `scope`, `required` and `onError` receive the Hono context. */
export type HonoIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, Context>;

/** What the middleware sets on the context: `c.get('idempotency')`. */
export interface IdempotencyVariables {
  idempotency: HandlerContext<unknown>;
}

/**
 * Hono 4 middleware. Use it app-wide or per route (`app.post('/x', idempotency({...}), handler)`); `scope`
 * gets the context, so it can read what an auth middleware set. The fingerprint takes the body's bytes and leaves
 * the handler's `c.req` with its body unread; its response is buffered, stored, then answered (streams included).
 *
 * @example
 * const app = new Hono<{ Variables: { account: string } & IdempotencyVariables }>()
 * app.use('/v1/*', authenticate)
 * app.post('/v1/charges', idempotency({ store, scope: (c) => c.get('account'), required: true }), async (c) => {
 *   const charge = await createCharge(await c.req.json(), { idempotencyKey: c.get('idempotency').id })
 *   c.header('Location', `/v1/charges/${charge.id}`)
 *   return c.json(charge, 201)
 * })
 */
export function idempotency<Tx = never>(
  options: HonoIdempotencyOptions<Tx>,
): MiddlewareHandler<{ Variables: IdempotencyVariables }> & { readonly engine: Engine<Tx> } {
  const gate = createGate<Tx, Context>(options);
  const middleware: MiddlewareHandler<{ Variables: IdempotencyVariables }> = async (c, next) => {
    const response = await serveWeb(
      gate,
      c,
      c.req.raw,
      async (_request, context) => {
        c.set('idempotency', context as HandlerContext<unknown>);
        await next();
        return c.res;
      },
      (limit) => bodyOf(c, limit),
      { answeredEarly: () => timedOut(c) },
    );
    // Cleared first so Hono does not merge the handler's headers into an answer that replaced its response.
    c.res = undefined;
    c.res = response;
  };
  return Object.assign(middleware, { engine: gate.engine });
}

/**
 * The raw body, taken so that the handler's `c.req` still has it unread (`requestBytes`: without a tee where the
 * runtime allows it, else from a clone); if an earlier middleware read it through Hono (which caches it), the
 * cached bytes.
 */
async function bodyOf(c: Context, limit: number): Promise<Uint8Array> {
  if (!c.req.raw.bodyUsed) return requestBytes(c.req.raw, limit);
  const bytes = new Uint8Array(await c.req.arrayBuffer());
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

/**
 * An answer given while the handler may still run. Hono's `compose` hides the handler's own promise from a
 * middleware: a timeout mounted inside the guard (`timeout()` from `hono/timeout`, whatever `HTTPException` it is
 * given) rejects its `next()` race and Hono's error handler answers, whatever status `onError` turns that into, while
 * the handler's promise goes on. What the guard can see is the error that was answered (`c.error`): an
 * `HTTPException` whose status is retryable (5xx, 408, 429…), which is what a timeout throws. Recording that answer
 * retryable would let a retry run beside the handler, so it is abandoned instead; a handler's own plain `Error`
 * (its promise has settled: it threw) and a final refusal (an `HTTPException(402)`, which no retry runs past) are
 * recorded as answered.
 */
function timedOut(c: Context): boolean {
  const error = c.error as { status?: unknown; getResponse?: unknown } | undefined;
  return (
    typeof error?.getResponse === 'function' &&
    typeof error.status === 'number' &&
    classifyStatus(error.status) === 'failed-retryable'
  );
}
