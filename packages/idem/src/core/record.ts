/**
 * @module The idempotency record and the store contract that persists it (docs/DESIGN.md: Record, State machine, Stores).
 */

/** `in_progress` → `succeeded` or `failed`. */
export type RecordStatus = 'in_progress' | 'succeeded' | 'failed';

/** A response frozen for replay: status, allow-listed headers (lower-case names), and the exact body bytes. */
export interface StoredResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Uint8Array;
}

/** One claimed key. Times are epoch milliseconds everywhere in code; stores convert at their edge only. */
export interface IdempotencyRecord {
  /** `IDEMPOTENCY#<scope>#<key>` — see `recordPk`. */
  readonly pk: string;
  readonly scope: string;
  readonly key: string;
  readonly status: RecordStatus;
  /** SHA-256 hex of the canonical request. */
  readonly fingerprint: string;
  /** Stable id: new on a fresh claim (or after expiry), kept through takeovers and retryable reclaims. */
  readonly id: string;
  /** Fencing token: fresh on every claim or takeover; every later write is conditional on it. */
  readonly token: string;
  readonly claimedAt: number;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
  /** Meaningful on `failed` only: may a retry run the work again? */
  readonly retryable: boolean;
  /** What the work produced, e.g. the charge id. */
  readonly resultId: string | null;
  readonly response: StoredResponse | null;
}

/** A claim: write `in_progress` with `token` unless a live record is in the way (docs/DESIGN.md: Claim). */
export interface ClaimRequest {
  readonly pk: string;
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  /** The new fencing token. */
  readonly token: string;
  /** The id to use if the claim is fresh (no record, or an expired one); a reclaim keeps the stored id. */
  readonly id: string;
  readonly now: number;
  readonly leaseMs: number;
  readonly ttlMs: number;
}

/** Contention is a result, never an exception: `existing` carries the record that won, read in the same trip. */
export type ClaimResult =
  | {
      readonly kind: 'claimed';
      readonly record: IdempotencyRecord;
      /**
       * True when this claim replaced an `in_progress` record whose lease had lapsed (its holder died or went
       * silent: the work's outcome is unknown); false for a new key, an expired record or a retryable failure.
       * Left out, the engine counts every claim that kept the stored `id` as a takeover (docs/DESIGN.md: Takeover policy).
       */
      readonly takeover?: boolean;
    }
  | { readonly kind: 'existing'; readonly record: IdempotencyRecord };

/** The terminal state to write. */
export interface Outcome {
  readonly status: 'succeeded' | 'failed';
  /** On `failed`: may a retry run the work again? */
  readonly retryable: boolean;
  readonly resultId: string | null;
  readonly response: StoredResponse | null;
}

/**
 * Completion, conditional on `token`. `effects`, when given, run inside the same transaction as the record's
 * update on stores that have one (the work's own writes and the completion commit together, or not at all).
 */
export interface CompleteRequest<Tx = never> {
  readonly pk: string;
  readonly token: string;
  readonly now: number;
  readonly outcome: Outcome;
  readonly effects?: ((tx: Tx) => unknown) | undefined;
}

export interface RenewRequest {
  readonly pk: string;
  readonly token: string;
  readonly now: number;
  readonly leaseMs: number;
  /**
   * The record's `expiresAt` after this renewal, set as given: never earlier than `now + leaseMs`, so a live
   * lease is never expired by TTL (a retry after the original `expiresAt` meets the running attempt, not an
   * absent record).
   */
  readonly expiresAt: number;
}

export interface ReleaseRequest {
  readonly pk: string;
  readonly token: string;
}

/**
 * The work of {@link IdempotencyStore.runLocal}, called in the claim's transaction (`tx`) with the record claimed:
 * the outcome to commit with its writes, or `null` (or a throw, rethrown) to roll everything back, the claim too.
 */
export type LocalTransactionWork<Tx> = (
  tx: Tx,
  record: IdempotencyRecord,
) => Outcome | null | PromiseLike<Outcome | null>;

/**
 * What a store's `runLocal` rejects with when the work itself left the transaction unable to commit (PostgreSQL:
 * it caught a failed statement of its own and answered anyway). Everything rolled back; the work's fault, not the
 * store's, so it is answered as the handler's error (500), not as an outage (503).
 */
export class LocalWorkAbortedError extends Error {
  override readonly name = 'LocalWorkAbortedError';
}

/** A claim, and the work to run in its transaction if it wins (carried in the request, as `effects` are). */
export interface LocalTransactionRequest<Tx = never> extends ClaimRequest {
  readonly work: LocalTransactionWork<Tx>;
}

/** What {@link IdempotencyStore.runLocal} did: committed (`record` as written), rolled back, or met `existing`. */
export type LocalTransactionResult =
  | { readonly kind: 'committed'; readonly record: IdempotencyRecord }
  | { readonly kind: 'rolled-back' }
  | { readonly kind: 'existing'; readonly record: IdempotencyRecord };

/** A conditional write's result: `ok: false` means the token no longer matched (or the record is gone). */
export interface WriteResult {
  readonly ok: boolean;
}

export interface SweepRequest {
  readonly now: number;
  /** Rows deleted per statement/batch. */
  readonly batchSize?: number;
  /** Stop after this many rows in total. */
  readonly limit?: number;
}

export interface ListRequest {
  readonly scope: string;
  readonly limit: number;
}

/**
 * One request to a store's backend, as sent and as answered: SQL text and parameters with the rows; a Lua
 * script's name, keys and arguments with the reply; a DynamoDB command's name and input with its output or its
 * error (e.g. `ConditionalCheckFailedException`). Stores report them to an `onRoundTrip` option, for the demo's
 * model page, debugging and metrics; `roundTrips` counts the same requests.
 */
