/**
 * @module What every store conformance case is given: a new store per case (closed after it), the scope and
 * request builder the cases claim with, a final success with a binary response, and the helpers that claim,
 * complete and compare records.
 */
import { afterEach, beforeEach, expect } from 'vitest';
import type {
  ClaimRequest,
  IdempotencyRecord,
  IdempotencyStore,
  Outcome,
  StoredResponse,
  WriteResult,
} from '../../core/record.js';
import { claimRequests } from '../fixtures.js';
import type { ConformanceOptions } from '../index.js';

export interface StoreKit<Tx> {
  /** The current case's store (a new one per case). */
  readonly store: IdempotencyStore<Tx>;
  /** The scope every request of {@link request} claims in. */
  readonly scope: string;
  readonly request: (overrides?: Partial<ClaimRequest>) => ClaimRequest;
  /** A final success whose response body is not valid UTF-8: the body is bytes, not text. */
  readonly succeeded: Outcome;
  /** Claims `req`, expecting it to be claimed, and answers the record. */
  readonly claimed: (req: ClaimRequest) => Promise<IdempotencyRecord>;
  /** Completes `req` a millisecond after its claim, with its own token unless `token` is given. */
  readonly complete: (req: ClaimRequest, outcome: Outcome, token?: string) => Promise<WriteResult>;
  /** The record with its response body as an array, for `toEqual`. */
  readonly plain: (record: IdempotencyRecord | null) => unknown;
  readonly refusedClaimTrips: number;
  readonly contendedClaimExtraTrips: number;
}

/** Registers the per-case set-up and tear-down in the current `describe`, and answers the kit the cases use. */
export function storeKit<Tx>({
  create,
  contendedClaimExtraTrips = 0,
  refusedClaimTrips = 1,
}: ConformanceOptions<Tx>): StoreKit<Tx> {
  let store: IdempotencyStore<Tx>;
  beforeEach(async () => {
    store = await create();
  });
  afterEach(async () => {
    await store.close();
  });

  const scope = 'acct_conformance';
  const response: StoredResponse = {
    status: 201,
    headers: [
      ['content-type', 'application/json'],
      ['location', '/v1/charges/ch_1'],
    ],
    body: new Uint8Array([0x7b, 0x7d, 0x00, 0xff, 0xfe, 0x0a]),
  };
  return {
    get store() {
      return store;
    },
    scope,
    request: claimRequests({ scope }),
    succeeded: { status: 'succeeded', retryable: false, resultId: 'ch_1', response },
    claimed: async (req) => {
      const result = await store.claim(req);
      expect(result.kind).toBe('claimed');
      return result.record;
    },
    complete: (req, outcome, token = req.token) => store.complete({ pk: req.pk, token, now: req.now + 1, outcome }),
    plain: (record) =>
      record && { ...record, response: record.response && { ...record.response, body: [...record.response.body] } },
    refusedClaimTrips,
    contendedClaimExtraTrips,
  };
}
