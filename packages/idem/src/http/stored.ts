/**
 * @module Stored responses the gate makes itself: what one weighs against a store's limit, the final problem that
 * replaces one too large to store, and a Web `Response` for a stored one.
 */
import { utf8Length } from '../core/fingerprint.js';
import type { StoredResponse } from '../core/record.js';
import { problem } from './problem.js';
import { bodyFor, storableHeaders, type BodyTooLargeError } from './replay.js';

/**
 * What a stored response weighs against a store's limit: its body bytes plus its headers as the stores encode
 * them (a JSON list of pairs, in UTF-8), framing and escapes included.
 */
export function responseSize({ body, headers }: StoredResponse): number {
  if (headers.length === 0) return body.byteLength;
  // `[["name","value"],…]` without building it: each pair is its two strings and 7 bytes of framing, plus the
  // brackets and commas. Exact when no character needs escaping or more than one UTF-8 byte; else the long way.
  let size = headers.length + 1;
  for (const [name, value] of headers) {
    if (!PLAIN_JSON.test(name) || !PLAIN_JSON.test(value)) return body.byteLength + utf8Length(JSON.stringify(headers));
    size += name.length + value.length + 7;
  }
  return body.byteLength + size;
}

/** Printable ASCII but `"` and `\`: JSON.stringify writes it as it is, one byte a character. */
const PLAIN_JSON = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * What is stored (and answered) instead of a response too large to store: a final 500 problem.
 *
 * @example
 * const stored = await responseTooLarge(new BodyTooLargeError(1_048_576))
 */
export function responseTooLarge(error: BodyTooLargeError): Promise<StoredResponse> {
  return storedProblem('response-too-large', 'Response too large to store', error.message);
}

/**
 * A 500 problem as a stored response: what is recorded, final, when the work ran but its own response cannot be
 * (too large; written around the adapter). The key then answers this problem and never runs its work again.
 *
 * @example
 * await lease.complete({ response: await storedProblem('response-not-recorded', 'Response not recorded', detail), outcome: 'failed-final' })
 */
export async function storedProblem(slug: string, title: string, detail: string): Promise<StoredResponse> {
  const response = problem({ status: 500, slug, title, detail });
  return {
    status: response.status,
    headers: storableHeaders(response.headers, ['content-type']),
    body: new Uint8Array(await response.arrayBuffer()),
  };
}

/**
 * A Web `Response` for a stored response (without the replay marker): what the first attempt answers when
 * the stored copy replaced the handler's own response.
 *
 * @example
 * return storedResponse(await responseTooLarge(error))
 */
export function storedResponse({ status, headers, body }: StoredResponse): Response {
  return new Response(bodyFor(status, body), { status, headers: new Headers(headers as Array<[string, string]>) });
}
