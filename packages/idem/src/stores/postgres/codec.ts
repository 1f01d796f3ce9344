/**
 * The row ↔ record conversion at the store's edge: `bigint` milliseconds (a string in `pg`) to numbers, `bytea`
 * to a plain Uint8Array, the headers as JSON text.
 */
import type { IdempotencyRecord, Outcome, RecordStatus, StoredResponse } from '../contract.js';
import { decodeHeaders, encodeHeaders } from '../shared/headers.js';

/** The columns every statement that returns rows selects, in the shape `toRecord` reads. */
export const COLUMNS =
  'pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, ' +
  'result_id, response_status, response_headers::text AS response_headers, response_body';

export type Row = Record<string, unknown>;

export function outcomeValues({ status, retryable, resultId, response }: Outcome): unknown[] {
  return [
    status,
    retryable,
    resultId,
    response?.status ?? null,
    response ? encodeHeaders(response.headers) : null,
    response ? Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength) : null,
  ];
}

/** Converts a row at the store's edge: `bigint` ms (a string in `pg`) to number, `bytea` to a plain Uint8Array. */
export function toRecord(row: Row): IdempotencyRecord {
  const response: StoredResponse | null =
    row.response_status === null || row.response_status === undefined
      ? null
      : {
          status: Number(row.response_status),
          headers: decodeHeaders(row.response_headers as string),
          body: toBytes(row.response_body),
        };
  return {
    pk: row.pk as string,
    scope: row.scope as string,
    key: row.key as string,
    status: row.status as RecordStatus,
    fingerprint: row.fingerprint as string,
    id: row.id as string,
    token: row.token as string,
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: row.retryable === true,
    resultId: (row.result_id as string | null) ?? null,
    response,
  };
}

export function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  // A driver without a bytea parser hands back the hex text form, `\x0a0b…`.
  if (typeof value === 'string' && value.startsWith('\\x')) return new Uint8Array(Buffer.from(value.slice(2), 'hex'));
  // Never replay a guess: a body the store cannot read is an error, not an empty response.
  throw new Error(`postgres store cannot read response_body of type ${typeof value}`);
}
