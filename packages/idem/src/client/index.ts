/**
 * @module `idem/client` — a retrying `fetch` for callers of an Idem-protected API: one key per logical
 * operation, reused on every attempt, so a retry can never do the work twice.
 */
import { configError } from '../core/errors.js';
import { anySignal } from '../core/signals.js';

/** What `onFailedAttempt` and `shouldRetry` see about an attempt that may be retried. */
export interface FailedAttempt {
  /** 1 for the first attempt. */
  readonly attemptNumber: number;
  /** Retries still allowed by `retries` after this attempt (polls for an attempt in flight cost less: see `inFlightPollMs`). */
  readonly retriesLeft: number;
  /** The operation's Idempotency-Key (the same on every attempt). */
  readonly key: string;
  /** The network error, when the attempt got no answer. */
  readonly error: unknown;
  /** The retryable answer (409, 5xx, …), when there was one. Its body is discarded before the next attempt. */
  readonly response: Response | undefined;
  /** How long the client waits before the next attempt, in ms: `Retry-After` if the server sent one, else backoff; a poll's wait for an attempt in flight. */
  readonly retryDelay: number;
}

export interface IdempotentFetchOptions {
  /** The operation's key. Default: a fresh `crypto.randomUUID()` (or the request's own `Idempotency-Key` header). */
  readonly key?: string;
  /** Retries after the first attempt. Default 5. */
  readonly retries?: number;
  /** Backoff growth per retry. Default 2. */
  readonly factor?: number;
  /** The first retry's backoff ceiling, in ms. Default 1000. */
  readonly minTimeout?: number;
  /** The largest wait between attempts, in ms (also caps `Retry-After`). Default 30 000. */
  readonly maxTimeout?: number;
  /** Give up once the next wait would end later than this many ms after the first attempt. Default Infinity. */
  readonly maxRetryTime?: number;
  /**
   * The first wait, in ms, after a `409` whose problem type is `urn:idem:problem:idempotency-key-in-use` (the
   * operation's first attempt is still running). Default 250. Such an answer is coming, so the client polls for
   * it: each wait is `min(Retry-After, this × 1.5^n)`, growing to at most 1 s (or this, if longer) and never past
   * `maxTimeout`, instead of sleeping the whole `Retry-After` (which may be the lease left, e.g. 10 s).
   *
   * Polls are not failures, so they are not counted one retry each: `retries: 2` would otherwise give up after
   * a second of polling, while the first attempt is still about to answer. Polling stands in for one wait of up
   * to `maxTimeout` instead, and costs one retry when it starts and one more for each further `maxTimeout`
   * (default 30 s) it lasts: a running attempt is waited for up to `retries × maxTimeout`, and a server that
   * answers 409 for ever is still given up on. A wait shorter than this interval (`Retry-After: 0`) counts as
   * this interval, so polls never come free. `retries: 0` does not poll. `maxRetryTime` and `signal` apply.
   */
  readonly inFlightPollMs?: number;
  /**
   * Aborts the attempt in flight and any further retries, as do `init.signal` and the signal of a `Request`
   * given as `input`: whichever aborts first stops the client at once with its reason, during an attempt or a wait.
   */
  readonly signal?: AbortSignal;
  /** Consulted before each retry the client would make; return false to stop and return (or throw) what you have. */
  readonly shouldRetry?: (attempt: FailedAttempt) => boolean | Promise<boolean>;
  /** Called after every attempt that failed in a retryable way (including the last). */
  readonly onFailedAttempt?: (attempt: FailedAttempt) => void | Promise<void>;
  /** The `fetch` to call. Default `globalThis.fetch`. */
  readonly fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** A number in [0, 1) for the jitter. Default `Math.random`. */
  readonly random?: () => number;
  /** Waits `ms`, rejecting with the signal's reason when it aborts. Default a timer. (The client stops on an abort even if it does not.) */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The clock `maxRetryTime` and HTTP-date `Retry-After` values are measured on, in epoch ms. Default `Date.now`. */
  readonly now?: () => number;
}

