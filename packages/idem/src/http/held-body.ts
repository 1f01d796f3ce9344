/**
 * @module Bodies the runtime already holds: a Web `Request`'s or `Response`'s bytes read without a stream tee, where
 * the runtime lets them be seen (Node 20 and 22's fetch, undici 6: each message keeps its body as `{ stream,
 * source, length }` under one symbol, `source` being the bytes or text it was made from). Anywhere else (Node 24,
 * whose undici 7 keeps it in private fields; Bun, Deno, workerd; a framework's own request object) the functions
 * here find no state and the caller takes the portable path (test/runtimes runs both).
 */
import { BodyTooLargeError, readBytes } from './replay.js';

/** A message's body as undici keeps it. */
interface HeldBody {
  stream: ReadableStream<Uint8Array>;
  source: unknown;
  length: number | null;
}

/** The symbol undici keeps a message's state under; null where the runtime is not seen to use one. */
let stateKey: symbol | null | undefined;

/**
 * Finds the state symbol on a probe request, and accepts it only if it is undici's, seen as expected: named
 * `state`, shared by `Request` and `Response`, holding each body as a plain object whose `stream` is the `body`
 * getter's own and whose `source` is the text it was made from. A runtime that keeps bodies otherwise (under other
 * symbols, or as objects with methods of their own, which a plain replacement would break) takes the portable path.
 */
function probe(): symbol | null {
  try {
    const request = new Request('http://idem.invalid/', { method: 'POST', body: 'x' });
    const response = new Response('y');
    for (const symbol of Object.getOwnPropertySymbols(request)) {
      if (symbol.description !== 'state') continue;
      const body = (request as unknown as Record<symbol, { body?: HeldBody } | undefined>)[symbol]?.body;
      const answer = (response as unknown as Record<symbol, { body?: HeldBody } | undefined>)[symbol]?.body;
      if (
        body !== undefined &&
        Object.getPrototypeOf(body) === Object.prototype &&
        body.stream === request.body &&
        body.source === 'x' &&
        body.length === 1 &&
        answer?.stream === response.body &&
        answer.source === 'y'
      )
        return symbol;
    }
  } catch {
    // No usable Request or Response here: the portable path.
  }
  return null;
}

/** The message's state, if the runtime keeps one we can read and its body is unread (undefined otherwise). */
function stateOf(message: Request | Response): { body: HeldBody | null } | undefined {
  const key = stateKey === undefined ? (stateKey = probe()) : stateKey;
  if (key === null) return undefined;
  const state = (message as unknown as Record<symbol, unknown>)[key];
  if (typeof state !== 'object' || state === null || !('body' in state)) return undefined;
  const held = state as { body: HeldBody | null };
  if (held.body !== null && (held.body.stream !== message.body || message.bodyUsed || message.body?.locked))
    return undefined;
  return held;
}

const encoder = new TextEncoder();
const NO_BYTES = new Uint8Array(0);

/** A held body's bytes, a copy of their own (a read of the stream transfers, and so empties, `source`). */
function sourceBytes(body: HeldBody | null, limit: number): Uint8Array | undefined {
  if (body === null) return NO_BYTES;
  const { source } = body;
  if (typeof source === 'string') {
    if ((body.length ?? 0) > limit) throw new BodyTooLargeError(limit);
    const bytes = encoder.encode(source);
    if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
    return bytes;
  }
  if (source instanceof Uint8Array) {
    // Handed over (detached, length 0) once the stream was pulled, by a read `clone()` say: the bytes are in the
    // stream now, so they are not held (review 50: slicing it threw, a 500 after the work had run).
    if (source.byteLength !== body.length) return undefined;
    if (source.byteLength > limit) throw new BodyTooLargeError(limit);
    return source.byteLength === 0 ? NO_BYTES : source.slice();
  }
  return undefined;
}

/**
 * An unread message's body bytes when the runtime already holds them as bytes or text (`new Response(text)`,
 * `Response.json(…)`, a `Request` made with a string body), without touching its stream: the message stays unread,
 * as it was. Undefined when they are not held that way (a stream body, another runtime). Throws
 * {@link BodyTooLargeError} past `limit`.
 *
 * @example
 * const bytes = heldBytes(response, 1_048_576) ?? (await readBytes(response.body, 1_048_576))
 */
export function heldBytes(message: Request | Response, limit: number): Uint8Array | undefined {
  const state = stateOf(message);
  return state ? sourceBytes(state.body, limit) : undefined;
}

/**
 * The request's body bytes for the fingerprint, leaving the request itself — the same object — with an unread body
 * of the same bytes. Held bytes are copied out of it (nothing is read); a stream body is read to its end and then
 * replaced by a body over those bytes, as if the request had been made with them. Where the runtime does not let a
 * body be seen or replaced, the bytes are read from a `clone()` (a tee) and the request's own stream is left unread.
 * Rejects with {@link BodyTooLargeError} past `limit` (the request's body is then not restored: nothing runs it).
 *
 * @example
 * const body = await requestBytes(request, 1_048_576) // `request` still has its body, unread
 */
export async function requestBytes(request: Request, limit: number): Promise<Uint8Array> {
  const state = stateOf(request);
  if (!state) return readBytes(request.clone().body, limit);
  const held = sourceBytes(state.body, limit);
  if (held) return held;
  const bytes = await readBytes((state.body as HeldBody).stream, limit);
  state.body = bytesBody(bytes);
  return bytes;
}

/**
 * A body over these bytes, as undici makes one for a `Uint8Array` (a byte stream that hands `source` over when
 * pulled): its own copy, so the caller's bytes stay whole when the handler reads it.
 */
function bytesBody(bytes: Uint8Array): HeldBody {
  const source = bytes.slice();
  const stream = new ReadableStream({
    type: 'bytes',
    pull(controller: ReadableByteStreamController) {
      if (source.byteLength > 0) controller.enqueue(source);
      controller.close();
      controller.byobRequest?.respond(0);
    },
  });
  return { stream, source, length: source.byteLength };
}
