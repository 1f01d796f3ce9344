/**
 * The MySQL claim: one query of three statements (a reset of LAST_INSERT_ID, an upsert whose every assignment is guarded by the claim
 * condition, then a read of the row), sent again only when it was decided on an older version. The race it
 * closes is told in the comment on `claim`, below.
 */
import type { ClaimRequest, ClaimResult } from '../contract.js';
import { isClaimable } from '../contract.js';
import { bin, COLUMNS, toRecord, type Row } from './codec.js';
import type { MysqlQueryable } from './mysql-options.js';
import { checkLengths } from './schema.js';
import type { Run, Statement } from './statements.js';

/** A claim that keeps meeting deadlocks or a record changing under its read gives up after this many (fail closed). */
const MAX_CLAIM_ATTEMPTS = 5;
/** ER_LOCK_DEADLOCK: InnoDB chose this statement as a deadlock's victim and rolled it back whole. */
const ER_LOCK_DEADLOCK = 1213;

/**
 * The claim condition (`isClaimable`) over the stored row's columns, for the request's `:fingerprint` and `:now`.
 */
const CLAIMABLE = `(expires_at <= :now
    OR (fingerprint = :fingerprint
        AND ((status = 'failed' AND retryable)
             OR (status = 'in_progress' AND lease_expires_at <= :now))))`;

/** The claim's three statements over the quoted table `t`, with `:name` placeholders. */
export function claimSql(t: string): string {
  /** True in every assignment after `token`'s exactly when this statement claims the row (see `claim`). */
  const won = `(token = :token OR ${CLAIMABLE})`;
  const keep = (column: string, value: string) => `${column} = IF(${won}, ${value}, ${column})`;
  // LAST_INSERT_ID(expr) carries out of the upsert whether the row it claims was in progress (a takeover).
  return `DO LAST_INSERT_ID(0);
INSERT INTO ${t} (${COLUMNS})
VALUES (:pk, :scope, :key, 'in_progress', :fingerprint, :id, :token, :now, :leaseExpiresAt, :expiresAt, FALSE,
  NULL, NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
  token = IF(${CLAIMABLE} AND LAST_INSERT_ID(status = 'in_progress' AND expires_at > :now) >= 0, :token, token),
  ${keep('id', 'IF(expires_at > :now, id, :id)')},
  ${keep('scope', ':scope')}, ${keep('`key`', ':key')}, ${keep('status', `'in_progress'`)},
  ${keep('fingerprint', ':fingerprint')}, ${keep('claimed_at', ':now')},
  ${keep('lease_expires_at', ':leaseExpiresAt')}, ${keep('expires_at', ':expiresAt')},
  ${keep('retryable', 'FALSE')}, ${keep('result_id', 'NULL')}, ${keep('response_status', 'NULL')},
  ${keep('response_headers', 'NULL')}, ${keep('response_body', 'NULL')};
SELECT ${COLUMNS}, LAST_INSERT_ID() AS takeover FROM ${t} WHERE pk = :pk`;
}

// The claim is one atomic statement, INSERT … ON DUPLICATE KEY UPDATE, and a SELECT of the row in the same
// round trip. No row: the INSERT writes ours. A row: InnoDB takes its exclusive lock and the UPDATE decides on
// its latest committed version, under that lock, whatever the isolation level. Every assignment keeps the old
// value unless the row is claimable (`CLAIMABLE`, the contract's `isClaimable`). Assignments run left to right
// and see the columns already assigned, so the condition is decided once, by the first one: `token` becomes
// ours only if the row is claimable, and every later one asks `token = ours` (true only if this statement just
// wrote it: tokens are fresh on every claim). MariaDB's SIMULTANEOUS_ASSIGNMENT mode shows every assignment the
// old row instead, where the same condition repeated (`OR claimable`) decides the same way.
//
//   A: INSERT … ON DUPLICATE KEY UPDATE   no row: inserts, holds the new row's lock until its statement commits
//   B: INSERT … ON DUPLICATE KEY UPDATE   duplicate key: waits for A's lock, then reads A's committed claim:
//                                         live, so every column keeps A's value; B's token is never written
//   A: SELECT … WHERE pk                  token = A's: claimed
//   B: SELECT … WHERE pk                  token = A's: existing, A's record
//
// The SELECT runs after the upsert has committed (autocommit), so the row it reads may have moved on in between:
// A's record completed (B replays it, which is right), or released, lapsed or expired since (gone, or claimable
// again). Zero rows, or a row the claim condition accepts, means "decided on an older version": B runs the
// query again. Our token in the row means our upsert wrote it (tokens are fresh), so "claimed" is never wrong;
// had a takeover after our own lease replaced it before the SELECT, we would answer from the taker's row, as a
// refusal. A deadlock victim (ER_LOCK_DEADLOCK, its statement rolled back whole) runs the query again too.
export async function claim(
  run: Run,
  statement: Statement,
  request: ClaimRequest,
  pool: MysqlQueryable,
): Promise<ClaimResult> {
  const { pk, scope, key, fingerprint, id, token, now, leaseMs, ttlMs } = request;
  checkLengths({ pk, scope, key, fingerprint, id, token });
  const params = {
    pk: bin(pk),
    scope: bin(scope),
    key: bin(key),
    fingerprint: bin(fingerprint),
    id: bin(id),
    token: bin(token),
    now,
    leaseExpiresAt: now + leaseMs,
    expiresAt: now + ttlMs,
  };
  for (let attempt = 1; ; attempt++) {
    let results: unknown;
    try {
      results = await run('claim', pool, statement, params);
    } catch (error) {
      if (errno(error) === ER_LOCK_DEADLOCK && attempt < MAX_CLAIM_ATTEMPTS) continue;
      throw error;
    }
    const row = ((results as unknown[]).at(-1) as Row[] | undefined)?.[0];
    if (row) {
      const record = toRecord(row);
      if (record.token === token) return { kind: 'claimed', record, takeover: Number(row.takeover) === 1 };
      if (!isClaimable(record, fingerprint, now)) return { kind: 'existing', record };
    }
    if (attempt >= MAX_CLAIM_ATTEMPTS) {
      throw new Error(`mysql claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} queries`);
    }
  }
}

function errno(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? (error as { errno?: unknown }).errno : undefined;
}
