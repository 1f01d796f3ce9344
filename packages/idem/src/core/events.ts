/**
 * @module What the engine and the HTTP layer tell observers (metrics, logs, traces): one event per thing done.
 */

/**
 * What every event about one key carries: its scope and key, the record's id where one exists, and the route
 * (the request path, when the HTTP layer or the caller gave one).
 */
export interface KeyEventFields {
  readonly scope: string;
  readonly key: string;
  readonly id?: string;
  readonly route?: string;
}

/**
 * Something the engine or the HTTP layer did, for metrics, logs and traces. Never carries bodies or credentials;
 * sinks that export it should hash `key` (the demo's logs and `idem/otel` do).
 */
export type IdempotencyEvent =
  | (KeyEventFields & {
      readonly type: 'executed';
      readonly outcome: OutcomeKind;
      /** The status the work answered (null when it threw). */
      readonly status: number | null;
      /** From the claim to the recorded outcome, in ms. */
      readonly ms: number;
    })
  | (KeyEventFields & { readonly type: 'takeover' })
  | (KeyEventFields & { readonly type: 'replayed'; readonly status: number })
  | (KeyEventFields & { readonly type: 'in_flight' })
  | (KeyEventFields & { readonly type: 'mismatch' })
  | (KeyEventFields & { readonly type: 'lease_lost' })
  | (KeyEventFields & { readonly type: 'stale_write_refused'; readonly op: StoreOp })
  | {
      /** A request refused before any claim: no key where one is required, an invalid key, a body over the limit, a store down. */
      readonly type: 'refused';
      readonly reason: 'KEY_MISSING' | 'KEY_INVALID' | 'BODY_TOO_LARGE' | 'STORE_UNAVAILABLE';
      readonly scope?: string;
      readonly route?: string;
    }
  | {
      readonly type: 'store_op';
      readonly op: StoreOp;
      readonly ms: number;
      readonly ok: boolean;
      readonly error?: unknown;
    };

export type StoreOp = 'claim' | 'complete' | 'renew' | 'release' | 'get';

/**
 * How the attempt ended. `failed-final` is replayed to every retry; `failed-retryable` lets the next attempt
 * run the work again; `release` deletes the record (the work declined to start, so nothing is remembered).
 */
export type OutcomeKind = 'succeeded' | 'failed-final' | 'failed-retryable' | 'release';