export interface RoundTrip {
  readonly op: 'claim' | 'complete' | 'renew' | 'release' | 'get' | 'sweep' | 'list' | (string & {});
  readonly request: unknown;
  readonly response?: unknown;
  readonly error?: unknown;
}

/** The option every store accepts to observe its round trips. */
export interface RoundTripObserver {
  readonly onRoundTrip?: (trip: RoundTrip) => void;
}

/**
 * The store contract. Every write is conditional; contention is returned as a value. A store that cannot
 * reach its backend rejects with an error (the engine turns it into `STORE_UNAVAILABLE`).
 *
 * `roundTrips` counts requests to the backend since the store was created, so tests check the budget (docs/DESIGN.md: Round-trip budget).
 *
 * @example
 * const store: IdempotencyStore = memoryStore()
 * const result = await store.claim({ pk, scope, key, fingerprint, token, id, now: Date.now(), leaseMs, ttlMs })
 */
export interface IdempotencyStore<Tx = never> {
  /** A short name for logs and metrics, e.g. `sqlite`. */
  readonly name: string;
  readonly roundTrips: number;
  /**
   * The largest response this store can hold, in bytes: body plus header names and values. The HTTP layer answers
   * (and stores) a larger one as the final `response-too-large` problem. Undefined: no limit of the store's own.
   */
  readonly maxResponseBytes?: number;
  /**
   * `false`: `complete` refuses `effects` (no transaction holds them with the record), and the HTTP layer's
   * `declare({ effects })` throws at once, before the handler returns. Undefined: effects are accepted.
   */
  readonly acceptsEffects?: boolean;
  /**
   * Claims when: no record; or `expiresAt <= now`; or, with the same fingerprint only, `failed` + `retryable`,
   * or `in_progress` with `leaseExpiresAt <= now`. Writes `in_progress`, the new token, `claimedAt = now`,
   * `leaseExpiresAt = now + leaseMs`, `expiresAt = now + ttlMs`, clears outcome fields, and keeps the stored
   * `id` unless the record was absent or expired.
   */
  claim(request: ClaimRequest): Promise<ClaimResult>;
  /** `in_progress` with this token → the outcome. Otherwise nothing changes and `ok` is false. */
  complete(request: CompleteRequest<Tx>): Promise<WriteResult>;
  /** Extends the lease of an `in_progress` record held with this token. */
  renew(request: RenewRequest): Promise<WriteResult>;
  /** Deletes an `in_progress` record held with this token, freeing the key (e.g. the work declined to run). */
  release(request: ReleaseRequest): Promise<WriteResult>;
  /** The stored record, expired or not, or null. */
  get(pk: string): Promise<IdempotencyRecord | null>;
  /**
   * Optional (SQL stores whose transactions can hold the work's writes): database-local work in ONE transaction.
   * Claims exactly as `claim` does, but inside a transaction; if the claim wins, runs `request.work` on that
   * transaction, writes the outcome it returns with the `complete` statement (fenced by `token`), and commits:
   * the claim, the work's writes and the completion land together or not at all. Nothing of the claim is
   * visible to anyone before the commit; a concurrent claim of the key waits for the transaction to end (on the
   * key's row, or the database's write lock), then sees the committed record — or, after a rollback, the key as
   * it was. A refusal writes nothing and returns `existing`. Stores without it do not offer local mode.
   */
  runLocal?(request: LocalTransactionRequest<Tx>): Promise<LocalTransactionResult>;
  /**
   * How `runLocal` takes its work: `'async'` — it may await while the transaction waits (PostgreSQL), so an HTTP
   * route can run its handler inside (the `local` option); `'sync'` — it must return at once (SQLite).
   */
  readonly localWork?: 'sync' | 'async';
  /** Deletes records with `expiresAt <= now`; returns how many. Stores with native expiry may return 0. */
  sweep(request: SweepRequest): Promise<number>;
  /** A scope's records, newest claim first (for operators and the demo). */
  list(request: ListRequest): Promise<IdempotencyRecord[]>;
  close(): Promise<void>;
}

/**
 * The claim condition (docs/DESIGN.md: Claim), as a predicate over the stored record. Stores that decide in-process
 * (memory, SQLite) call it; the others encode the same logic in their own condition language.
 */
export function isClaimable(existing: IdempotencyRecord | null, fingerprint: string, now: number): boolean {
  if (existing === null || existing.expiresAt <= now) return true;
  if (existing.fingerprint !== fingerprint) return false;
  if (existing.status === 'failed') return existing.retryable;
  return existing.status === 'in_progress' && existing.leaseExpiresAt <= now;
}

/**
 * Whether a claim over `existing` is a takeover (docs/DESIGN.md: Takeover policy): it replaces an `in_progress`
 * record that has not expired, i.e. one whose lease lapsed with the work's outcome unknown.
 */
export function isTakeover(existing: IdempotencyRecord | null, now: number): boolean {
  return existing !== null && existing.status === 'in_progress' && existing.expiresAt > now;
}

/** The record a successful claim writes (shared by stores that build it in-process). */
export function claimedRecord(existing: IdempotencyRecord | null, request: ClaimRequest): IdempotencyRecord {
  const keepId = existing !== null && existing.expiresAt > request.now;
  return {
    pk: request.pk,
    scope: request.scope,
    key: request.key,
    status: 'in_progress',
    fingerprint: request.fingerprint,
    id: keepId ? existing.id : request.id,
    token: request.token,
    claimedAt: request.now,
    leaseExpiresAt: request.now + request.leaseMs,
    expiresAt: request.now + request.ttlMs,
    retryable: false,
    resultId: null,
    response: null,
  };
}
