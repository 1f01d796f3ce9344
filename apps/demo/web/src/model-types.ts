/**
 * @module What `/v1/model/*` answers, as the model page reads it. The readings' types are the server's own
 * (apps/demo/src/model-reading.ts), imported as types only.
 */
import type { IdempotencyRecord } from 'idem';
import type { ModelState, Reading, TransitionName } from '../../src/model-reading.js';

export type { ModelState, Reading, TransitionName };
/** What refused a losing claim, as `/v1/model/race` reports it. */
export type { Refusal } from '../../src/model-race.js';

export interface Trip {
  readonly op: string;
  readonly request: unknown;
  readonly response?: unknown;
  readonly error?: unknown;
}

/** A record as the model API sends it: the library's, its response reduced to the status; `retryable` null off `failed`. */
export interface ModelRecord extends Pick<
  IdempotencyRecord,
  'pk' | 'key' | 'status' | 'fingerprint' | 'id' | 'token' | 'claimedAt' | 'leaseExpiresAt' | 'expiresAt' | 'resultId'
> {
  readonly retryable: boolean | null;
  readonly responseStatus: number | null;
}

/** One contract call as `/v1/model/*` reports it, with what it did to the row. */
export interface Operation {
  readonly operation: 'claim' | 'complete' | 'renew' | 'release' | 'get';
  readonly traced: boolean;
  readonly roundTrips: number;
  readonly result: unknown;
  readonly error?: { name?: string; message?: string };
  readonly trips: readonly Trip[];
  readonly key: string;
  /** The server's clock when it ran the operation (epoch ms). */
  readonly now: number;
  /** What it did, in the state machine's terms; null when the store could not be read around it. */
  readonly reading?: Reading | null;
  /** Reads only: whether the store holds a row under the key (null when the read failed). */
  readonly stored?: boolean | null;
}

export type ClaimValue = { kind: 'claimed' | 'existing'; record: ModelRecord };

export interface Info {
  readonly store: string;
  readonly scope: string;
  readonly pk: { pattern: string; example: string };
  readonly attributes: {
    source: string;
    fields: ReadonlyArray<{ name: string; type: string; storedAs: string; unit: string; meaning: string }>;
  };
  readonly operations: { claim: string; complete: string; renew: string; release: string; get: string };
  readonly expiringTtlMs: number;
}
