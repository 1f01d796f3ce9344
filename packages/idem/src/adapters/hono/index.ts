/**
 * @module `idem/hono` — idempotency keys as Hono 4 middleware, on the Web-standard layer.
 */
import type { Context, MiddlewareHandler } from 'hono';
import type { Engine } from '../../core/engine.js';
import { createGate, serveWeb, type HandlerContext, type IdempotencyOptions } from '../../http/middleware.js';
import { BodyTooLargeError, readBytes } from '../../http/replay.js';

/** The Web layer's options; `scope`, `required` and `onError` receive the Hono context. */
export type HonoIdempotencyOptions<Tx = never> = IdempotencyOptions<Tx, Context>;

/** What the middleware sets on the context: `c.get('idempotency')`. */
export interface IdempotencyVariables {
  idempotency: HandlerContext<unknown>;
}

/**
 * Hono 4 middleware. Use it app-wide or per route (`app.post('/x', idempotency({...}), handler)`); `scope`
 * gets the context, so it can read what an auth middleware set. The fingerprint reads a clone of the body, so the
 * handler's `c.req` is untouched; its response is buffered, stored, then answered (streams included).
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
      { answeredEarly: (response) => timedOut(c, response) },
    );
    // Cleared first so Hono does not merge the handler's headers into an answer that replaced its response.
    c.res = undefined;
    c.res = response;
  };
  return Object.assign(middleware, { engine: gate.engine });
}

/**
 * The raw body, read from a clone so the handler's `c.req` still has it unread; if an earlier middleware read it
 * through Hono (which caches it), the cached bytes.
 */
async function bodyOf(c: Context, limit: number): Promise<Uint8Array> {
  if (!c.req.raw.bodyUsed) return readBytes(c.req.raw.clone().body, limit);
  const bytes = new Uint8Array(await c.req.arrayBuffer());
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

/**
 * A timeout answered for the handler, which may still be running: Hono's error handler wrote the answer to a
 * thrown 408 or 504 (`timeout()` from `hono/timeout` throws a 504 `HTTPException` while the handler's promise goes
 * on). Mounted inside the adapter, the middleware hides that promise from it.
 */
function timedOut(c: Context, response: Response): boolean {
  return c.error !== undefined && (response.status === 408 || response.status === 504);
}
