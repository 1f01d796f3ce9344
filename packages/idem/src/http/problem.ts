/**
 * @module RFC 9457 problem details, and the one place Idem's error codes become HTTP statuses.
 */
import type { IdempotencyError } from '../core/errors.js';

/** Problem `type` URIs are `urn:idem:problem:<slug>`; the slug is stable and documented in the README. */
export type ProblemSlug =
  | 'idempotency-key-missing'
  | 'idempotency-key-invalid'
  | 'idempotency-key-reused'
  | 'idempotency-key-in-use'
  | 'idempotency-lease-lost'
  | 'idempotency-store-unavailable'
  | 'idempotency-outcome-unknown'
  | 'idempotency-reconcile-failed'
  | 'request-too-large'
  | 'response-too-large'
  | 'internal-error'
  | (string & {});

export interface ProblemInit {
  readonly status: number;
  readonly slug: ProblemSlug;
  readonly title: string;
  readonly detail?: string;
  readonly headers?: Record<string, string>;
  /** Extension members, e.g. `{ param: 'amount' }`. */
  readonly extensions?: Record<string, unknown>;
}

/**
 * An `application/problem+json` response.
 *
 * @example
 * return problem({ status: 400, slug: 'parameter-invalid', title: 'Invalid parameter', detail: '`amount` must be a positive integer.' })
 */
export function problem({ status, slug, title, detail, headers = {}, extensions = {} }: ProblemInit): Response {
  const body = { type: `urn:idem:problem:${slug}`, title, status, ...(detail ? { detail } : {}), ...extensions };
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/problem+json', 'cache-control': 'no-store', ...headers },
  });
}

// In flight: 1 second, not the lease left. The lease is the worst case (a dead holder); the usual case is a
// first attempt that answers within its own latency, so a duplicate polls soon and gets that answer.
const RETRY_SOON = { 'retry-after': '1' };

/** The answers whose detail is the error's own message, and nothing else varies. */
const ANSWERED_WITH_MESSAGE = {
  KEY_MISSING: { status: 400, slug: 'idempotency-key-missing', title: 'Idempotency-Key required' },
  KEY_INVALID: { status: 400, slug: 'idempotency-key-invalid', title: 'Invalid Idempotency-Key' },
  IN_FLIGHT: { status: 409, slug: 'idempotency-key-in-use', title: 'Request in progress', headers: RETRY_SOON },
  LEASE_LOST: { status: 409, slug: 'idempotency-lease-lost', title: 'Request taken over', headers: RETRY_SOON },
} as const satisfies Record<string, ProblemInit>;

/**
 * Maps an {@link IdempotencyError} to its HTTP answer.
 *
 * | code | status |
 * |---|---|
 * | KEY_MISSING, KEY_INVALID | 400 |
 * | FINGERPRINT_MISMATCH | 400 (or 422 by option) |
 * | IN_FLIGHT, LEASE_LOST | 409 + `Retry-After: 1` |
 * | STORE_UNAVAILABLE | 503 + `Retry-After: 1` |
 * | RECONCILE_FAILED | 503 + `Retry-After`: the abandoned lease's `leaseMs`, in whole seconds |
 * | OUTCOME_UNKNOWN | 409, `operation_state: "unknown"` (no Retry-After: retrying does not help) |
 *
 * @example
 * catch (error) { if (isIdempotencyError(error)) return problemFor(error, { mismatchStatus: 422 }) }
 */
export function problemFor(
  error: IdempotencyError,
  { mismatchStatus = 400 }: { mismatchStatus?: 400 | 422 } = {},
): Response {
  switch (error.code) {
    case 'KEY_MISSING':
    case 'KEY_INVALID':
    case 'IN_FLIGHT':
    case 'LEASE_LOST':
      return problem({ ...ANSWERED_WITH_MESSAGE[error.code], detail: error.message });
    case 'FINGERPRINT_MISMATCH':
      return problem({
        status: mismatchStatus,
        slug: 'idempotency-key-reused',
        title: 'Idempotency-Key reused',
        detail: error.message,
      });
    case 'STORE_UNAVAILABLE':
      return problem({
        status: 503,
        slug: 'idempotency-store-unavailable',
        title: 'Idempotency store unavailable',
        detail: 'The request was not processed. Retry with the same Idempotency-Key.',
        headers: RETRY_SOON,
      });
    case 'OUTCOME_UNKNOWN':
      return problem({
        status: 409,
        slug: 'idempotency-outcome-unknown',
        title: 'Outcome unknown',
        detail: error.message,
        extensions: { operation_state: 'unknown' },
      });
    case 'RECONCILE_FAILED':
      return problem({
        status: 503,
        slug: 'idempotency-reconcile-failed',
        title: 'Outcome not reconciled',
        detail: error.message,
        headers: { 'retry-after': String(Math.max(1, Math.ceil((error.retryAfterMs ?? 1_000) / 1_000))) },
      });
    case 'CONFIG_INVALID':
      return problem({ status: 500, slug: 'internal-error', title: 'Internal server error' });
  }
}
