/**
 * @module Holding a Node response until Idem has decided what it may say: what the Nest adapter wraps around
 * `res` (Express) or `reply.raw` (Fastify), below every interceptor, pipe, exception filter and serializer.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { BodyTooLargeError, joinBytes } from '../../http/replay.js';
import {
  checkChunk,
  checkHead,
  headerPairs,
  holdHead,
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

/**
 * Why a held response will never be ended: its body failed (a stream destroyed before its end, the response
 * destroyed), or its client left mid-stream and it did not end within the grace it was given.
 */
export type Abandoned = 'failed' | 'left';

/** The interceptor's view of a held response. */
export interface Holding {
  /** True once the application has ended the response (what is recorded is fixed then). */
  readonly ended: boolean;
  /**
   * The response will never be ended (its body's source was destroyed, its client gone): `abandoned('failed')` is
   * called once, and nothing is held any more. Does nothing once the response has ended.
   */
  abandon(): void;
}

/**
 * Wraps `writeHead`/`write`/`end`/`flushHeaders` of a Node response so nothing reaches the socket until `settle`
 * has answered: the status, headers and body the platform (Express's `res.json`, Fastify's serializer, a
 * `StreamableFile`, an exception filter, a handler writing to `@Res()`) produced are kept, bounded by `limit`,
 * then either sent as they are or replaced. Chunks, status codes (100–599: what a record holds) and reason phrases
 * are checked as Node checks them, so `res.end(12345)` or a reason phrase with a CR throws where it was called,
 * never later as an unhandled rejection. The reason phrase sent is Node's own for the status, as on a replay (a
 * record keeps none). `headersSent` stays false meanwhile, so a compression middleware below still compresses what
 * is let go.
 *
 * What is recorded and what is sent are one snapshot, taken at the first `end()`: status, headers and body.
 * Whatever touches the response after it (an exception filter writing again after a `@Res()` handler answered)
 * is ignored, as on a response already sent. A response destroyed before its `end()` (Fastify destroys it when
 * a streamed body fails) is abandoned: `abandoned('failed')` is called and nothing is recorded. A client that leaves
 * while the response streams (it wrote part of its body, or flushed its head) gives it `graceMs` to end: then it is
 * abandoned with `abandoned('left')`. One that leaves before a byte was written waits for the response's end.
 *
 * @example
 * hold(res, gate.maxResponseBytes, async (held) => claim.complete(storedFrom(held)), () => void claim.fail())
 */
export function hold(
  res: ServerResponse,
  limit: number,
  settle: Settle,
  abandoned: (why: Abandoned) => void = () => {},
  graceMs = Infinity,
): Holding {
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
  let streamed = false;
  // The answer as it stood at the first end(): status and headers.
  let status = 0;
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
    if (!ended) holdHead(res, statusCode, rest);
    return res;
  };

  res.flushHeaders = function (): void {
    if (!held) return flushHeaders.call(res);
    checkHead(res);
    if (!ended) stream();
  };

  res.write = function (...args: unknown[]): boolean {
    if (!held) return write.apply(res, args);
    const [chunk, encoding, callback] = args;
    if (chunk === null) throw nodeError('ERR_STREAM_NULL_VALUES', 'May not write null values to stream');
    checkChunk(chunk);
    if (ended) return false;
    // Node writes the head with the first chunk, and throws there for a bad status or reason.
    checkHead(res);
    stream();
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
    checkHead(res);
    ended = true;
    status = res.statusCode;
    sent = res.getHeaders();
    if (chunk !== undefined && chunk !== null) keep(chunk, typeof args[1] === 'function' ? undefined : args[1]);
    const callback = args.find((arg) => typeof arg === 'function') as (() => void) | undefined;
    release(callback).catch((error: unknown) => {
      // Unreachable by what the application sets (checked above); still, no answer of ours may end the process.
      held = false;
      abandoned('failed');
      destroy.call(res, error instanceof Error ? error : undefined);
    });
    return res;
  } as ServerResponse['end'];

  res.destroy = function (error?: Error): ServerResponse {
    abandon();
    return destroy.call(res, error);
  };

  // A client gone mid-stream: a `pipe()` it unpiped, or events written until it left, may never end. Watched for
  // from the first chunk on (a response never streamed costs no listener); a client already gone counts at once.
  const left = (): void => {
    if (held && !ended && graceMs !== Infinity) setTimeout(() => give('left'), graceMs).unref();
  };
  function stream(): void {
    if (streamed) return;
    streamed = true;
    if (res.destroyed) left();
    else res.once('close', left);
  }

  function abandon(): void {
    give('failed');
  }

  function give(why: Abandoned): void {
    if (!held || ended) return;
    held = false;
    abandoned(why);
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
    const parts = replacement && (await responseParts(replacement));
    held = false;
    res.statusMessage = ''; // Node's own phrase for the status, as a replay gets: a record keeps no reason phrase
    if (parts) {
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      res.statusCode = parts.status;
      for (const [name, value] of parts.headers) res.setHeader(name, value);
      body = parts.body;
    } else {
      // What was recorded is what is sent, whatever touched the response since its end().
      res.statusCode = status;
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
