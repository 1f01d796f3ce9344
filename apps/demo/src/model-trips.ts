/**
 * @module The model page's round trips: each store call's raw requests and replies (the store's `onRoundTrip`
 * reports), filed under the operation that caused them, and the JSON the page gets for one operation.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyRecord, IdempotencyStore, RoundTrip } from 'idem';

/** Round trips of one model operation, collected through `AsyncLocalStorage`, plus the store's own count. */
export interface TripRecorder {
  /** Give this to the store (`openBackend(config, { onRoundTrip })`): it files each trip under the current operation. */
  readonly onRoundTrip: (trip: RoundTrip) => void;
  /** Runs `fn`, collecting the round trips it causes (and nothing from concurrent requests). */
  record<T>(fn: () => Promise<T>): Promise<Recorded<T>>;
}

export interface Recorded<T> {
  readonly value?: T;
  readonly error?: unknown;
  readonly trips: readonly RoundTrip[];
}

/**
 * A recorder whose observer pushes each trip into the array of the operation that caused it.
 *
 * @example
 * const trips = tripRecorder()
 * const backend = await openBackend(config, { onRoundTrip: trips.onRoundTrip })
 * const { value, trips: sent } = await trips.record(() => backend.store.get(pk))
 */
export function tripRecorder(): TripRecorder {
  const current = new AsyncLocalStorage<RoundTrip[]>();
  return {
    onRoundTrip: (trip) => current.getStore()?.push(trip),
    async record<T>(fn: () => Promise<T>): Promise<Recorded<T>> {
      const trips: RoundTrip[] = [];
      return current.run(trips, async () => {
        try {
          return { value: await fn(), trips };
        } catch (error) {
          return { error, trips };
        }
      });
    },
  };
}

export interface RunResult<T> {
  readonly operation: string;
  readonly traced: boolean;
  readonly roundTrips: number;
  readonly trips: readonly RoundTrip[];
  readonly value?: T;
  readonly error?: unknown;
}

/**
 * One contract call with the trips it caused; `roundTrips` falls back to the store's own counter when it reports
 * none.
 *
 * @example
 * const result = await runOn(store, trips)('get', () => store.get(pk))
 */
export function runOn(store: IdempotencyStore<unknown>, trips: TripRecorder) {
  return async <T>(operation: string, fn: () => Promise<T>): Promise<RunResult<T>> => {
    const before = store.roundTrips;
    const recorded = await trips.record(fn);
    const counted = store.roundTrips - before;
    return {
      operation,
      traced: recorded.trips.length > 0,
      roundTrips: recorded.trips.length > 0 ? recorded.trips.length : counted,
      trips: recorded.trips,
      ...(recorded.error === undefined ? { value: recorded.value as T } : { error: describeError(recorded.error) }),
    };
  };
}

/** A record as the model page shows it (the response body as text; the token is the sandbox's own). */
export function modelRecord(record: IdempotencyRecord) {
  return {
    pk: record.pk,
    key: record.key,
    status: record.status,
    fingerprint: record.fingerprint,
    id: record.id,
    token: record.token,
    claimedAt: record.claimedAt,
    leaseExpiresAt: record.leaseExpiresAt,
    expiresAt: record.expiresAt,
    retryable: record.status === 'failed' ? record.retryable : null,
    resultId: record.resultId,
    responseStatus: record.response?.status ?? null,
  };
}

/** What the page gets for one operation: the store's return value (records shaped for display), the trips, the count. */
export function present<T>(result: RunResult<T>) {
  const value = result.value as unknown;
  let shown: unknown = value;
  if (isRecord(value)) shown = modelRecord(value);
  else if (value && typeof value === 'object' && 'kind' in value && 'record' in value && isRecord(value.record)) {
    shown = { kind: value.kind, record: modelRecord(value.record) };
  }
  return {
    operation: result.operation,
    traced: result.traced,
    roundTrips: result.roundTrips,
    result: (shown ?? null) as unknown,
    ...(result.error === undefined ? {} : { error: result.error }),
    trips: result.trips,
  };
}

function isRecord(value: unknown): value is IdempotencyRecord {
  return typeof value === 'object' && value !== null && 'pk' in value && 'token' in value && 'fingerprint' in value;
}

function describeError(error: unknown): unknown {
  if (error instanceof Error) {
    const own = Object.fromEntries(Object.entries(error).filter(([k]) => k !== 'stack'));
    return { name: error.name, message: error.message, ...own };
  }
  return error;
}

/** A JSON answer for the page, never cached; raw engine values made printable by {@link jsonSafe}. */
export const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body, jsonSafe), {
    status,
    headers: { 'content-type': 'application/json', 'cache-control': 'no-store' },
  });

/**
 * A `JSON.stringify` replacer for raw engine values: bytes as their length and text, bigints as strings, errors by
 * name, message and own fields (e.g. DynamoDB's `ConditionalCheckFailedException` and its `$metadata`).
 */
function jsonSafe(this: unknown, _key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (isBufferJson(value))
    return { bytes: value.data.length, text: new TextDecoder().decode(Uint8Array.from(value.data.slice(0, 2_000))) };
  if (value instanceof Uint8Array) {
    const text = new TextDecoder('utf-8', { fatal: false }).decode(value.subarray(0, 2_000));
    return { bytes: value.byteLength, text };
  }
  if (value instanceof Error) return describeError(value);
  if (value instanceof Map) return Object.fromEntries(value);
  if (value instanceof Set) return [...value];
  if (typeof value === 'function' || typeof value === 'symbol') return undefined;
  return value;
}

/** A Node `Buffer` after its own `toJSON` ran (which happens before any replacer sees it). */
function isBufferJson(value: unknown): value is { type: 'Buffer'; data: number[] } {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
  );
}
