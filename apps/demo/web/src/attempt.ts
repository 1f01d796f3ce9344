/**
 * @module One observed request from the lab page, and how its answer is classified.
 */

/** What happened to an attempt, as the browser observed it. */
export type Outcome =
  | 'pending'
  | 'executed'
  | 'replayed'
  | 'in-flight'
  | 'mismatch'
  | 'dropped'
  | 'processor-failed'
  | 'declined'
  | 'error';

/** Which control sent it. */
export type Source = 'Charge' | 'Retry' | 'Race' | 'Tamper';

/** The faults and delay a request asks the lab server for (`Idem-Lab-*` headers). */
export interface Faults {
  readonly drop: boolean;
  readonly fail: boolean;
  readonly delayMs: number;
}

export interface Attempt {
  /** 1-based, in sending order. */
  readonly n: number;
  readonly source: Source;
  /** The Idempotency-Key sent, or null when keys are off. */
  readonly key: string | null;
  readonly amount: number;
  /**
   * The payment the person meant: attempts that retry one payment share it (one key, or a keyless charge and its
   * retries). What they meant to pay is the first amount of each intent.
   */
  readonly intent: number;
  readonly faults: Faults;
  /** Attempts sent together by one Race share a group number. */
  readonly group: number | null;
  /** Epoch ms when the request was sent. */
  sentAt: number;
  outcome: Outcome;
  status: number | null;
  latencyMs: number | null;
  /** The problem `type` of an error answer. */
  problemType: string | null;
  retryAfter: string | null;
  chargeId: string | null;
  /** An earlier attempt with this key ended in a retryable failure: this one, if it executed, reclaimed the key. */
  reclaim: boolean;
  /** For a dropped attempt: the key's record as read back afterwards (`GET /v1/idempotency_records`). */
  readBack: { readonly status: string; readonly responseStatus: number | null } | null;
}

export const MISMATCH_TYPE = 'urn:idem:problem:idempotency-key-reused';

/**
 * Classifies an answer: `Idempotent-Replayed: true` → replayed; 409 → in flight; the key-reused problem →
 * mismatch; 2xx → executed; 503 → the processor failed; 402 → declined.
 *
 * @example
 * classify(409, null, 'urn:idem:problem:idempotency-key-in-use') // → 'in-flight'
 */
export function classify(status: number, replayed: string | null, problemType: string | null): Outcome {
  if (replayed === 'true') return 'replayed';
  if (status === 409) return 'in-flight';
  if (problemType === MISMATCH_TYPE) return 'mismatch';
  if (status >= 200 && status < 300) return 'executed';
  if (status === 503) return 'processor-failed';
  if (status === 402) return 'declined';
  return 'error';
}

/**
 * The request log's words for an outcome.
 *
 * @example
 * describeOutcome({ outcome: 'in-flight', status: 409 }) // → '409 in flight'
 */
export function describeOutcome(attempt: Pick<Attempt, 'outcome' | 'status'>): string {
  switch (attempt.outcome) {
    case 'pending':
      return 'waiting…';
    case 'executed':
      return 'executed';
    case 'replayed':
      return 'replayed';
    case 'in-flight':
      return '409 in flight';
    case 'mismatch':
      return `${attempt.status ?? 400} mismatch`;
    case 'dropped':
      return 'connection dropped';
    case 'processor-failed':
      return 'processor failed (retryable)';
    case 'declined':
      return 'card declined (final)';
    case 'error':
      return `error ${attempt.status ?? ''}`.trim();
  }
}
