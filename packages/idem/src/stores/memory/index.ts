/**
 * @module `idem/stores/memory` — a store in one process's memory. A store of its own (tests, single-process
 * tools), not a stand-in for the others: it shares nothing across processes and loses everything on exit.
 */
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  ListRequest,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  RoundTripObserver,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { configError } from '../../core/errors.js';
import { claimedRecord, isClaimable } from '../contract.js';

export interface MemoryStoreOptions extends RoundTripObserver {
  /**
   * Refuse claims of new keys beyond this many records in all (a guard against unbounded growth). A record counts
   * until `sweep` deletes it or `release` frees it, expired or not. Default 1,000,000.
   */
  readonly maxRecords?: number;
  /**
   * Refuse claims of new keys beyond this many records in one scope, so one tenant filling its share cannot
   * refuse every other tenant. Default `maxRecords / 10` (rounded up): at least ten scopes fit before `maxRecords`.
   */
  readonly maxRecordsPerScope?: number;
}

/**
 * Creates an in-memory store. `effects` passed to `complete` receive `undefined` and run before the record is
 * updated; if they throw, the record is left as it was. A claim of a new key beyond `maxRecords`, or beyond
 * `maxRecordsPerScope` in its scope, is refused with an error (the engine answers `STORE_UNAVAILABLE`); claims
 * of keys already held, and every other call, still work.
 *
 * @example
 * const engine = createEngine({ store: memoryStore({ maxRecords: 100_000 }) })
 */
export function memoryStore({
  maxRecords = 1_000_000,
  maxRecordsPerScope = Math.ceil(maxRecords / 10),
  onRoundTrip,
}: MemoryStoreOptions = {}): IdempotencyStore<undefined> {
  if (!Number.isSafeInteger(maxRecords) || maxRecords <= 0)
    throw configError('maxRecords', 'a positive integer', maxRecords);
  if (!Number.isSafeInteger(maxRecordsPerScope) || maxRecordsPerScope <= 0 || maxRecordsPerScope > maxRecords) {
    throw configError(
      'maxRecordsPerScope',
      `a positive integer no larger than maxRecords (${maxRecords})`,
      maxRecordsPerScope,
    );
  }
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function')
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  const records = new Map<string, IdempotencyRecord>();
  /** Each scope's pks, kept with `records`: the per-scope cap and `list` read one scope, never the whole map. */
  const perScope = new Map<string, Set<string>>();
  let roundTrips = 0;
  let closed = false;
  const remove = (pk: string, record: IdempotencyRecord): void => {
    records.delete(pk);
    const mine = perScope.get(record.scope);
    mine?.delete(pk);
    if (mine?.size === 0) perScope.delete(record.scope);
  };

  const open = (): void => {
    roundTrips++;
    if (closed) throw new Error('memory store is closed');
  };
  /** Reports the call and what it returned: in memory, the "engine response" is the value itself. */
  const report = (trip: RoundTrip): void => {
    try {
      onRoundTrip?.(trip);
    } catch {
      // An observer must never change what the store does.
    }
  };
  const traced =
    <A, R>(op: RoundTrip['op'], fn: (arg: A) => Promise<R>) =>
    async (arg: A): Promise<R> => {
      if (!onRoundTrip) return fn(arg);
      let response: R;
      try {
        response = await fn(arg);
      } catch (error) {
        report({ op, request: arg, error });
        throw error;
      }
      report({ op, request: arg, response });
      return response;
    };
  const held = (pk: string, token: string): IdempotencyRecord | undefined => {
    const record = records.get(pk);
    return record && record.status === 'in_progress' && record.token === token ? record : undefined;
  };

  // Each method below runs to completion without an await between its read and its write, so in one
  // JavaScript thread the read-check-write is atomic: two claims cannot interleave inside it.
  const store: IdempotencyStore<undefined> = {
    name: 'memory',
    get roundTrips() {
      return roundTrips;
    },
    claim: traced('claim', async (request: ClaimRequest): Promise<ClaimResult> => {
      open();
      const existing = records.get(request.pk) ?? null;
      if (!isClaimable(existing, request.fingerprint, request.now)) {
        return { kind: 'existing', record: existing as IdempotencyRecord };
      }
      if (!existing) {
        if (records.size >= maxRecords) throw new Error(`memory store is full (${maxRecords} records)`);
        const mine = perScope.get(request.scope) ?? new Set<string>();
        if (mine.size >= maxRecordsPerScope) {
          throw new Error(`memory store is full for this scope (${maxRecordsPerScope} records per scope)`);
        }
        perScope.set(request.scope, mine.add(request.pk));
      }
      const record = claimedRecord(existing, request);
      records.set(request.pk, record);
      return {
        kind: 'claimed',
        record,
        takeover: existing?.status === 'in_progress' && existing.expiresAt > request.now,
      };
    }),
    complete: traced(
      'complete',
      async ({ pk, token, outcome, effects }: CompleteRequest<undefined>): Promise<WriteResult> => {
        open();
        const record = held(pk, token);
        if (!record) return { ok: false };
        if (effects) {
          const value = effects(undefined);
          if (value instanceof Promise) throw new Error('memory store effects must be synchronous');
        }
        records.set(pk, { ...record, ...outcome });
        return { ok: true };
      },
    ),
    renew: traced('renew', async ({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> => {
      open();
      const record = held(pk, token);
      if (!record) return { ok: false };
      // An abandoned renewal landing after a newer one must not shorten the lease (nor the expiry).
      const leaseExpiresAt = Math.max(record.leaseExpiresAt, now + leaseMs);
      records.set(pk, { ...record, leaseExpiresAt, expiresAt: Math.max(record.expiresAt, expiresAt) });
      return { ok: true };
    }),
    release: traced('release', async ({ pk, token }: ReleaseRequest): Promise<WriteResult> => {
      open();
      const record = held(pk, token);
      if (!record) return { ok: false };
      remove(pk, record);
      return { ok: true };
    }),
    get: traced('get', async (pk: string): Promise<IdempotencyRecord | null> => {
      open();
      return records.get(pk) ?? null;
    }),
    sweep: traced('sweep', async ({ now, limit = Infinity }: SweepRequest): Promise<number> => {
      open();
      let deleted = 0;
      for (const [pk, record] of records) {
        if (deleted >= limit) break;
        if (record.expiresAt <= now) {
          remove(pk, record);
          deleted++;
        }
      }
      return deleted;
    }),
    list: traced('list', async ({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> => {
      open();
      // The newest `limit`, without sorting the whole scope. Read from the scope's end (usually the newest), into a
      // short list kept newest first; a record goes before any claimed at the same time, since it came earlier in
      // the scope (ties keep the scope's order, as a stable sort would), and most records are skipped at once.
      const newest: IdempotencyRecord[] = [];
      if (limit < 1) return newest;
      const pks = [...(perScope.get(scope) ?? [])];
      for (let i = pks.length - 1; i >= 0; i--) {
        const record = records.get(pks[i] as string) as IdempotencyRecord;
        if (newest.length === limit && (newest[limit - 1] as IdempotencyRecord).claimedAt > record.claimedAt) continue;
        let [low, high] = [0, newest.length];
        while (low < high) {
          const mid = (low + high) >>> 1;
          if ((newest[mid] as IdempotencyRecord).claimedAt > record.claimedAt) low = mid + 1;
          else high = mid;
        }
        newest.splice(low, 0, record);
        if (newest.length > limit) newest.pop();
      }
      return newest;
    }),
    async close(): Promise<void> {
      closed = true;
    },
  };
  return store;
}
