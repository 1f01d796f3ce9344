/**
 * @module The Web layer's engine room: a Web-standard handler run behind the gate, its response buffered and
 * recorded before it is answered. Shared by `idempotency()` (`idem/http`) and the Hono adapter.
 */
import type { Lease } from '../core/engine.js';
import { IdempotencyError, isIdempotencyError } from '../core/errors.js';
import type { StoredResponse } from '../core/record.js';
import type { Gate } from './middleware.js';
import type { IdempotentHandler } from './options.js';
import { heldBytes, requestBytes } from './held-body.js';
import { BodyTooLargeError, bodyFor, readBytes, storableHeaders } from './replay.js';
import { responseTooLarge, storedResponse } from './stored.js';

/** How {@link serveWeb} runs a handler, beyond what the gate decides. */
export interface ServeOptions {
  /**
   * True when the handler's response was given while its work may still be running: a timeout middleware answered
   * for it (Hono's `timeout()` mounted inside the adapter). The key is then neither recorded nor freed but
   * abandoned: held until its lease lapses (a retry gets 409 meanwhile), so no retry starts the work beside it.
   */
  readonly answeredEarly?: (response: Response) => boolean;
}

/** Why a held request stopped waiting: the engine gave the key up, or the client left with the body unfinished. */
const GIVEN_UP = Symbol('the engine gave the key up');
const CLIENT_GONE = Symbol('the client left before the body ended');

/**
 * Runs a Web-standard handler behind the gate. The handler gets the request itself — its own class (a `NextRequest`
 * stays one), fields and an unread body of the same bytes: the fingerprint takes them without a tee where the runtime
 * allows it (see {@link requestBytes}), from a clone where it does not. The response is buffered and recorded
 * before it is answered; where its bytes are held already, it is answered itself, unread.
 *
 * While it waits, the key stays held: for the handler's promise (a client that leaves does not free it), then for
 * the response body. Two waits end early. Past `maxHoldMs` the engine settles the key failed, retryable and aborts
 * the signal: the answer is then the lease's problem (409), whatever the handler still does. And once the client
 * has gone, a body that has not ended within one lease (`leaseMs`) is cancelled and the key abandoned: no record,
 * no renewals, so it lapses after one lease and the next attempt takes over with the same `id`.
 *
 * @example
 * const response = await serveWeb(gate, request, request, handler)
 */
export async function serveWeb<Tx, Req>(
  gate: Gate<Tx, Req>,
  native: Req,
  request: Request,
  handler: IdempotentHandler<Tx>,
  readBody: (limit: number) => Promise<Uint8Array> = (limit) => requestBytes(request, limit),
  { answeredEarly }: ServeOptions = {},
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

    const { lease, context } = admission;
    const held = lease ? hold(lease, gate.engine.leaseMs) : undefined;
    let response: Response;
    try {
      const answered = Promise.resolve(handler(request, context));
      if (held) answered.catch(() => undefined); // it may be left behind, still running, past maxHoldMs
      response = await (held ? Promise.race([answered, held.stopped]) : answered);
    } catch (error) {
      if (error === GIVEN_UP) return gate.answerFor(context.signal.reason, native);
      // The work threw: nothing was promised to the client, so the next attempt may run it again.
      await admission.fail();
      // A handler that honoured `signal` threw because the lease was lost: answer that (409), not a 500.
      const { signal } = context;
      throw signal.aborted && isIdempotencyError(signal.reason) ? signal.reason : error;
    }
    if (lease && answeredEarly?.(response)) {
      await lease.abandon();
      return response;
    }
    let bytes: Uint8Array;
    // The response itself is answered when its bytes are held (`new Response(text)`, `Response.json()`): read
    // without its stream, it is still unread. Not with a reason phrase of its own: a replay has none.
    let answerItself = false;
    try {
      const own =
        response.statusText === '' && response.type === 'default'
          ? heldBytes(response, gate.maxResponseBytes)
          : undefined;
      answerItself = own !== undefined;
      bytes = own ?? (await readBytes(response.body, gate.maxResponseBytes, held?.untilClientGone(request.signal)));
    } catch (error) {
      if (error === GIVEN_UP) return gate.answerFor(context.signal.reason, native);
      if (error === CLIENT_GONE && lease) {
        await lease.abandon();
        return gate.answerFor(new IdempotencyError('IN_FLIGHT', CLIENT_GONE.description ?? ''), native);
      }
      if (!(error instanceof BodyTooLargeError)) {
        await admission.fail(true);
        throw error;
      }
      const stored = await responseTooLarge(error);
      return (await admission.complete(stored, 'failed-final')) ?? storedResponse(stored);
    } finally {
      held?.done();
    }
    const { status } = response;
    const stored: StoredResponse = {
      status,
      headers: storableHeaders(response.headers, gate.replayHeaders),
      body: bytes,
    };
    // The first attempt's own answer keeps every header (e.g. Set-Cookie); only the stored copy is filtered.
    return (
      (await admission.complete(stored)) ??
      (answerItself ? response : new Response(bodyFor(status, bytes), { status, headers: response.headers }))
    );
  } catch (error) {
    return gate.answerFor(error, native);
  }
}

/**
 * A held key's early ends. `stopped` rejects with {@link GIVEN_UP} once the engine gives the key up (`onGivenUp`:
 * past `maxHoldMs`; a lease past its local deadline alone is still renewed, and its answer may still be recorded).
 * `untilClientGone` adds {@link CLIENT_GONE}, one lease after the client left; `done` clears that timer.
 */
function hold<Tx>(lease: Lease<Tx>, leaseMs: number) {
  let stop!: (reason: symbol) => void;
  const stopped = new Promise<never>((_resolve, reject) => (stop = reject));
  stopped.catch(() => undefined);
  lease.onGivenUp(() => stop(GIVEN_UP));
  let timer: ReturnType<typeof setTimeout> | undefined;
  let client: AbortSignal | undefined;
  const left = (): void => {
    timer = setTimeout(() => stop(CLIENT_GONE), leaseMs);
  };
  return {
    stopped,
    untilClientGone(signal: AbortSignal): Promise<never> {
      client = signal;
      if (signal.aborted) left();
      else signal.addEventListener('abort', left, { once: true });
      return stopped;
    },
    done(): void {
      client?.removeEventListener('abort', left);
      clearTimeout(timer);
    },
  };
}