export interface IdempotentFetchResult {
  /** The final answer: a success, a final refusal, or the last retryable answer when retries ran out. */
  readonly response: Response;
  /** How many requests were sent. */
  readonly attempts: number;
  /** True when the final answer is a stored one (`Idempotent-Replayed: true`): the work ran on an earlier attempt. */
  readonly replayed: boolean;
  readonly key: string;
}

/** The problem type of Idem's 409 for a key whose first attempt is still running. */
const IN_FLIGHT_TYPE = 'urn:idem:problem:idempotency-key-in-use';
/** The problem type of Idem's 409 for a key whose outcome is unknown (`takeover: 'quarantine'`): final to a client. */
const OUTCOME_UNKNOWN_TYPE = 'urn:idem:problem:idempotency-outcome-unknown';

/** In-flight polls grow ×1.5 from `inFlightPollMs` up to this (or `inFlightPollMs`, if longer). */
const IN_FLIGHT_POLL_CEILING = 1_000;

/** Statuses worth another attempt: the ones Idem's server records as retryable (docs/DESIGN.md: Failure policy), and 5xx. */
const RETRYABLE_4XX: ReadonlySet<number> = new Set([408, 409, 425, 429]);

/**
 * True for an answer the client retries: 408, 409 (in flight), 425, 429 and every 5xx. Never 400, 401, 402,
 * 403, 404, 413, 422 or any other 4xx: those are final, and a retry with the same key would only replay them.
 *
 * @example
 * isRetryableStatus(409) // → true
 * isRetryableStatus(402) // → false
 */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || RETRYABLE_4XX.has(status);
}

/**
 * `fetch` with retries under one Idempotency-Key. The body is buffered once and re-sent on every attempt.
 * Network errors and retryable answers are retried with exponential backoff and full jitter (a wait drawn
 * uniformly from 0 to `min(maxTimeout, minTimeout × factor^(n−1))`), or after the server's `Retry-After`. A
 * `409` saying the first attempt is still running is polled for soon (see `inFlightPollMs`); a `409` saying its
 * outcome is unknown (`idempotency-outcome-unknown`: held for an operator) is final. Resolves with the final answer; rejects only with the last network error, or the signal's reason.
 *
 * @example
 * const { response, attempts, replayed, key } = await idempotentFetch('https://api.example.com/v1/charges', {
 *   method: 'POST',
 *   headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
 *   body: JSON.stringify({ amount: 50_000, currency: 'usd', source: 'tok_visa' }),
 * }, { retries: 5, signal: AbortSignal.timeout(60_000) })
 */
