/**
 * @module Stripe's `error` member on the demo's problem documents. Each answer stays an RFC 9457 problem
 * (`type`, `title`, `status`, `detail`, extensions) and also carries `error: { type, code, message }` — with `param`
 * and `charge` when the problem names them — where Stripe's clients read an error: the official `stripe` SDK then
 * raises its typed error (`StripeIdempotencyError` for a reused key) instead of returning the document as a charge.
 */
import { problem, type ProblemInit } from 'idem/http';

/** Stripe's error types that the demo's answers map to. */
export type StripeErrorType =
  'api_error' | 'card_error' | 'idempotency_error' | 'invalid_request_error' | 'rate_limit_error';

export interface StripeErrorMember {
  readonly type: StripeErrorType;
  /** The problem's `code` extension if it has one, else its slug in snake case (`idempotency_key_reused`). */
  readonly code: string;
  /** The problem's `detail`, else its `title`. */
  readonly message: string;
  readonly param?: string;
  readonly charge?: string;
}

const PREFIX = 'urn:idem:problem:';
/** The answers about the key itself: a reused key, a key in use, a lease taken over. */
const IDEMPOTENCY = new Set(['idempotency-key-reused', 'idempotency-key-in-use', 'idempotency-lease-lost']);

interface ProblemDocument {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail?: unknown;
  readonly [extension: string]: unknown;
}

/**
 * Stripe's `error` member for a problem document: the type by status (5xx `api_error`, 402 `card_error`, 429
 * `rate_limit_error`), the key's own problems `idempotency_error`, any other 4xx `invalid_request_error`.
 *
 * @example
 * stripeErrorOf({ type: 'urn:idem:problem:idempotency-key-reused', title: 'Idempotency-Key reused', status: 400 })
 * // → { type: 'idempotency_error', code: 'idempotency_key_reused', message: 'Idempotency-Key reused' }
 */
export function stripeErrorOf(doc: ProblemDocument): StripeErrorMember {
  const slug = doc.type.startsWith(PREFIX) ? doc.type.slice(PREFIX.length) : doc.type;
  const type: StripeErrorType =
    doc.status >= 500
      ? 'api_error'
      : doc.status === 402
        ? 'card_error'
        : doc.status === 429
          ? 'rate_limit_error'
          : IDEMPOTENCY.has(slug)
            ? 'idempotency_error'
            : 'invalid_request_error';
  return {
    type,
    code: typeof doc.code === 'string' ? doc.code : slug.replaceAll('-', '_'),
    message: typeof doc.detail === 'string' ? doc.detail : doc.title,
    ...(typeof doc.param === 'string' ? { param: doc.param } : {}),
    ...(typeof doc.charge === 'string' ? { charge: doc.charge } : {}),
  };
}

/**
 * `problem(init)` with the `error` member, for answers built before the app runs (a 401 from `admit`, the node
 * bridge's refusals).
 *
 * @example
 * return stripeProblem({ status: 401, slug: 'unauthorized', title: 'Unauthorized' })
 */
export function stripeProblem(init: ProblemInit): Response {
  const { status, slug, title, detail, extensions = {} } = init;
  const doc = { type: `${PREFIX}${slug}`, title, status, ...(detail ? { detail } : {}), ...extensions };
  return problem({ ...init, extensions: { ...extensions, error: stripeErrorOf(doc) } });
}

/**
 * The response with the `error` member added to its problem document; any other response, or a problem that has
 * one, unchanged. Applied to every answer of the app — first answers and replays alike, so a replay stays
 * byte-identical to the answer it repeats — including the problems the idempotency layer writes.
 *
 * @example
 * return withStripeError(await route(request))
 */
export async function withStripeError(response: Response): Promise<Response> {
  if (response.body === null || response.headers.get('content-type') !== 'application/problem+json') return response;
  const text = await response.text();
  const init = { status: response.status, statusText: response.statusText, headers: response.headers };
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return new Response(text, init);
  }
  if (!isProblem(doc) || 'error' in doc) return new Response(text, init);
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return new Response(JSON.stringify({ ...doc, error: stripeErrorOf(doc) }), { ...init, headers });
}

function isProblem(value: unknown): value is ProblemDocument {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const { type, title, status } = value as Record<string, unknown>;
  return typeof type === 'string' && typeof title === 'string' && typeof status === 'number';
}
