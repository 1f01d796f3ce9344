/**
 * @module What is stored of a response and how it is played back: status, allow-listed headers, exact bytes.
 */
import type { StoredResponse } from '../core/record.js';

/**
 * Headers kept for replay by default. Never `set-cookie` (a credential), `date` (a replay is a new message),
 * hop-by-hop headers, or `content-length` (recomputed from the stored bytes).
 */
export const DEFAULT_REPLAY_HEADERS: readonly string[] = [
  'content-type',
  'content-encoding',
  'content-language',
  'content-disposition',
  'content-location',
  'location',
  'link',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
  'vary',
];

/**
 * Representation headers: they describe the stored bytes themselves (a gzip body without its
 * `Content-Encoding` is garbage), so they are stored with them whatever the allow-list says.
 */
export const REPRESENTATION_HEADERS: ReadonlySet<string> = new Set([
  'content-type',
  'content-encoding',
  'content-language',
  'content-range',
  'content-digest',
  'repr-digest',
]);

/** Never stored, whatever the allow-list says. */
export const NEVER_REPLAYED: ReadonlySet<string> = new Set([
  'set-cookie',
  'date',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'authorization',
  'idempotent-replayed',
]);

/** The replay marker. */
export const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * Keeps the allow-listed headers and the representation headers, lower-cased, in their original order.
 *
 * @example
 * storableHeaders(response.headers, DEFAULT_REPLAY_HEADERS)
 */
export function storableHeaders(
  headers: Iterable<readonly [string, string]>,
  allow: readonly string[],
): Array<[string, string]> {
  const allowed = allowedSet(allow);
  const kept: Array<[string, string]> = [];
  for (const [name, value] of headers) {
    const lower = name.toLowerCase();
    if ((allowed.has(lower) || REPRESENTATION_HEADERS.has(lower)) && !NEVER_REPLAYED.has(lower))
      kept.push([lower, value]);
  }
  return kept;
}

/**
 * {@link storableHeaders} over a Node header map (`res.getHeaders()`: lower-case names, a list for a repeated
 * header), without making a pair for every header first: the same pairs, in the same order.
 *
 * @example
 * storableNodeHeaders(res.getHeaders(), DEFAULT_REPLAY_HEADERS)
 */
export function storableNodeHeaders(
  headers: Readonly<Record<string, string | number | readonly string[] | undefined>>,
  allow: readonly string[],
): Array<[string, string]> {
  const allowed = allowedSet(allow);
  const kept: Array<[string, string]> = [];
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (!(allowed.has(lower) || REPRESENTATION_HEADERS.has(lower)) || NEVER_REPLAYED.has(lower)) continue;
    if (typeof value === 'string') kept.push([lower, value]);
    else if (Array.isArray(value)) for (const item of value as readonly unknown[]) kept.push([lower, String(item)]);
    else kept.push([lower, String(value)]);
  }
  return kept;
}

/** The allow-lists seen so far, lower-cased: an adapter passes the same list on every response. */
const allowedSets = new WeakMap<readonly string[], ReadonlySet<string>>();
function allowedSet(allow: readonly string[]): ReadonlySet<string> {
  let set = allowedSets.get(allow);
  if (!set) allowedSets.set(allow, (set = new Set(allow.map((h) => h.toLowerCase()))));
  return set;
}

const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);

/**
 * A Web `Response` carrying a stored response: same status, the stored headers, the exact body bytes, plus
 * `Idempotent-Replayed: true`.
 *
 * @example
 * return replayResponse(record.response)
 */
export function replayResponse(stored: StoredResponse): Response {
  return new Response(bodyFor(stored.status, stored.body), { status: stored.status, headers: replayHeaders(stored) });
}

/**
 * The parts {@link replayResponse} would carry — status, its headers as the `Headers` iterator yields them, and
 * the body bytes (empty where the status forbids one) — without building the `Response` and reading its stream
 * back, which adapters writing to a Node response would otherwise pay on every replay.
 *
 * @example
 * const { status, headers, body } = replayParts(record.response)
 */
export function replayParts(stored: StoredResponse): {
  status: number;
  headers: Array<[string, string]>;
  body: Uint8Array;
} {
  const body = bodyFor(stored.status, stored.body) === null ? new Uint8Array(0) : stored.body;
  return { status: stored.status, headers: replayPairs(stored.headers) ?? [...replayHeaders(stored)], body };
}

