/**
 * @module The single error type Idem throws. HTTP status mapping lives in `idem/http`, not here.
 */

/** Every reason Idem refuses or fails a request. Closed: match on it, never on `message`. */
export type IdempotencyErrorCode =
  | 'KEY_MISSING'
  | 'KEY_INVALID'
  | 'FINGERPRINT_MISMATCH'
  | 'IN_FLIGHT'
  | 'LEASE_LOST'
  | 'STORE_UNAVAILABLE'
  | 'OUTCOME_UNKNOWN'
  | 'RECONCILE_FAILED'
  | 'CONFIG_INVALID';

/**
 * The root error of Idem. `code` is stable; `message` is for people.
 *
 * @example
 * try { await engine.run(request, work) } catch (error) {
 *   if (error instanceof IdempotencyError && error.code === 'IN_FLIGHT') retryLater(error.retryAfterMs)
 * }
 */
export class IdempotencyError extends Error {
  override readonly name = 'IdempotencyError';
  readonly code: IdempotencyErrorCode;
  /** For `IN_FLIGHT` and `LEASE_LOST`: how long until the current attempt's lease ends. */
  readonly retryAfterMs: number | undefined;

  constructor(code: IdempotencyErrorCode, message: string, options: { cause?: unknown; retryAfterMs?: number } = {}) {
    super(message, { cause: options.cause });
    this.code = code;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** True when `error` is an {@link IdempotencyError}, optionally of one code. */
export function isIdempotencyError(error: unknown, code?: IdempotencyErrorCode): error is IdempotencyError {
  return error instanceof IdempotencyError && (code === undefined || error.code === code);
}

/**
 * A `CONFIG_INVALID` error that names the option, p-retry style.
 *
 * @example
 * throw configError('leaseMs', 'a positive number', -1) // Expected `leaseMs` to be a positive number, got -1.
 */
export function configError(name: string, expected: string, value?: unknown): IdempotencyError {
  const shown =
    typeof value === 'function' ? 'a function' : typeof value === 'number' ? String(value) : JSON.stringify(value);
  const got = value === undefined ? '' : `, got ${shown}`;
  return new IdempotencyError('CONFIG_INVALID', `Expected \`${name}\` to be ${expected}${got}.`);
}
