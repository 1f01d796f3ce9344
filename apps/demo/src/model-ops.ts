/**
 * @module The model page's operations on the running store: the contract's claim, complete, renew, release and get,
 * each run for real with the round trips it took, and read in the state machine's terms ({@link Reading}) from the
 * store's answer and the row read just before and just after it (those reads are not counted in its trips).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { ClaimRequest, IdempotencyRecord, IdempotencyStore, Outcome } from 'idem';
import { fingerprint, recordPk } from 'idem';
import { readClaim, readComplete, readGet, readRelease, readRenew, type Reading } from './model-reading.js';
import { modelRecord, present, runOn, type RunResult, type TripRecorder } from './model-trips.js';

export interface ModelOptions {
  readonly store: IdempotencyStore<never> | IdempotencyStore<unknown>;
  readonly trips: TripRecorder;
  /** The records' TTL for claims that do not ask for a short one. */
  readonly ttlMs: number;
  /** The clock, epoch ms. Default `Date.now`. */
  readonly now?: () => number;
}

/** Model claims hold their lease long enough to press "Record the outcome" by hand (never past half the TTL). */
export const MODEL_LEASE_MS = 60_000;
/** The shortest lease or TTL a model claim may ask for. */
export const MIN_MODEL_MS = 1_000;
/** The expiry demonstration's TTL (long enough to read its output, short enough to wait out) and its lease. */
export const EXPIRING_TTL_MS = 10_000;
const EXPIRING_LEASE_MS = 5_000;
/** The seeded in_progress row keeps its lease for an hour (never past half the TTL): it stays "in progress". */
const SEED_LEASE_MS = 3_600_000;

/** The lab's $500 charge: the model's claims carry the same fingerprint a real charge request would. */
const CHARGE_FINGERPRINT = fingerprint({
  method: 'POST',
  path: '/v1/charges',
  contentType: 'application/json',
  body: new TextEncoder().encode('{"amount":50000,"currency":"usd","source":"tok_visa"}'),
});

export type OutcomeKind = 'succeeded' | 'failed-final' | 'failed-retryable';

const SEEDS = [
  { key: 'seed-succeeded', state: 'succeeded' },
  { key: 'seed-failed', state: 'failed-final' },
  { key: 'seed-failed-retryable', state: 'failed-retryable' },
  { key: 'seed-in-progress', state: 'in_progress' },
] as const;

/**
 * The outcome the page's "Record the outcome" writes: a $500 charge (201), a declined card (402, final) or the
 * processor down (503, retryable). Undefined for any other `kind`.
 */
export function outcomeFor(kind: string, resultId: string | null): Outcome | undefined {
  const body = (status: number, value: unknown) => ({
    status,
    headers: [['content-type', 'application/json']] as const,
    body: new TextEncoder().encode(JSON.stringify(value)),
  });
  if (kind === 'succeeded') {
    return {
      status: 'succeeded',
      retryable: false,
      resultId,
      response: body(201, { id: resultId, object: 'charge', amount: 50000 }),
    };
  }
  if (kind === 'failed-final') {
    return {
      status: 'failed',
      retryable: false,
      resultId,
      response: body(402, { type: 'urn:idem:problem:card-declined', status: 402 }),
    };
  }
  if (kind === 'failed-retryable') {
    return {
      status: 'failed',
      retryable: true,
      resultId: null,
      response: body(503, { type: 'urn:idem:problem:processor-unavailable', status: 503 }),
    };
  }
  return undefined;
}

/** The lease a claim with this TTL gets unless it asks: the model's, but never half the TTL or more. */
export const defaultLease = (ttlMs: number): number => Math.min(MODEL_LEASE_MS, Math.floor(ttlMs / 2));

/**
 * The five operations on `<account>/model` rows, each answered as the page shows it: the store's answer, its
 * trips, the rows before and after, and the {@link Reading}.
 *
 * @example
 * const ops = modelOps({ store, trips, ttlMs: 86_400_000 })
 * const answer = await ops.claim(scope, 'k1')
 */
