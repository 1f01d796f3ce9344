/**
 * @module The probe's HTTP: the requests it sends and the answers it reads, every body read up to a limit (a
 * server answering without end costs the probe that limit, not its memory).
 */
import { anySignal } from '../../core/signals.js';
import { redact, redactUrl } from '../../core/store-url.js';
import { CommandError } from '../args.js';
import { visible } from '../escape.js';
import type { Answer } from './model.js';

/** An answer whose body passed the limit: the probe stopped reading there and dropped the connection. */
export class ResponseTooLarge extends Error {
  override readonly name = 'ResponseTooLarge';
  constructor(status: number, limit: number) {
    super(
      `${status} with a body over ${limit} bytes (--max-response-bytes): stopped reading and dropped the connection`,
    );
  }
}

export interface HttpSettings {
  readonly url: string;
  readonly method: string;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly keyHeader: string;
  readonly sfString: boolean;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
  readonly countUrl: string | undefined;
  readonly countPath: string | undefined;
}

export interface Requester {
  /** Sends `payload` with `key` (none when null) and `extra` headers; never follows a redirect. */
  readonly send: (
    key: string | null,
    payload: string,
    extra?: ReadonlyArray<readonly [string, string]>,
  ) => Promise<Answer>;
  /** The side effects so far, read from the count URL; null without one. */
  readonly count: () => Promise<number | null>;
}

/**
 * The probe's two kinds of request, with `settings` applied to each.
 *
 * @example
 * const { send } = requester(settings); const first = await send(randomUUID(), '{"amount":500}')
 */
export function requester(settings: HttpSettings): Requester {
  const { url, method, headers, keyHeader, sfString, timeoutMs, maxResponseBytes, countUrl, countPath } = settings;
  // What the count URL answers is printed with every -H value masked (a server may echo the caller's API key) and
  // every credential it names masked, before it is cut to a length (a cut could leave part of a secret unmatched).
  const hide = headerMask(headers);
  const quote = (text: string): string => visible(redact(hide(text)).slice(0, 200));
  const base = (): Headers => {
    const h = new Headers();
    for (const [name, value] of headers) h.append(name, value);
    return h;
  };
  // The timeout held by the combined signal: inside a bare AbortSignal.any it could be collected, and never fire.
  const signal = (abort: AbortController) => anySignal([abort.signal, AbortSignal.timeout(timeoutMs)]);

  async function send(
    key: string | null,
    payload: string,
    extra: ReadonlyArray<readonly [string, string]> = [],
  ): Promise<Answer> {
    const h = base();
    if (!h.has('content-type')) h.set('content-type', 'application/json');
    if (key !== null) h.set(keyHeader, sfString ? `"${key.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"` : key);
    for (const [name, value] of extra) h.set(name, value);
    // Never follow a redirect: it would re-send the body, the key and the caller's headers to another origin, and
    // the probe judges the answer the server gave, which a 3xx is.
    const abort = new AbortController();
    const response = await fetch(url, { method, headers: h, body: payload, redirect: 'manual', signal: signal(abort) });
    return {
      status: response.status,
      headers: response.headers,
      body: await readBody(response, maxResponseBytes, abort),
    };
  }

  // The count URL as printed: its user info and credential parameters masked.
  const shownCount = countUrl === undefined ? '' : redactUrl(countUrl);
  async function count(): Promise<number | null> {
    if (countUrl === undefined) return null;
    const abort = new AbortController();
    let response: Response;
    try {
      response = await fetch(countUrl, { headers: base(), redirect: 'manual', signal: signal(abort) });
    } catch (error) {
      throw new CommandError(`cannot read --count-url ${shownCount}: ${hide(redact(reason(error), countUrl))}`, {
        cause: error,
      });
    }
    let text: string;
    try {
      text = new TextDecoder().decode(await readBody(response, maxResponseBytes, abort));
    } catch (error) {
      if (error instanceof ResponseTooLarge)
        throw new CommandError(`--count-url ${shownCount} answered ${error.message}`);
      throw error;
    }
    if (!response.ok) throw new CommandError(`--count-url ${shownCount} answered ${response.status}: ${quote(text)}`);
    return readCount(text, countPath, shownCount, quote);
  }

  return { send, count };
}

/**
 * `response`'s body, read whole — or, once it passes `limit` bytes, the request aborted (its connection dropped,
 * the rest never read) and a {@link ResponseTooLarge} thrown. At most `limit` bytes plus one chunk are held.
 */
async function readBody(response: Response, limit: number, abort: AbortController): Promise<Uint8Array> {
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    total += read.value.byteLength;
    if (total > limit) {
      const error = new ResponseTooLarge(response.status, limit);
      abort.abort(error);
      throw error;
    }
    chunks.push(read.value);
  }
  return Buffer.concat(chunks, total);
}

/**
 * A function masking, in any text, every header value the caller gave (`-H`): each value whole and, after an auth
 * scheme (`Bearer sk_live_…`), its credential alone, as written and as {@link visible} prints it. A value shorter
 * than 4 characters is left: masking every `a` would hide the message, not a secret.
 *
 * @example
 * headerMask([['Authorization', 'Bearer sk_live_X1Y2']])('echo: sk_live_X1Y2') // 'echo: ***'
 */
export function headerMask(headers: ReadonlyArray<readonly [string, string]>): (text: string) => string {
  const secrets = new Set<string>();
  for (const [, raw] of headers) {
    const value = raw.trim();
    for (const form of [value, value.replace(/^\S+\s+/, '')]) {
      for (const shown of [form, visible(form)]) if (shown.length >= 4) secrets.add(shown);
    }
  }
  const longestFirst = [...secrets].sort((a, b) => b.length - a.length);
  return (text) => longestFirst.reduce((masked, secret) => masked.split(secret).join('***'), text);
}

/** Reads the count from a bare number or JSON (at `path`, dotted). */
function readCount(text: string, path: string | undefined, url: string, quote: (text: string) => string): number {
  let value: unknown = text.trim();
  if (path !== undefined) {
    try {
      value = JSON.parse(text);
    } catch {
      throw new CommandError(
        `--count-url ${url} did not answer JSON, so --count-path ${path} cannot apply: ${quote(text)}`,
      );
    }
    for (const part of path.split('.').filter(Boolean)) {
      value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[part] : undefined;
    }
  }
  const number = typeof value === 'number' ? value : typeof value === 'string' && value !== '' ? Number(value) : NaN;
  if (!Number.isFinite(number)) {
    throw new CommandError(
      `--count-url ${url}${path ? ` at --count-path ${path}` : ''} is not a number (got ${quote(`${JSON.stringify(value)}`)})`,
    );
  }
  return number;
}

/** Why a request failed, in one visible line (with its cause: fetch's own message says little). */
export function reason(error: unknown): string {
  if (!(error instanceof Error)) return visible(String(error));
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return visible(`${error.message}${cause}`);
}
