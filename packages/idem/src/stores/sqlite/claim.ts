/**
 * The SQLite claim: a plain read answers a refusal; otherwise one upsert, which SQLite runs under the database's
 * write lock, decides on the stored row. The races it closes are told in the comments below.
 */
import type { ClaimRequest, ClaimResult, IdempotencyRecord } from '../contract.js';
import { isClaimable, isTakeover } from '../contract.js';
import { toRecord } from './codec.js';
import type { SqliteCalls } from './send.js';
import type { Statements } from './statements.js';

/**
 * The claim's upsert over the quoted table `t`; its WHERE is `isClaimable` on the stored row, and, `pinned`, that
 * row's token being `@seen` (the version the claim read, so it knows what it replaces: a takeover or not).
 */
export function claimStatement(t: string, pinned = false): string {
  return `INSERT INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at",
        "lease_expires_at", "expires_at", "retryable", "result_id", "response_status", "response_headers", "response_body")
      VALUES (@pk, @scope, @key, 'in_progress', @fingerprint, @id, @token, @now, @leaseExpiresAt, @expiresAt, 0,
        NULL, NULL, NULL, NULL)
      ON CONFLICT ("pk") DO UPDATE SET
        "scope" = excluded."scope", "key" = excluded."key", "status" = 'in_progress',
        "fingerprint" = excluded."fingerprint",
        "id" = CASE WHEN ${t}."expires_at" > @now THEN ${t}."id" ELSE excluded."id" END,
        "token" = excluded."token", "claimed_at" = excluded."claimed_at",
        "lease_expires_at" = excluded."lease_expires_at", "expires_at" = excluded."expires_at",
        "retryable" = 0, "result_id" = NULL, "response_status" = NULL, "response_headers" = NULL,
        "response_body" = NULL
      WHERE (${t}."expires_at" <= @now
        OR (${t}."fingerprint" = excluded."fingerprint" AND (
          (${t}."status" = 'failed' AND ${t}."retryable" = 1)
          OR (${t}."status" = 'in_progress' AND ${t}."lease_expires_at" <= @now))))${pinned ? ` AND ${t}."token" IS @seen` : ''}
      RETURNING *`;
}

/** A claim whose upsert keeps meeting a row that has moved on by the time it is read gives up after this many. */
export const MAX_CLAIM_ATTEMPTS = 5;

const claimParams = (request: ClaimRequest) => ({
  pk: request.pk,
  scope: request.scope,
  key: request.key,
  fingerprint: request.fingerprint,
  id: request.id,
  token: request.token,
  now: request.now,
  leaseExpiresAt: request.now + request.leaseMs,
  expiresAt: request.now + request.ttlMs,
});

// `claim` (no transaction of the caller's): the upsert alone, in autocommit. One statement is atomic: SQLite takes
// the database's write lock for it (waiting up to busy_timeout), so the WHERE decides on the stored row with no
// other writer in between, and no BEGIN IMMEDIATE or COMMIT is needed around it. Two requests, one new key:
//   A: upsert → takes the write lock, inserts A's row, RETURNING yields it → 'claimed'; the lock goes at once.
//   B: upsert → waits for the lock, conflicts with A's row; A's live lease fails the WHERE: nothing written,
//      no row returned. B's SELECT (a plain read) → A's row, which refuses B → 'existing'.
// Between B's upsert and its read, A's row may move on (released, expired, failed retryably): a row the claim
// condition accepts, or none, means "decided on an older version", and B runs the upsert again (at most
// MAX_CLAIM_ATTEMPTS). Never a second winner: only an upsert, under the lock, writes.
// The upsert is pinned to the token of the row `refusal` read (or none), so the claim knows what it replaced (a
// takeover or not); a row that moved on since fails the pin and is read again, like any other older version.
export function claimAlone(calls: SqliteCalls, sql: Statements, request: ClaimRequest): ClaimResult {
  const params = claimParams(request);
  const read = (): IdempotencyRecord | null => {
    const row = calls.one(sql.get, { pk: request.pk });
    return row === undefined ? null : toRecord(row);
  };
  let seen = readBefore.get(request) ?? null;
  for (let attempt = 1; ; attempt++) {
    if (seen && !isClaimable(seen, request.fingerprint, request.now)) return { kind: 'existing', record: seen };
    const won = calls.one(sql.claimPinned, { ...params, seen: seen?.token ?? null });
    if (won) return { kind: 'claimed', record: toRecord(won), takeover: isTakeover(seen, request.now) };
    seen = read();
    if (attempt >= MAX_CLAIM_ATTEMPTS) {
      throw new Error(`sqlite claim of ${request.pk} did not settle after ${MAX_CLAIM_ATTEMPTS} upserts`);
    }
  }
}

// Inside a transaction (runLocal's `BEGIN IMMEDIATE`), the same upsert and read decide under a lock held
// throughout. The race it closes — two requests (two processes, or two connections) claim one key with no record:
//   A: BEGIN IMMEDIATE takes the database's write lock.
//   B: BEGIN IMMEDIATE waits for the lock (busy_timeout); it does not read a snapshot that could go stale.
//   A: the upsert inserts A's row and RETURNING yields it → 'claimed'; COMMIT releases the lock.
//   B: its upsert conflicts with A's row; A's live lease fails the WHERE, so nothing is written and RETURNING
//      yields no row; B's SELECT, still under the lock, reads A's row → 'existing'.
// Both decide on the row under one write lock, so there is never a second winner, and the loser gets the
// winner's record without another call. (A read-then-write would let both read "nothing", then both write.)
// The same holds for takeovers: the WHERE is `isClaimable` from src/core/record.ts, evaluated on the stored row.
export function claimer(calls: SqliteCalls, sql: Statements): (request: ClaimRequest) => ClaimResult {
  return (request: ClaimRequest): ClaimResult => {
    const won = calls.one(sql.claim, claimParams(request));
    if (won) return { kind: 'claimed', record: toRecord(won) };
    const existing = calls.one(sql.get, { pk: request.pk });
    // Unreachable under the write lock: the conflicting row cannot vanish between the two statements.
    if (!existing) throw new Error(`sqlite store: claim of ${request.pk} conflicted with a row that is gone`);
    return { kind: 'existing', record: toRecord(existing) };
  };
}

/**
 * A plain read, without the write lock: the record when it refuses the claim, else undefined. A refusal (a
 * replay, a mismatch, a live lease) is answered from it: a row that refuses the claim stops refusing only by
 * expiring or lapsing (judged at `now`) or by its owner's fenced write, so the answer holds at the moment of the
 * read. Anything else — no row, or a claimable one — goes to the upsert (`claimAlone`, or `claimer` inside
 * runLocal's transaction), which decides again on the row under the write lock.
 */
export function refusal(
  calls: SqliteCalls,
  sql: Statements,
  request: ClaimRequest,
): { kind: 'existing'; record: IdempotencyRecord } | undefined {
  const row = calls.one(sql.get, { pk: request.pk });
  const seen = row === undefined ? null : toRecord(row);
  if (seen) readBefore.set(request, seen);
  return seen && !isClaimable(seen, request.fingerprint, request.now) ? { kind: 'existing', record: seen } : undefined;
}

/** The row `refusal` read for a request, for the `claimAlone` of the same request to pin its upsert to. */
const readBefore = new WeakMap<ClaimRequest, IdempotencyRecord>();
