/**
 * @module Holding a Node response until Idem has decided what it may say: what the Nest adapter wraps around
 * `res` (Express) or `reply.raw` (Fastify), below every interceptor, pipe, exception filter and serializer.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { BodyTooLargeError, joinBytes } from '../../http/replay.js';
import {
  checkChunk,
  foldHeaders,
  headerPairs,
  NO_BYTES,
  nodeError,
  NULL_BODY_STATUSES,
  responseParts,
  restoreHeaders,
  toBuffer,
} from '../shared.js';

/** What the application asked Node to send, as it would have reached the wire. */
export type HeldResponse =
  | {
      readonly kind: 'response';
      readonly status: number;
      readonly headers: Array<[string, string]>;
      readonly body: Uint8Array;
    }
  | { readonly kind: 'too-large'; readonly error: BodyTooLargeError };

/**
 * Decides, once the application has ended the response, what is really sent: `undefined` sends what it wrote,
 * a `Response` is sent in its place. Never rejects.
 */
export type Settle = (held: HeldResponse) => Promise<Response | undefined>;

/** The interceptor's view of a held response. */
export interface Holding {
  /** True once the application has ended the response (what is recorded is fixed then). */
  readonly ended: boolean;
  /**
   * The response will never be ended (its body's source was destroyed, its client gone): `abandoned` is called
   * once, and nothing is held any more. Does nothing once the response has ended.
   */
  abandon(): void;
}

/**
 * Wraps `writeHead`/`write`/`end`/`flushHeaders` of a Node response so nothing reaches the socket until `settle`
 * has answered: the status, headers and body the platform (Express's `res.json`, Fastify's serializer, a
 * `StreamableFile`, an exception filter, a handler writing to `@Res()`) produced are kept, bounded by `limit`,
 * then either sent as they are or replaced. Chunks are checked as Node checks them, so `res.end(12345)` throws
 * where the handler called it. `headersSent` stays false meanwhile, so a compression middleware below still
 * compresses what is let go.
 *
 * What is recorded and what is sent are one snapshot, taken at the first `end()`: status, headers and body.
 * Whatever touches the response after it (an exception filter writing again after a `@Res()` handler answered)
 * is ignored, as on a response already sent. A response destroyed before its `end()` (Fastify destroys it when
 * a streamed body fails) is abandoned: `abandoned` is called and nothing is recorded.
 *
 * @example
 * hold(res, gate.maxResponseBytes, async (held) => claim.complete(storedFrom(held)), () => void claim.fail())
 */
export function hold(res: ServerResponse, limit: number, settle: Settle, abandoned: () => void = () => {}): Holding {
  // Whoever wrapped these methods before us (a compression middleware), every call below is theirs, called on
  // this response with `.call`/`.apply`.
  /* eslint-disable @typescript-eslint/unbound-method */
  const writeHead = res.writeHead as (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  const write = res.write as (this: ServerResponse, ...args: unknown[]) => boolean;
  const end = res.end as (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  const flushHeaders = res.flushHeaders;
  const destroy = res.destroy;
  /* eslint-enable @typescript-eslint/unbound-method */
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge: BodyTooLargeError | undefined;
  let held = true;
  let ended = false;
  // The answer as it stood at the first end(): status, reason and headers.
  let status = 0;
  let message = '';
  let sent: OutgoingHttpHeaders = {};

  const keep = (chunk: unknown, encoding: unknown): void => {
    if (tooLarge) return;
    const bytes = toBuffer(chunk, encoding);
    size += bytes.byteLength;
    if (size > limit) {
      tooLarge = new BodyTooLargeError(limit);
      chunks.length = 0;
    } else {
      chunks.push(bytes);
    }
  };

  res.writeHead = function (statusCode: number, ...rest: unknown[]): ServerResponse {
    if (!held) return writeHead.call(res, statusCode, ...rest);
    if (ended) return res;
    const reason = typeof rest[0] === 'string' ? rest[0] : undefined;
    const headers = reason === undefined ? rest[0] : rest[1];
    // Headers passed here take precedence over setHeader ones (as in Node); folding them in keeps them visible.
    if (headers) foldHeaders(res, headers);
    res.statusCode = statusCode;
    if (reason !== undefined) res.statusMessage = reason;
    return res;
  };

  res.flushHeaders = function (): void {
    if (!held) flushHeaders.call(res);
  };

  res.write = function (...args: unknown[]): boolean {
    if (!held) return write.apply(res, args);
    const [chunk, encoding, callback] = args;
    if (chunk === null) throw nodeError('ERR_STREAM_NULL_VALUES', 'May not write null values to stream');
    checkChunk(chunk);
    if (ended) return false;
    keep(chunk, typeof encoding === 'function' ? undefined : encoding);
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') queueMicrotask(() => (done as () => void)());
    return true;
  } as ServerResponse['write'];

  res.end = function (...args: unknown[]): ServerResponse {
    if (!held) return end.apply(res, args);
    const chunk = typeof args[0] === 'function' ? undefined : args[0];
    if (chunk !== undefined && chunk !== null) checkChunk(chunk);
    if (ended) return res;
    ended = true;
    status = res.statusCode;
    message = res.statusMessage;
    sent = res.getHeaders();
    if (chunk !== undefined && chunk !== null) keep(chunk, typeof args[1] === 'function' ? undefined : args[1]);
    const callback = args.find((arg) => typeof arg === 'function') as (() => void) | undefined;
    void release(callback);
    return res;
  } as ServerResponse['end'];

  res.destroy = function (error?: Error): ServerResponse {
    abandon();
    return destroy.call(res, error);
  };

  function abandon(): void {
    if (!held || ended) return;
    held = false;
    abandoned();
  }

  async function release(callback: (() => void) | undefined): Promise<void> {
    const head = res.req?.method === 'HEAD';
    let body: Uint8Array = NO_BYTES;
    let replacement: Response | undefined;
    if (tooLarge) {
      replacement = await settle({ kind: 'too-large', error: tooLarge });
    } else {
      const empty = NULL_BODY_STATUSES.has(status) || head;
      body = empty ? NO_BYTES : joinBytes(chunks, size);
      replacement = await settle({ kind: 'response', status, headers: headerPairs(sent), body });
    }
    held = false;
    if (replacement) {
      const parts = await responseParts(replacement);
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      res.statusCode = parts.status;
      res.statusMessage = '';
      for (const [name, value] of parts.headers) res.setHeader(name, value);
      body = parts.body;
    } else {
      // What was recorded is what is sent, whatever touched the response since its end().
      res.statusCode = status;
      res.statusMessage = message;
      restoreHeaders(res, sent, head ? undefined : body.byteLength);
    }
    end.apply(res, callback ? [body, callback] : [body]);
  }

  return {
    get ended() {
      return ended;
    },
    abandon,
  };
}