export async function idempotentFetch(
  input: string | URL | Request,
  init: RequestInit = {},
  options: IdempotentFetchOptions = {},
): Promise<IdempotentFetchResult> {
  const settings = settle(options);
  const { retries, factor, minTimeout, maxTimeout, maxRetryTime, inFlightPollMs, random, sleep, now } = settings;
  // Every signal the caller gave: `new Request(input, init)` would follow only one of init's and the Request's.
  const signal = combine([
    options.signal,
    init.signal ?? undefined,
    input instanceof Request ? input.signal : undefined,
  ]);
  signal?.throwIfAborted();
  /** `promise`, or the signal's reason as soon as it aborts, even if what `promise` waits on ignores the signal. */
  const unlessAborted = <T>(promise: Promise<T>): Promise<T> => (signal ? raceAbort(promise, signal) : promise);

  // Buffer once: a stream, FormData or Blob body is read here, so every attempt sends the same bytes.
  const template = new Request(input, init);
  const body = template.body === null ? null : new Uint8Array(await unlessAborted(template.arrayBuffer()));
  const headers = new Headers(template.headers);
  const key = options.key ?? headers.get('idempotency-key') ?? crypto.randomUUID();
  headers.set('idempotency-key', key);
  const send = (): Promise<Response> =>
    settings.fetch(template.url, {
      ...init,
      method: template.method,
      headers,
      body,
      ...(signal ? { signal } : {}),
    });

  const started = now();
  let failures = 0; // retries spent on failures (network errors, 5xx, other 409s, 408, 425, 429)
  let polls = 0; // in-flight 409s answered with a poll
  let polled = 0; // ms of waiting charged to polling (each wait at least `inFlightPollMs`)
  // Retries charged to polling: one when it starts, one more each time the waits pass another `maxTimeout`.
  const pollCost = (): number =>
    polls === 0 ? 0 : maxTimeout > 0 ? Math.max(1, Math.ceil(polled / maxTimeout)) : polls;
  for (let attempt = 1; ; attempt++) {
    let response: Response | undefined;
    let error: unknown;
    try {
      response = await unlessAborted(send());
    } catch (caught) {
      if (signal?.aborted) throw signal.reason;
      error = caught;
    }
    signal?.throwIfAborted();
    if (response && !isRetryableStatus(response.status)) {
      return { response, attempts: attempt, replayed: response.headers.get('idempotent-replayed') === 'true', key };
    }

    const spent = failures + pollCost();
    const retriesLeft = retries - spent;
    const type = response?.status === 409 ? await unlessAborted(problemType(response)) : undefined;
    // An outcome held for an operator: no retry settles it, and each one would re-arm the key's quarantine.
    if (response && type === OUTCOME_UNKNOWN_TYPE) return { response, attempts: attempt, replayed: false, key };
    const serverSaid = response ? retryAfterMs(response.headers.get('retry-after'), now()) : undefined;
    const inFlight = type === IN_FLIGHT_TYPE;
    let retryDelay: number;
    let cost: number;
    if (inFlight) {
      const poll = Math.round(
        Math.min(inFlightPollMs * 1.5 ** polls, Math.max(IN_FLIGHT_POLL_CEILING, inFlightPollMs)),
      );
      retryDelay = Math.min(serverSaid ?? poll, poll, maxTimeout);
      const before = pollCost();
      polls++;
      polled += Math.max(retryDelay, Math.min(inFlightPollMs, maxTimeout));
      cost = pollCost() - before;
    } else {
      const backoff = Math.round(random() * Math.min(maxTimeout, minTimeout * factor ** spent));
      retryDelay = serverSaid === undefined ? backoff : Math.min(serverSaid, maxTimeout);
      failures++;
      cost = 1;
    }
    const failed: FailedAttempt = { attemptNumber: attempt, retriesLeft, key, error, response, retryDelay };
    await unlessAborted(Promise.resolve(options.onFailedAttempt?.(failed)));

    const giveUp =
      cost > retriesLeft ||
      now() - started + retryDelay > maxRetryTime ||
      (options.shouldRetry !== undefined && !(await unlessAborted(Promise.resolve(options.shouldRetry(failed)))));
    if (giveUp) {
      if (response)
        return { response, attempts: attempt, replayed: response.headers.get('idempotent-replayed') === 'true', key };
      throw error;
    }
    if (response && !response.bodyUsed) await response.body?.cancel().catch(() => undefined);
    await unlessAborted(sleep(retryDelay, signal));
  }
}

/**
 * An {@link idempotentFetch} with defaults (validated now). Each call is its own logical operation with its own
 * key, so `key` cannot be a default.
 *
 * @example
 * const payments = createIdempotentFetch({ retries: 8, maxRetryTime: 120_000 })
 * const { response, replayed } = await payments(`${base}/v1/charges`, { method: 'POST', headers, body })
 */
export function createIdempotentFetch(
  defaults: Omit<IdempotentFetchOptions, 'key'> = {},
): (
  input: string | URL | Request,
  init?: RequestInit,
  options?: IdempotentFetchOptions,
) => Promise<IdempotentFetchResult> {
  if ('key' in defaults) throw configError('key', 'given per call (one key per logical operation), not as a default');
  settle(defaults);
  return (input, init, options = {}) => idempotentFetch(input, init, { ...defaults, ...options });
}

