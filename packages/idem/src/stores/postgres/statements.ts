/** The statements the store sends (DDL aside: schema.ts), each text fixed per table. */
import type { RoundTrip } from '../contract.js';
import { claimStatement } from './claim.js';
import { COLUMNS } from './codec.js';
import type { PostgresQueryable, PostgresQueryResult } from './postgres-options.js';

/** The statements, built once per store with the table's quoted name. */
export function statements(t: string) {
  return {
    claim: claimStatement(t),
    complete: `UPDATE ${t} SET status = $3, retryable = $4, result_id = $5,
  response_status = $6, response_headers = $7::jsonb, response_body = $8
WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    // The same UPDATE, failing its transaction (22012) when it changes no row: runLocal may have sent COMMIT already.
    completeLocal: `WITH done AS (
  UPDATE ${t} SET status = $3, retryable = $4, result_id = $5,
    response_status = $6, response_headers = $7::jsonb, response_body = $8
  WHERE pk = $1 AND token = $2 AND status = 'in_progress'
  RETURNING 1
)
SELECT 1 / count(*) AS done FROM done`,
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max.
    renew: `UPDATE ${t} SET lease_expires_at = GREATEST(lease_expires_at, $3::bigint),
  expires_at = GREATEST(expires_at, $4::bigint) WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    release: `DELETE FROM ${t} WHERE pk = $1 AND token = $2 AND status = 'in_progress'`,
    get: `SELECT ${COLUMNS} FROM ${t} WHERE pk = $1`,
    sweep: `DELETE FROM ${t} WHERE pk IN (
  SELECT pk FROM ${t} WHERE expires_at <= $1::bigint ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
) AND expires_at <= $1::bigint`,
    list: `SELECT ${COLUMNS} FROM ${t} WHERE scope = $1 ORDER BY claimed_at DESC, pk LIMIT $2`,
  };
}

export type Statements = ReturnType<typeof statements>;

/** How the store's parts send a statement: counted, reported to `onRoundTrip`, prepared when configured. */
export type Query = (
  op: RoundTrip['op'],
  on: PostgresQueryable,
  text: string,
  values?: unknown[],
) => Promise<PostgresQueryResult>;
