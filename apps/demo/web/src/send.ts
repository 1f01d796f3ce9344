/**
 * @module Sending charges from the lab page: one request, or — with Auto-retry on — a charge retried by `idem/client`
 * itself (`idempotentFetch`: exponential backoff with full jitter, `Retry-After` honoured, a 409 polled until the
 * first attempt's answer is stored). Every attempt, first or retry, is its own request in the server's history.
 */
import { idempotentFetch } from 'idem/client';
import { authHeaders, uuid } from './api.js';
import type { Attempt, Spec } from './attempt.js';

export type { Spec } from './attempt.js';

/**
 * The lab's client policy when Auto-retry is on: `idem/client`'s own defaults with shorter waits, so a reader sees
 * it work: up to 4 retries, the first backoff drawn from 0–500 ms and doubling, at most 10 s between attempts.
 */
export const AUTO_RETRY = { retries: 4, minTimeout: 500, maxTimeout: 10_000 } as const;

/** Told when an attempt starts (its answer pending) and again when the browser has its answer or lost it. */
export type OnAttempt = (attempt: Attempt, phase: 'sent' | 'answered') => void;

/** The headers of one attempt; the drop and crash faults go on the first attempt only (a retry has a good line). */
function headersFor(spec: Spec, attempt: Attempt, first: boolean): Record<string, string> {
  const headers: Record<string, string> = {
    ...authHeaders(),
    'content-type': 'application/json',
    'idem-lab-request': attempt.request,
    'idem-lab-control': attempt.control,
    'idem-lab-payment': spec.payment,
  };
  if (spec.key !== null) headers['idempotency-key'] = spec.key;
  if (spec.group !== null) headers['idem-lab-group'] = spec.group;
  if (first && spec.faults.drop) headers['idem-lab-fault'] = 'drop-after-commit';
  if (first && spec.faults.crash) headers['idem-lab-fault'] = 'crash';
  if (spec.faults.fail) headers['idem-lab-fail'] = '503';
  if (spec.faults.delayMs > 0) headers['idem-lab-delay-ms'] = String(spec.faults.delayMs);
  // The takeover switches go on every attempt: the one that takes over is a retry.
  if (spec.takeover) {
    headers['idem-lab-takeover'] = spec.takeover.takeover;
    headers['idem-lab-processor'] = spec.takeover.keyless ? 'keyless' : 'keyed';
  }
  return headers;
}

/**
 * A `fetch` that makes each call one observed attempt. Chromium silently re-sends a POST when a reused keep-alive
 * connection closes before any answer; a request whose connection the server will cut therefore goes on a
 * connection of its own (requests without credentials use a separate pool).
 */
function observed(
  spec: Spec,
  onAttempt: OnAttempt,
): {
  fetch: (url: string, init: RequestInit) => Promise<Response>;
  /** Every attempt sent so far, answered or failed (the client stops waiting on an abort; the page does not). */
  answered: () => Promise<unknown>;
} {
  let n = 0;
  const sent: Array<Promise<unknown>> = [];
  const fetchOne = async (url: string, init: RequestInit): Promise<Response> => {
    const first = ++n === 1;
    const attempt: Attempt = {
      request: uuid(),
      control: first ? spec.control : 'Auto-retry',
      payment: spec.payment,
      group: spec.group,
      key: spec.key,
      amount: spec.amount,
      source: spec.source,
      faults: first ? spec.faults : { ...spec.faults, drop: false, crash: false },
      sentAt: Date.now(),
      seen: { status: null, retryAfter: null, latencyMs: null, answered: false, problem: null },
      entry: null,
    };
    const cut = attempt.faults.drop || attempt.faults.crash;
    const answer = fetch(url, {
      method: 'POST',
      headers: headersFor(spec, attempt, first),
      body: init.body ?? null,
      cache: 'no-store',
      ...(cut ? { credentials: 'omit' as const } : {}),
    });
    sent.push(answer.catch(() => null));
    onAttempt(attempt, 'sent');
    const started = performance.now();
    try {
      const response = await answer;
      const latencyMs = Math.round(performance.now() - started);
      const problem = (response.headers.get('content-type') ?? '').includes('problem+json')
        ? await response
            .clone()
            .json()
            .then((body: { type?: unknown }) => (typeof body.type === 'string' ? body.type : null))
            .catch(() => null)
        : null;
      attempt.seen = {
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        latencyMs,
        answered: true,
        problem,
      };
      return response;
    } catch (error) {
      attempt.seen = {
        status: null,
        retryAfter: null,
        latencyMs: Math.round(performance.now() - started),
        answered: false,
        problem: null,
      };
      throw error;
    } finally {
      onAttempt(attempt, 'answered');
    }
  };
  return { fetch: fetchOne, answered: () => Promise.all(sent) };
}

const bodyOf = (spec: Spec): string => JSON.stringify({ amount: spec.amount, currency: 'usd', source: spec.source });

/**
 * The client policy of one control: `autoRetry` on or off as it was clicked; `signal` aborts when Auto-retry is
 * switched off, so no retry leaves after that (an attempt already sent is still answered and read back).
 */
export interface SendOptions {
  readonly autoRetry: boolean;
  readonly signal?: AbortSignal;
}

/**
 * Sends one logical request, retried by `idem/client` when `autoRetry` is on. Resolves once the last attempt is
 * answered (or the client gave up); never rejects: a lost connection is an attempt without an answer.
 *
 * @example
 * await send(spec, { autoRetry: true }, (attempt, phase) => render())
 */
export async function send(spec: Spec, { autoRetry, signal }: SendOptions, onAttempt: OnAttempt): Promise<void> {
  const { fetch: attempt, answered } = observed(spec, onAttempt);
  try {
    if (!autoRetry) {
      await attempt('/v1/charges', { body: bodyOf(spec) });
      return;
    }
    // Keys off: the client still retries, but each attempt goes without the header (`headersFor` sends only the spec's key).
    await idempotentFetch(
      '/v1/charges',
      { method: 'POST', body: bodyOf(spec) },
      { ...AUTO_RETRY, key: spec.key ?? uuid(), fetch: attempt, ...(signal ? { signal } : {}) },
    );
  } catch {
    // The attempt has recorded that it got no answer; the history says what the server did.
  }
  await answered();
}

/**
 * Sends a race: every request is built and sent in one synchronous run before anything is redrawn, so they leave
 * together. With Auto-retry on, each is its own client with its own retries.
 *
 * @example
 * await sendAll(Array.from({ length: 5 }, () => spec), { autoRetry: false }, onAttempt)
 */
export async function sendAll(specs: readonly Spec[], options: SendOptions, onAttempt: OnAttempt): Promise<void> {
  await Promise.all(specs.map((spec) => send(spec, options, onAttempt)));
}
