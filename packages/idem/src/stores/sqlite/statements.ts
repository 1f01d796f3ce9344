/** The statements the store sends (DDL aside: schema.ts), their text fixed per table. */
import { claimStatement } from './claim.js';

export function statements(table: string) {
  const t = `"${table}"`;
  return {
    claim: claimStatement(t),
    claimPinned: claimStatement(t, true),
    get: `SELECT * FROM ${t} WHERE "pk" = @pk`,
    complete: `UPDATE ${t} SET "status" = @status, "retryable" = @retryable, "result_id" = @resultId,
        "response_status" = @responseStatus, "response_headers" = @responseHeaders, "response_body" = @responseBody
      WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max.
    renew: `UPDATE ${t} SET "lease_expires_at" = max("lease_expires_at", @leaseExpiresAt),
      "expires_at" = max("expires_at", @expiresAt) WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    release: `DELETE FROM ${t} WHERE "pk" = @pk AND "token" = @token AND "status" = 'in_progress'`,
    sweep: `DELETE FROM ${t} WHERE rowid IN (SELECT rowid FROM ${t} WHERE "expires_at" <= @now LIMIT @take)`,
    list: `SELECT * FROM ${t} WHERE "scope" = @scope ORDER BY "claimed_at" DESC, rowid DESC LIMIT @limit`,
  } as const;
}

export type Statements = ReturnType<typeof statements>;
