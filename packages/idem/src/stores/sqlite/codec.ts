/** The row ↔ record conversion at the store's edge: integers (or bigints) to numbers, a BLOB to a plain Uint8Array. */
import type { IdempotencyRecord, Outcome } from '../contract.js';
import { decodeHeaders, encodeHeaders } from '../shared/headers.js';

/** A row as SQLite returns it (integers may be bigints if the database was set to safe integers). */
export interface Row extends Pick<
  IdempotencyRecord,
  'pk' | 'scope' | 'key' | 'status' | 'fingerprint' | 'id' | 'token'
> {
  readonly claimed_at: number | bigint;
  readonly lease_expires_at: number | bigint;
  readonly expires_at: number | bigint;
  readonly retryable: number | bigint;
  readonly result_id: string | null;
  readonly response_status: number | bigint | null;
  readonly response_headers: string | null;
  readonly response_body: Uint8Array | null;
}

export function toRecord(row: Row): IdempotencyRecord {
  return {
    pk: row.pk,
    scope: row.scope,
    key: row.key,
    status: row.status,
    fingerprint: row.fingerprint,
    id: row.id,
    token: row.token,
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: Number(row.retryable) === 1,
    resultId: row.result_id,
    response:
      row.response_status === null
        ? null
        : {
            status: Number(row.response_status),
            headers: decodeHeaders(row.response_headers ?? '[]'),
            // A copy, as a plain Uint8Array (the driver returns a Buffer).
            body: new Uint8Array(row.response_body ?? []),
          },
  };
}

/** The fenced completion's parameters. */
export function outcomeParams(pk: string, token: string, outcome: Outcome): Record<string, unknown> {
  return {
    pk,
    token,
    status: outcome.status,
    retryable: outcome.retryable ? 1 : 0,
    resultId: outcome.resultId,
    responseStatus: outcome.response?.status ?? null,
    responseHeaders: outcome.response ? encodeHeaders(outcome.response.headers) : null,
    responseBody: outcome.response?.body ?? null,
  };
}