/** An HTTP token (a header name a `Headers` object accepts). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/**
 * A header value a `Headers` object keeps as it is: bytes (no code unit above 0xFF), no NUL, CR or LF, and no
 * whitespace at either end to strip.
 */
const PLAIN_VALUE = /^(?:[^\0\r\n\t \u0100-\uffff](?:[^\0\r\n\u0100-\uffff]*[^\0\r\n\t \u0100-\uffff])?)?$/;

/**
 * What `[...replayHeaders(stored)]` yields — lower-case names in sorted order, the values of a repeated name
 * joined with `, `, the replay marker last set — built without a `Headers` object, for the usual stored headers
 * (lower-case tokens, values with nothing to strip, no `set-cookie`). Undefined for anything else, which takes the
 * `Headers` path (and its errors) as before.
 */
function replayPairs(stored: ReadonlyArray<readonly [string, string]>): Array<[string, string]> | undefined {
  const pairs: Array<[string, string]> = [];
  for (let i = 0; i < stored.length; i++) {
    const [name, value] = stored[i] as readonly [string, string];
    if (!TOKEN.test(name) || name !== name.toLowerCase() || name === 'set-cookie' || !PLAIN_VALUE.test(value))
      return undefined;
    if (name === REPLAYED_HEADER) continue; // replaced by the marker below, as `set` does
    let joined = false;
    for (const pair of pairs) {
      if (pair[0] !== name) continue;
      pair[1] = `${pair[1]}, ${value}`;
      joined = true;
      break;
    }
    if (!joined) pairs.push([name, value]);
  }
  pairs.push([REPLAYED_HEADER, 'true']);
  // Sorted by name in place, by insertion: a handful of pairs, and `Array.prototype.sort` allocates a work array
  // (≈0.9 KB a replay on Fastify, heap-sampled). The names are distinct, so the order is the same.
  for (let i = 1; i < pairs.length; i++) {
    const pair = pairs[i] as [string, string];
    let j = i - 1;
    for (; j >= 0 && (pairs[j] as [string, string])[0] > pair[0]; j--) pairs[j + 1] = pairs[j] as [string, string];
    pairs[j + 1] = pair;
  }
  return pairs;
}

function replayHeaders(stored: StoredResponse): Headers {
  const headers = new Headers();
  for (const [name, value] of stored.headers) headers.append(name, value);
  headers.set(REPLAYED_HEADER, 'true');
  return headers;
}

/** A `Response` body for these bytes, or null where the status forbids one. */
export function bodyFor(status: number, body: Uint8Array): BodyInit | null {
  // Stored bodies are always backed by a plain ArrayBuffer (never a SharedArrayBuffer).
  return NULL_BODY_STATUSES.has(status) || body.byteLength === 0 ? null : (body as Uint8Array<ArrayBuffer>);
}

/** Thrown by {@link readBytes} when a body is over its limit. */
export class BodyTooLargeError extends Error {
  override readonly name = 'BodyTooLargeError';
  readonly limit: number;
  constructor(limit: number) {
    super(`The body is larger than ${limit} bytes.`);
    this.limit = limit;
  }
}

/**
 * Reads a body stream to bytes, stopping (and cancelling the stream) as soon as it exceeds `limit`, or as soon as
 * `until` rejects (with its reason).
 *
 * @example
 * const body = await readBytes(request.body, 1_048_576)
 */
export async function readBytes(
  stream: ReadableStream<Uint8Array> | null,
  limit: number,
  until?: Promise<never>,
): Promise<Uint8Array> {
  if (!stream) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    let read: ReadableStreamReadResult<Uint8Array>;
    try {
      read = await (until ? Promise.race([reader.read(), until]) : reader.read());
    } catch (error) {
      if (until) reader.cancel().catch(() => undefined);
      throw error;
    }
    const { done, value } = read;
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      // Not awaited: on one branch of a tee (a cloned request) cancel settles only once the other branch is
      // cancelled too, which the handler's request never is.
      reader.cancel().catch(() => undefined);
      throw new BodyTooLargeError(limit);
    }
    chunks.push(value);
  }
  return joinBytes(chunks, size);
}

/**
 * Chunks joined into one plain `Uint8Array` over an `ArrayBuffer` of its own (what stores expect), in one copy.
 *
 * @example
 * const body = joinBytes(chunks, size)
 */
export function joinBytes(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}
