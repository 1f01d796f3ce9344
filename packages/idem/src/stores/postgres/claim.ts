/**
 * The PostgreSQL claim: one statement (an upsert guarded by the claim condition), sent again only when the
 * statement's snapshot was stale. The race it closes is told in the comment on `claim`, below.
 */
import type { ClaimRequest, ClaimResult } from '../contract.js';
import { isClaimable } from '../contract.js';
import { COLUMNS, toRecord, type Row } from './codec.js';
import type { PostgresQueryable } from './postgres-options.js';
import type { Query } from './statements.js';

/** A claim that keeps meeting a concurrent insert or delete gives up after this many statements (fail closed). */
export const MAX_CLAIM_ATTEMPTS = 5;

/**
 * The claim condition (`isClaimable`) over `row`'s columns, for the request's fingerprint `$4` and now `$7`. The
 * claim statement uses it twice, on its snapshot's row and in the DO UPDATE, so the two cannot drift apart.
 */
function claimable(row: string): string {
  return `${row}.expires_at <= $7::bigint
     OR (${row}.fingerprint = $4
         AND ((${row}.status = 'failed' AND ${row}.retryable)
              OR (${row}.status = 'in_progress' AND ${row}.lease_expires_at <= $7::bigint)))`;
}

/** The claim statement over the quoted table `t`: `$1`… are {@link claimValues}. */
export function claimStatement(t: string): string {
  return `WITH cur AS (
  SELECT ${COLUMNS} FROM ${t} WHERE pk = $1
), ins AS (
  INSERT INTO ${t} AS r (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at, expires_at,
    retryable, result_id, response_status, response_headers, response_body)
  SELECT $1, $2, $3, 'in_progress', $4, $5, $6, $7::bigint, $8::bigint, $9::bigint, false, NULL, NULL, NULL, NULL
  WHERE NOT EXISTS (SELECT 1 FROM cur WHERE NOT (${claimable('cur')}))
  ON CONFLICT (pk) DO UPDATE SET
    scope = EXCLUDED.scope, key = EXCLUDED.key, status = 'in_progress', fingerprint = EXCLUDED.fingerprint,
    id = CASE WHEN r.expires_at > $7::bigint THEN r.id ELSE EXCLUDED.id END,
    token = EXCLUDED.token, claimed_at = EXCLUDED.claimed_at, lease_expires_at = EXCLUDED.lease_expires_at,
    expires_at = EXCLUDED.expires_at, retryable = false, result_id = NULL,
    response_status = NULL, response_headers = NULL, response_body = NULL
  WHERE (${claimable('r')}) AND r.token IS NOT DISTINCT FROM (SELECT token FROM cur)
  RETURNING ${COLUMNS}
)
SELECT *, true AS claimed,
  EXISTS (SELECT 1 FROM cur WHERE status = 'in_progress' AND expires_at > $7::bigint) AS takeover FROM ins
UNION ALL
SELECT *, false AS claimed, false AS takeover FROM cur WHERE NOT EXISTS (SELECT 1 FROM ins)`;
}

/** The claim statement's parameters, in order. */
export function claimValues({ pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs }: ClaimRequest): unknown[] {
  return [pk, scope, key, fingerprint, id, token, now, now + leaseMs, now + ttlMs];
}

// The claim is one statement. `cur` reads the row in the statement's snapshot; if that row refuses the claim
// (a replay, a mismatch, a live lease), the INSERT gets no source row, so the refusal locks and writes nothing
// (no transaction id, no row lock) and returns `cur` with claimed = false. Otherwise the upsert runs, and its
// DO UPDATE checks the same condition again on the latest committed version of the row, under the row's lock.
//
// READ COMMITTED leaves one gap: B's snapshot shows no row, or a claimable one (expired, a retryable failure, a
// dead lease), while A inserts or claims that row. B's INSERT waits for A, then meets A's live claim: the DO
// UPDATE condition is false, `ins` is empty, and `cur` is B's stale view (nothing, or a claimable version). So
// zero rows, or a row the claim condition accepts, means "stale snapshot": B runs the statement again (one more
// round trip, a new snapshot) and sees A's row, or claims if A has released it since. Under a REPEATABLE READ
// or SERIALIZABLE default the same race raises 40001 instead, retried the same way.
//
// The DO UPDATE is pinned to `cur`'s token, so `cur` is the version replaced and `takeover` is exact; a row that
// moved on since the snapshot is the stale case above.
//
// `wrote` (claimBarrier only) runs after a claim that wrote, before it returns.
export async function claim(
  query: Query,
  text: string,
  request: ClaimRequest,
  on: PostgresQueryable,
  wrote?: () => Promise<void>,
): Promise<ClaimResult> {
  const { pk, fingerprint, now } = request;
  const values = claimValues(request);
  for (let attempt = 1; ; attempt++) {
    let rows: readonly unknown[];
    try {
      ({ rows } = await query('claim', on, text, values));
    } catch (error) {
      if (sqlState(error) === '40001' && attempt < MAX_CLAIM_ATTEMPTS) continue;
      throw error;
    }
    const row = rows[0] as Row | undefined;
    if (row) {
      const record = toRecord(row);
      if (row.claimed === true) {
        await wrote?.();
        return { kind: 'claimed', record, takeover: row.takeover === true };
      }
      if (!isClaimable(record, fingerprint, now)) return { kind: 'existing', record };
    }
    if (attempt >= MAX_CLAIM_ATTEMPTS) {
      throw new Error(`postgres claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} statements`);
    }
  }
}

/** `claimBarrier` only: polls until another backend waits on this transaction's uncommitted row (bounded). */
export async function heldUntilWaitedOn(query: Query, client: PostgresQueryable): Promise<void> {
  const waiting =
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))';
  for (let poll = 0; poll < 200; poll++) {
    const { rows } = await query('claim', client, waiting);
    if (((rows[0] as { n?: number } | undefined)?.n ?? 0) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

export function sqlState(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
}
