/**
 * @module Planted defects: copies of the SQLite store's wiring with one guard removed each, to prove the
 * simulator finds the double charge (or the broken invariant) each one allows. Never used outside the tests.
 *
 * - `read-then-write-claim`: the claim reads the record, yields, then writes unconditionally.
 * - `unfenced-complete`: the completion's UPDATE drops its token condition.
 * - `unfenced-renew`: the lease renewal's UPDATE drops its token condition.
 * - `fingerprint-blind-takeover`: the claim's takeover condition drops the fingerprint check.
 */
import { isClaimable, type ClaimRequest, type ClaimResult, type IdempotencyRecord } from 'idem';
import { claimedRecord } from '../../packages/idem/src/core/record.js';
import { prepared, type AnyStore, type Backend } from './backend.js';
import type { DefectName } from './scenario.js';

/** A store whose calls the scheduler runs one at a time, plus a way to schedule a raw backend call. */
export interface ScheduledStore extends AnyStore {
  /** `now`: the time the write decided on, for a write that may replace an expired record. */
  raw<T>(op: string, pk: string, exec: () => Promise<T>, now?: number): Promise<T>;
}

function sqlOf(backend: Backend): { database: NonNullable<Backend['database']>; t: string } {
  if (!backend.database) throw new Error('sim: planted defects are written in SQL; run them on the sqlite backend');
  return { database: backend.database, t: `"${backend.table}"` };
}

/**
 * Wraps the real store below the scheduler: the defective method runs as one atomic store call, like the
 * store's own would, only without its guard.
 *
 * @example
 * const store = lowerDefect('unfenced-complete', backend.storeFor(), backend)
 */
export function lowerDefect(defect: DefectName | undefined, real: AnyStore, backend: Backend): AnyStore {
  if (defect !== 'unfenced-complete' && defect !== 'unfenced-renew' && defect !== 'fingerprint-blind-takeover') return real;
  const { database, t } = sqlOf(backend);
  const store: AnyStore = Object.create(real) as AnyStore;

  if (defect === 'unfenced-complete') {
    // The real one says `AND "token" = @token`.
    const update = prepared(database, `UPDATE ${t} SET "status" = @status, "retryable" = @retryable,
      "result_id" = @resultId, "response_status" = @responseStatus, "response_headers" = @responseHeaders,
      "response_body" = @responseBody WHERE "pk" = @pk AND "status" = 'in_progress'`);
    const tx = database.transaction((params: Record<string, unknown>, effects: ((tx: unknown) => unknown) | undefined) => {
      if (update.run(params).changes === 0) return false;
      effects?.(database);
      return true;
    });
    return Object.assign(store, {
      complete: async ({ pk, outcome, effects }: Parameters<AnyStore['complete']>[0]) => ({
        ok: tx.immediate(
          {
            pk,
            status: outcome.status,
            retryable: outcome.retryable ? 1 : 0,
            resultId: outcome.resultId,
            responseStatus: outcome.response?.status ?? null,
            responseHeaders: outcome.response ? JSON.stringify(outcome.response.headers) : null,
            responseBody: outcome.response?.body ?? null,
          },
          effects,
        ),
      }),
    });
  }

  if (defect === 'unfenced-renew') {
    // The real one says `AND "token" = @token`.
    const update = prepared(database, 
      `UPDATE ${t} SET "lease_expires_at" = @leaseExpiresAt WHERE "pk" = @pk AND "status" = 'in_progress'`,
    );
    return Object.assign(store, {
      renew: async ({ pk, now, leaseMs }: Parameters<AnyStore['renew']>[0]) => ({
        ok: update.run({ pk, leaseExpiresAt: now + leaseMs }).changes === 1,
      }),
    });
  }

  // fingerprint-blind-takeover: the real claim's WHERE, minus `t.fingerprint = excluded.fingerprint AND (...)`.
  const upsert = prepared(database, `INSERT INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id", "token",
      "claimed_at", "lease_expires_at", "expires_at", "retryable", "result_id", "response_status", "response_headers",
      "response_body")
    VALUES (@pk, @scope, @key, 'in_progress', @fingerprint, @id, @token, @now, @leaseExpiresAt, @expiresAt, 0,
      NULL, NULL, NULL, NULL)
    ON CONFLICT ("pk") DO UPDATE SET
      "status" = 'in_progress', "fingerprint" = excluded."fingerprint",
      "id" = CASE WHEN ${t}."expires_at" > @now THEN ${t}."id" ELSE excluded."id" END,
      "token" = excluded."token", "claimed_at" = excluded."claimed_at",
      "lease_expires_at" = excluded."lease_expires_at", "expires_at" = excluded."expires_at",
      "retryable" = 0, "result_id" = NULL, "response_status" = NULL, "response_headers" = NULL, "response_body" = NULL
    WHERE ${t}."expires_at" <= @now
      OR (${t}."status" = 'failed' AND ${t}."retryable" = 1)
      OR (${t}."status" = 'in_progress' AND ${t}."lease_expires_at" <= @now)
    RETURNING "pk"`);
  return Object.assign(store, {
    claim: async (request: ClaimRequest): Promise<ClaimResult> => {
      const won = upsert.get({
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
      const record = (await real.get(request.pk)) as IdempotencyRecord;
      return { kind: won ? 'claimed' : 'existing', record };
    },
  });
}

/**
 * Wraps the scheduled store above the scheduler, for a defect that spans two store calls.
 *
 * @example
 * const store = upperDefect('read-then-write-claim', scheduled, backend)
 */
export function upperDefect(defect: DefectName | undefined, scheduled: ScheduledStore, backend: Backend): AnyStore {
  if (defect !== 'read-then-write-claim') return scheduled;
  const { database, t } = sqlOf(backend);
  const put = prepared(database, `INSERT OR REPLACE INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id",
      "token", "claimed_at", "lease_expires_at", "expires_at", "retryable", "result_id", "response_status",
      "response_headers", "response_body")
    VALUES (@pk, @scope, @key, @status, @fingerprint, @id, @token, @claimedAt, @leaseExpiresAt, @expiresAt, 0,
      NULL, NULL, NULL, NULL)`);
  const store: AnyStore = Object.create(scheduled) as AnyStore;
  return Object.assign(store, {
    // Two requests both read "nothing", both decide they won, and both write: the race a claim must close.
    claim: async (request: ClaimRequest): Promise<ClaimResult> => {
      const existing = await scheduled.get(request.pk);
      if (!isClaimable(existing, request.fingerprint, request.now)) {
        return { kind: 'existing', record: existing as IdempotencyRecord };
      }
      const record = claimedRecord(existing, request);
      const write = async (): Promise<void> => {
        put.run({
          pk: record.pk,
          scope: record.scope,
          key: record.key,
          status: record.status,
          fingerprint: record.fingerprint,
          id: record.id,
          token: record.token,
          claimedAt: record.claimedAt,
          leaseExpiresAt: record.leaseExpiresAt,
          expiresAt: record.expiresAt,
        });
      };
      await scheduled.raw('put', request.pk, write, request.now);
      return { kind: 'claimed', record };
    },
  });
}
