/**
 * @module What `/v1/model/*` answers, as the model page reads it. The readings' types are the server's own
 * (apps/demo/src/model-reading.ts), imported as types only.
 */
import type { ModelState, Reading, TransitionName } from '../../src/model-reading.js';

export type { ModelState, Reading, TransitionName };

export interface Trip {
  readonly op: string;
  readonly request: unknown;
  readonly response?: unknown;
  readonly error?: unknown;
}

export interface ModelRecord {
  readonly pk: string;
  readonly key: string;
  readonly status: 'in_progress' | 'succeeded' | 'failed';
  readonly fingerprint: string;
  readonly id: string;
  readonly token: string;
  readonly claimedAt: number;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
  readonly retryable: boolean | null;
  readonly resultId: string | null;
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

/** What refused a losing claim, as `/v1/model/race` reports it. */
export interface Refusal {
  readonly trip: number;
  readonly statement: number | null;
  /** What refused the loser: a conditional write's condition, a pre-read, or one in-process step (memory). */
  readonly by: 'write' | 'read' | 'step';
  readonly text: string;
  readonly condition: string | null;
}

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