interface Settings {
  readonly retries: number;
  readonly factor: number;
  readonly minTimeout: number;
  readonly maxTimeout: number;
  readonly maxRetryTime: number;
  readonly inFlightPollMs: number;
  readonly fetch: (input: string, init: RequestInit) => Promise<Response>;
  readonly random: () => number;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly now: () => number;
}

/** Applies defaults and validates, with errors that name the option. */
function settle({
  key,
  retries = 5,
  factor = 2,
  minTimeout = 1_000,
  maxTimeout = 30_000,
  maxRetryTime = Number.POSITIVE_INFINITY,
  inFlightPollMs = 250,
  signal,
  shouldRetry,
  onFailedAttempt,
  fetch = (input, init) => globalThis.fetch(input, init),
  random = Math.random,
  sleep = abortableSleep,
  now = Date.now,
}: IdempotentFetchOptions): Settings {
  if (key !== undefined && (typeof key !== 'string' || key.length === 0))
    throw configError('key', 'a non-empty string', key);
  if (!Number.isInteger(retries) || retries < 0) throw configError('retries', 'a non-negative integer', retries);
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1)
    throw configError('factor', 'a number of at least 1', factor);
  if (typeof minTimeout !== 'number' || !Number.isFinite(minTimeout) || minTimeout < 0) {
    throw configError('minTimeout', 'a non-negative number', minTimeout);
  }
  if (typeof maxTimeout !== 'number' || Number.isNaN(maxTimeout) || maxTimeout < minTimeout) {
    throw configError('maxTimeout', `a number of at least minTimeout (${minTimeout})`, maxTimeout);
  }
  if (typeof maxRetryTime !== 'number' || Number.isNaN(maxRetryTime) || maxRetryTime < 0) {
    throw configError('maxRetryTime', 'a non-negative number', maxRetryTime);
  }
  if (typeof inFlightPollMs !== 'number' || !Number.isFinite(inFlightPollMs) || inFlightPollMs <= 0) {
    throw configError('inFlightPollMs', 'a positive number', inFlightPollMs);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw configError('signal', 'an AbortSignal');
  for (const [name, value] of [
    ['shouldRetry', shouldRetry],
    ['onFailedAttempt', onFailedAttempt],
  ] as const) {
    if (value !== undefined && typeof value !== 'function') throw configError(name, 'a function', value);
  }
  for (const [name, value] of [
    ['fetch', fetch],
    ['random', random],
    ['sleep', sleep],
    ['now', now],
  ] as const) {
    if (typeof value !== 'function') throw configError(name, 'a function', value);
  }
  return { retries, factor, minTimeout, maxTimeout, maxRetryTime, inFlightPollMs, fetch, random, sleep, now };
}

/**
 * A `Retry-After` value in ms from `now`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3). Undefined when
 * absent or unreadable; never negative.
 */
function retryAfterMs(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1_000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The type of a JSON (problem+json) answer, read from a copy: the answer's own body stays unread. */
async function problemType(response: Response): Promise<string | undefined> {
  if (!(response.headers.get('content-type') ?? '').toLowerCase().includes('json')) return undefined;
  try {
    const parsed: unknown = await response.clone().json();
    const type = typeof parsed === 'object' && parsed !== null ? (parsed as { type?: unknown }).type : undefined;
    return typeof type === 'string' ? type : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One signal that aborts when any of `signals` does (undefined when none is given), holding them: a caller's
 * `AbortSignal.timeout()` that nothing else holds must not be collected while the request waits on it.
 */
function combine(signals: ReadonlyArray<AbortSignal | undefined>): AbortSignal | undefined {
  const given = [...new Set(signals.filter((s): s is AbortSignal => s !== undefined))];
  return given.length <= 1 ? given[0] : anySignal(given);
}

/** Settles as `promise` does, or rejects with the signal's reason as soon as it aborts, whichever comes first. */
function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => undefined); // the loser's rejection is expected, not unhandled
    return Promise.reject(signal.reason as Error);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    void promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