export function modelOps({ store, trips, ttlMs, now = Date.now }: ModelOptions) {
  const contract = store as IdempotencyStore<unknown>;
  const run = runOn(contract, trips);

  /** The row as it stands, read apart from the operation's own trips; undefined when the read failed. */
  const look = async (pk: string): Promise<Row | undefined> => {
    const read = await trips.record(() => contract.get(pk));
    return read.error === undefined ? (read.value ?? null) : undefined;
  };

  const claimRequest = (scope: string, key: string, options: Timing = {}) => {
    const ttl = options.ttlMs ?? ttlMs;
    return {
      pk: recordPk(scope, key),
      scope,
      key,
      fingerprint: CHARGE_FINGERPRINT,
      token: randomUUID(),
      id: randomUUID(),
      now: now(),
      leaseMs: options.leaseMs ?? defaultLease(ttl),
      ttlMs: ttl,
    } satisfies ClaimRequest;
  };

  /** One write conditional on `token`: the rows before and after it, what it did, and `read`'s {@link Reading} of it. */
  const fenced = async <T>(
    operation: string,
    scope: string,
    key: string,
    token: string,
    read: (store: string, before: Row, after: Row, token: string, value: T, at: number) => Reading,
    write: (pk: string, at: number, before: Row | undefined) => Promise<T>,
  ) => {
    const pk = recordPk(scope, key);
    const before = await look(pk);
    const at = now();
    const result: RunResult<T> = await run(operation, () => write(pk, at, before));
    const after = await look(pk);
    const reading =
      before !== undefined && after !== undefined && result.value !== undefined
        ? read(store.name, before, after, token, result.value, at)
        : null;
    return { ...present(result), key, pk, now: at, before: shown(before), after: shown(after), reading };
  };

  const ops = {
    claimRequest,

    async claim(scope: string, key: string, options: Timing = {}) {
      const request = claimRequest(scope, key, options);
      const before = await look(request.pk);
      const result = await run('claim', () => contract.claim(request));
      const reading =
        before !== undefined && result.value !== undefined
          ? readClaim(before, result.value, request.fingerprint, request.now)
          : null;
      return { ...present(result), key, pk: request.pk, now: request.now, before: shown(before), reading };
    },

    complete: (scope: string, key: string, token: string, outcome: Outcome) =>
      fenced('complete', scope, key, token, readComplete(outcome), (pk, at) =>
        contract.complete({ pk, token, now: at, outcome }),
      ),

    // As the engine renews: the lease from now, and the TTL never ending before the lease does.
    renew: (scope: string, key: string, token: string, leaseMs: number) =>
      fenced('renew', scope, key, token, readRenew, (pk, at, before) =>
        contract.renew({ pk, token, now: at, leaseMs, expiresAt: Math.max(before?.expiresAt ?? 0, at + leaseMs) }),
      ),

    release: (scope: string, key: string, token: string) =>
      fenced('release', scope, key, token, readRelease, (pk) => contract.release({ pk, token })),

    async get(scope: string, key: string) {
      const pk = recordPk(scope, key);
      const result = await run('get', () => contract.get(pk));
      const at = now();
      const record = result.value;
      return {
        ...present(result),
        key,
        pk,
        now: at,
        stored: record === undefined ? null : record !== null,
        expired: record ? record.expiresAt <= at : null,
        reading: record === undefined ? null : readGet(record, at),
      };
    },

    /** Stages one row per state a retry can meet (claim, then complete), each with its TTL above its lease. */
    async seed(scope: string) {
      const rows = [];
      for (const { key, state } of SEEDS) {
        const lease = state === 'in_progress' ? { leaseMs: Math.min(SEED_LEASE_MS, Math.floor(ttlMs / 2)) } : {};
        const outcome = state === 'in_progress' ? null : state;
        rows.push({
          key,
          state,
          ...(await stage(stager, scope, key, lease, outcome, `ch_seed_${randomBytes(6).toString('hex')}`)),
        });
      }
      return { rows };
    },

    /** A succeeded row with a short TTL (its lease shorter still), for the expiry demonstration. */
    async expiring(scope: string) {
      const key = `expiring-${randomBytes(6).toString('hex')}`;
      const timing = { ttlMs: EXPIRING_TTL_MS, leaseMs: EXPIRING_LEASE_MS };
      const staged = await stage(stager, scope, key, timing, 'succeeded', `ch_${randomBytes(8).toString('hex')}`);
      return { key, pk: recordPk(scope, key), ttlMs: EXPIRING_TTL_MS, ...staged, now: now() };
    },
  };
  const stager: Stager = { ...ops, look };
  return ops;
}

/** What {@link stage} drives: the model's claim and completion, and a read of the row apart from their trips. */
interface Stager {
  claim(scope: string, key: string, timing: Timing): Promise<{ readonly result: unknown }>;
  complete(scope: string, key: string, token: string, outcome: Outcome): Promise<unknown>;
  look(pk: string): Promise<Row | undefined>;
}

/** Claims `key` and, when the claim wins and `kind` is given, records that outcome; then reads the row. */
async function stage(
  ops: Stager,
  scope: string,
  key: string,
  timing: Timing,
  kind: OutcomeKind | null,
  resultId: string,
) {
  const claimed = await ops.claim(scope, key, timing);
  const steps: unknown[] = [claimed];
  const won = claimed.result as { kind?: string; record?: { token?: string } } | null;
  const token = won?.kind === 'claimed' ? won.record?.token : undefined;
  const outcome = kind === null ? undefined : outcomeFor(kind, resultId);
  if (token !== undefined && outcome !== undefined) steps.push(await ops.complete(scope, key, token, outcome));
  return { record: shown(await ops.look(recordPk(scope, key))), steps };
}

/** A row as the store returns it: null when there is none. */
type Row = IdempotencyRecord | null;
/** A claim's TTL and lease, where it asks for its own. */
type Timing = { ttlMs?: number; leaseMs?: number };

const shown = (record: Row | undefined) => (record ? modelRecord(record) : null);
