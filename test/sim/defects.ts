/**
 * @module Planted defects: copies of a store's or the engine's wiring with one guard removed each, to prove the
 * simulator finds the broken invariant each one allows. Never used outside the tests.
 *
 * In the SQLite store's SQL:
 * - `read-then-write-claim`: the claim reads the record, yields, then writes unconditionally.
 * - `unfenced-complete`: the completion's UPDATE drops its token condition.
 * - `unfenced-renew`: the lease renewal's UPDATE drops its token condition.
 * - `fingerprint-blind-takeover`: the claim's takeover condition drops the fingerprint check.
 *
 * In a copy of the memory store (src/stores/memory), one line changed each:
 * - `memory-yielding-claim`: the claim reads, yields once (`await`), then writes.
 * - `claim-ignores-expiry`: the claim condition lacks `expiresAt <= now`.
 * - `renew-ignores-expiry`: a renewal extends the lease but not `expiresAt`, so TTL can expire a live lease.
 *
 * At the engine's edges (between the engine and the store, or in what the handler hands the engine):
 * - `retryable-503-as-final`: a 503 is recorded as a final failure (as a `classifyStatus` that said so would).
 * - `renewal-never-started`: no renewal reaches the store.
 * - `effects-with-retryable`: the work's effects commit with a retryable outcome.
 * - `success-without-record`: a refused completion is reported as written, so the engine answers anyway.
 *
 * In how the engine or its binding keeps time (each removes one guard of docs/DESIGN.md: Lease):
 * - `renewals-chained-without-timeout`: a lease's renewal is not sent until the previous one has answered, so a
 *   renewal that never answers holds back every later one (the engine still gives each up on its own clock).
 * - `no-local-deadline`: the holder counts a renewal as confirmed when it sends it, so it never reaches its own
 *   deadline; it stops only when the store refuses a renewal.
 * - `early-answer-records-retryable`: when a timeout middleware has answered 503 while the handler runs, the
 *   binding completes the lease `failed`, retryable, instead of abandoning it: a retry reclaims the key at once.
 * - `abandoned-stream-held-forever`: when the client leaves while the answer streams, the binding neither abandons
 *   the lease nor lets `maxHoldMs` end it: a stream that never ends holds the key for ever.
 * - `store-call-without-timeout`: the engine waits for a store call however long it takes (`storeTimeoutMs`
 *   out of reach); renewals keep their own bound (the time the lease has left).
 */
