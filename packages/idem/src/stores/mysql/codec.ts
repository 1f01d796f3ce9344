/**
 * The row ↔ record conversion at the store's edge: text as `VARBINARY` UTF-8 bytes, `BIGINT` milliseconds to
 * numbers, `LONGBLOB` to a plain Uint8Array, the headers as JSON bytes.
 */
import type { IdempotencyRecord, Outcome, RecordStatus, StoredResponse } from '../contract.js';
import { decodeHeaders, encodeHeaders } from '../shared/headers.js';
import type { MysqlValue } from './mysql-options.js';

/** The columns every statement that returns rows selects, in the order of the table. */
export const COLUMNS =
  'pk, scope, `key`, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at, retryable, ' +
  'result_id, response_status, response_headers, response_body';

export type Row = Record<string, unknown>;

export function outcomeParams({ status, retryable, resultId, response }: Outcome): Record<string, MysqlValue> {
  return {
    status,
    retryable: retryable ? 1 : 0,
    resultId: resultId === null ? null : bin(resultId),
    responseStatus: response?.status ?? null,
    responseHeaders: response ? bin(encodeHeaders(response.headers)) : null,
    responseBody: response
      ? Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength)
      : null,
  };
}

/** Text for a VARBINARY column, as UTF-8 bytes: exact whatever the connection's character set. */
export function bin(text: string): Buffer {
  return Buffer.from(text, 'utf8');
}

/** A VARBINARY column back to text (a pool with its own `typeCast` may already have made it a string). */
export function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (typeof value === 'string') return value;
  throw new Error(`mysql store cannot read a text column of type ${typeof value}`);
}

/** `affectedRows` of a write: rows matched, with mysql2's default `FOUND_ROWS` flag. */
export function affected(result: unknown): number {
  return Number((result as { affectedRows?: unknown }).affectedRows ?? 0);
}

/** Converts a row at the store's edge: `VARBINARY` to text, `BIGINT` ms to number, `LONGBLOB` to a plain Uint8Array. */
export function toRecord(row: Row): IdempotencyRecord {
  const response: StoredResponse | null =
    row.response_status === null || row.response_status === undefined
      ? null
      : {
          status: Number(row.response_status),
          headers: decodeHeaders(text(row.response_headers)),
          body: toBytes(row.response_body),
        };
  return {
    pk: text(row.pk),
    scope: text(row.scope),
    key: text(row.key),
    status: row.status as RecordStatus,
    fingerprint: text(row.fingerprint),
    id: text(row.id),
    token: text(row.token),
    claimedAt: Number(row.claimed_at),
    leaseExpiresAt: Number(row.lease_expires_at),
    expiresAt: Number(row.expires_at),
    retryable: Number(row.retryable) === 1,
    resultId: row.result_id === null || row.result_id === undefined ? null : text(row.result_id),
    response,
  };
}

export function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  // Never replay a guess: a body the store cannot read is an error, not an empty response.
  throw new Error(`mysql store cannot read response_body of type ${typeof value}`);
}
