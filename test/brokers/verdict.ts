/**
 * `verdict(error)`: what a queue consumer does with a message whose idempotent call threw. The region below is
 * docs/CONSUMERS.md's `verdict.ts`, byte for byte (`docs.test.ts` checks it); both broker consumers run it.
 */
// #region verdict
import { IdempotentFailure, isIdempotencyError } from 'idem';

/** What to do with a message whose idempotent call threw. */
export type Verdict =
  /** It can never succeed as it is: a final failure (recorded: every copy gets it), another payload, a bad key. */
  | { readonly action: 'dead-letter'; readonly reason: string }
  /** Another attempt holds the key, or the store is down: it will pass. Deliver it again after `delayMs`. */
  | { readonly action: 'defer'; readonly reason: string; readonly delayMs: number }
  /** The work failed in a way the next run may not: deliver it again after `delayMs`, up to the delivery limit. */
  | { readonly action: 'retry'; readonly reason: string; readonly delayMs: number };

export function verdict(error: unknown): Verdict {
  if (error instanceof IdempotentFailure)
    return { action: 'dead-letter', reason: `${error.originalName}: ${error.message}` };
  const reason = String(error);
  if (!isIdempotencyError(error)) return { action: 'retry', reason, delayMs: 1_000 };
  if (error.code !== 'IN_FLIGHT' && error.code !== 'STORE_UNAVAILABLE' && error.code !== 'LEASE_LOST')
    return { action: 'dead-letter', reason };
  // IN_FLIGHT carries the time left on the running attempt's lease. Clamp it, add jitter, and keep it a whole
  // number of milliseconds: JetStream ignores a fractional nak delay and redelivers at once.
  const waitMs = Math.min(Math.max(error.retryAfterMs ?? 1_000, 250), 5_000);
  return { action: 'defer', reason, delayMs: Math.round(waitMs + Math.random() * 250) };
}
// #endregion verdict