import {
  isClaimable,
  type ClaimRequest,
  type ClaimResult,
  type EngineOptions,
  type IdempotencyRecord,
  type IdempotencyStore,
  type Lease,
  type Settlement,
  type StoredResponse,
} from 'idem';
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
  if (defect !== 'unfenced-complete' && defect !== 'unfenced-renew' && defect !== 'fingerprint-blind-takeover')
    return real;
  const { database, t } = sqlOf(backend);
  // The real store keeps private fields: its own methods run on it, bound, and the defect's replace one of them.
  const overlay = (overrides: Partial<AnyStore>): AnyStore =>
    new Proxy(real, {
      get: (target, property) => {
        if (Object.hasOwn(overrides, property)) return overrides[property as keyof AnyStore];
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });

  if (defect === 'unfenced-complete') {
    // The real one says `AND "token" = @token`.
    const update = prepared(
      database,
      `UPDATE ${t} SET "status" = @status, "retryable" = @retryable,
      "result_id" = @resultId, "response_status" = @responseStatus, "response_headers" = @responseHeaders,
      "response_body" = @responseBody WHERE "pk" = @pk AND "status" = 'in_progress'`,
    );
    const tx = database.transaction(
      (params: Record<string, unknown>, effects: ((tx: unknown) => unknown) | undefined) => {
        if (update.run(params).changes === 0) return false;
        effects?.(database);
        return true;
      },
    );
    return overlay({
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
    const update = prepared(
      database,
      `UPDATE ${t} SET "lease_expires_at" = @leaseExpiresAt, "expires_at" = @expiresAt WHERE "pk" = @pk AND "status" = 'in_progress'`,
    );
    return overlay({
      renew: async ({ pk, now, leaseMs, expiresAt }: Parameters<AnyStore['renew']>[0]) => ({
        ok: update.run({ pk, leaseExpiresAt: now + leaseMs, expiresAt }).changes === 1,
      }),
    });
  }

  // fingerprint-blind-takeover: the real claim's WHERE, minus `t.fingerprint = excluded.fingerprint AND (...)`.
  const upsert = prepared(
    database,
    `INSERT INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id", "token",
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
    RETURNING "pk"`,
  );
  return overlay({
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
 * Wraps the scheduled store above the scheduler, between it and the engine: for a defect that spans two store
 * calls, or one in what the engine sends or believes. `effects()`: the effects the current request's handler
 * last returned.
 *
 * @example
 * const store = upperDefect('read-then-write-claim', scheduled, backend, () => undefined)
 */
export function upperDefect(
  defect: DefectName | undefined,
  scheduled: ScheduledStore,
  backend: Backend,
  effects: () => ((tx: unknown) => unknown) | undefined,
): AnyStore {
  if (defect === 'renewals-chained-without-timeout') {
    // One renewal in flight per lease: the next waits for the previous one's answer, however long it takes.
    const previous = new Map<string, Promise<unknown>>();
    return Object.assign(Object.create(scheduled) as AnyStore, {
      renew: (request: Parameters<AnyStore['renew']>[0]) => {
        const sent = (previous.get(request.token) ?? Promise.resolve()).then(() => scheduled.renew(request));
        previous.set(
          request.token,
          sent.catch(() => undefined),
        );
        return sent;
      },
    });
  }
  if (defect === 'no-local-deadline') {
    // Confirmed when sent: the holder's deadline moves with every renewal it sends. A refusal the store gave is
    // told at the next renewal: the holder stops only when the store says it lost.
    const refused = new Set<string>();
    return Object.assign(Object.create(scheduled) as AnyStore, {
      renew: async (request: Parameters<AnyStore['renew']>[0]) => {
        scheduled.renew(request).then(
          (written) => {
            if (!written.ok) refused.add(request.token);
          },
          () => undefined,
        );
        return { ok: !refused.has(request.token) };
      },
    });
  }
  if (defect === 'renewal-never-started') {
    // The engine's renewals never leave it: as if its timer were never set.
    return Object.assign(Object.create(scheduled) as AnyStore, { renew: async () => ({ ok: true }) });
  }
  if (defect === 'success-without-record') {
    // A refused (stale) completion reported as written: the engine answers with an outcome no record holds.
    return Object.assign(Object.create(scheduled) as AnyStore, {
      complete: async (request: Parameters<AnyStore['complete']>[0]) => {
        await scheduled.complete(request);
        return { ok: true };
      },
    });
  }
  if (defect === 'effects-with-retryable') {
    // The engine hands the store the work's effects whatever the outcome: a retryable one commits them too.
    return Object.assign(Object.create(scheduled) as AnyStore, {
      complete: async (request: Parameters<AnyStore['complete']>[0]) =>
        scheduled.complete(
          request.effects === undefined && effects() !== undefined ? { ...request, effects: effects() } : request,
        ),
    });
  }
  if (defect !== 'read-then-write-claim') return scheduled;
  const { database, t } = sqlOf(backend);
  const put = prepared(
    database,
    `INSERT OR REPLACE INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id",
      "token", "claimed_at", "lease_expires_at", "expires_at", "retryable", "result_id", "response_status",
      "response_headers", "response_body")
    VALUES (@pk, @scope, @key, @status, @fingerprint, @id, @token, @claimedAt, @leaseExpiresAt, @expiresAt, 0,
      NULL, NULL, NULL, NULL)`,
  );
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

/**
 * The memory store of src/stores/memory, copied, with one line changed for a memory defect (none: the copy as it
 * is). Records live in one Map shared by every process, as the real store's are; every method reads the Map
 * when it is called, as the real store's do (the simulator relies on it to see a record before and after a call).
 *
 * @example
 * const store = defectiveMemoryStore('memory-yielding-claim')
 */
export function defectiveMemoryStore(defect: DefectName | undefined): IdempotencyStore<undefined> {
  const records = new Map<string, IdempotencyRecord>();
  let roundTrips = 0;
  const claimable =
    defect === 'claim-ignores-expiry'
      ? // isClaimable without `existing.expiresAt <= now`:
        (existing: IdempotencyRecord | null, fingerprint: string, now: number): boolean => {
          if (existing === null) return true;
          if (existing.fingerprint !== fingerprint) return false;
          if (existing.status === 'failed') return existing.retryable;
          return existing.status === 'in_progress' && existing.leaseExpiresAt <= now;
        }
      : isClaimable;
  const held = (pk: string, token: string): IdempotencyRecord | undefined => {
    const record = records.get(pk);
    return record && record.status === 'in_progress' && record.token === token ? record : undefined;
  };
  return {
    name: `memory (${defect ?? 'copy'})`,
    get roundTrips() {
      return roundTrips;
    },
    async claim(request) {
      roundTrips++;
      const existing = records.get(request.pk) ?? null;
      if (!claimable(existing, request.fingerprint, request.now))
        return { kind: 'existing', record: existing as IdempotencyRecord };
      if (defect === 'memory-yielding-claim') await Promise.resolve(); // the planted yield between read and write
      const record = claimedRecord(existing, request);
      records.set(request.pk, record);
      return { kind: 'claimed', record };
    },
    async complete({ pk, token, outcome, effects }) {
      roundTrips++;
      const record = held(pk, token);
      if (!record) return { ok: false };
      if (effects) effects(undefined);
      records.set(pk, { ...record, ...outcome });
      return { ok: true };
    },
    async renew({ pk, token, now, leaseMs, expiresAt }) {
      roundTrips++;
      const record = held(pk, token);
      if (!record) return { ok: false };
      records.set(pk, {
        ...record,
        leaseExpiresAt: now + leaseMs,
        ...(defect === 'renew-ignores-expiry' ? {} : { expiresAt }),
      });
      return { ok: true };
    },
    async release({ pk, token }) {
      roundTrips++;
      if (!held(pk, token)) return { ok: false };
      records.delete(pk);
      return { ok: true };
    },
    async get(pk) {
      roundTrips++;
      return records.get(pk) ?? null;
    },
    async sweep() {
      return 0;
    },
    async list() {
      return [];
    },
    async close() {},
  };
}

/** A store timeout or a hold no run reaches (the longest timer, 24.8 days): the guard is there, but never fires. */
const NEVER_MS = 2 ** 31 - 1;

/**
 * The engine options a planted defect overrides.
 *
 * @example
 * createEngine({ store, ...engineDefect('store-call-without-timeout') })
 */
export function engineDefect(defect: DefectName | undefined): Pick<EngineOptions, 'storeTimeoutMs' | 'maxHoldMs'> {
  if (defect === 'store-call-without-timeout') return { storeTimeoutMs: NEVER_MS };
  if (defect === 'abandoned-stream-held-forever') return { maxHoldMs: NEVER_MS };
  return {};
}

/**
 * What a binding (an HTTP adapter) does with its lease when the answer leaves its hands early. Each returns the
 * settlement it started, or undefined if it settled nothing (the lease is still renewed).
 */
export interface BindingWiring {
  /** A middleware answered the client (`response`, retryable) while the handler may still run. */
  answeredEarly(lease: Lease<unknown>, response: StoredResponse): Promise<Settlement> | undefined;
  /** The client left while the answer streamed to it; the stream may or may not end. */
  clientGone(lease: Lease<unknown>): Promise<Settlement> | undefined;
}

/**
 * The binding's wiring: `abandon()` in both cases (docs/DESIGN.md: Lease), or a planted defect's.
 *
 * @example
 * const settling = bindingWiring(undefined).clientGone(lease) // lease.abandon()
 */
export function bindingWiring(defect: DefectName | undefined): BindingWiring {
  return {
    answeredEarly: (lease, response) =>
      defect === 'early-answer-records-retryable'
        ? lease.complete({ response, outcome: 'failed-retryable' })
        : lease.abandon(),
    clientGone: (lease) => (defect === 'abandoned-stream-held-forever' ? undefined : lease.abandon()),
  };
}
