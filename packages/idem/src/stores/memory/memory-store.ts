/** The memory store: one class over two maps, the records and each scope's keys. */
import { configError } from '../../core/errors.js';
import type * as C from '../contract.js';
import { claimedRecord, isClaimable, isTakeover } from '../contract.js';
import { bindMethods, reportCalls, RoundTripMeter } from '../shared/round-trips.js';
import type { MemoryStoreOptions } from './memory-options.js';

// Each method below runs to completion without an await between its read and its write, so in one
// JavaScript thread the read-check-write is atomic: two claims cannot interleave inside it.
export class MemoryStoreImpl implements C.IdempotencyStore<undefined> {
  readonly name = 'memory';
  readonly #records = new Map<string, C.IdempotencyRecord>();
  /** Each scope's pks, kept with `#records`: the per-scope cap and `list` read one scope, never the whole map. */
  readonly #perScope = new Map<string, Set<string>>();
  readonly #maxRecords: number;
  readonly #maxRecordsPerScope: number;
  readonly #meter: RoundTripMeter;

  constructor({
    maxRecords = 1_000_000,
    maxRecordsPerScope = Math.ceil(maxRecords / 10),
    onRoundTrip,
  }: MemoryStoreOptions) {
    if (!Number.isSafeInteger(maxRecords) || maxRecords <= 0)
      throw configError('maxRecords', 'a positive integer', maxRecords);
    if (!Number.isSafeInteger(maxRecordsPerScope) || maxRecordsPerScope <= 0 || maxRecordsPerScope > maxRecords) {
      throw configError(
        'maxRecordsPerScope',
        `a positive integer no larger than maxRecords (${maxRecords})`,
        maxRecordsPerScope,
      );
    }
    this.#maxRecords = maxRecords;
    this.#maxRecordsPerScope = maxRecordsPerScope;
    this.#meter = new RoundTripMeter('memory', onRoundTrip);
    bindMethods(this);
    // In memory, a call is the round trip: its argument the request, what it returned the response.
    if (onRoundTrip) reportCalls(this, this.#meter, ['claim', 'complete', 'renew', 'release', 'get', 'sweep', 'list']);
  }

  get roundTrips(): number {
    return this.#meter.count;
  }

  async claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    this.#open();
    const existing = this.#records.get(request.pk) ?? null;
    if (!isClaimable(existing, request.fingerprint, request.now)) {
      return { kind: 'existing', record: existing as C.IdempotencyRecord };
    }
    if (!existing) {
      if (this.#records.size >= this.#maxRecords) throw new Error(`memory store is full (${this.#maxRecords} records)`);
      const mine = this.#perScope.get(request.scope) ?? new Set<string>();
      if (mine.size >= this.#maxRecordsPerScope) {
        throw new Error(`memory store is full for this scope (${this.#maxRecordsPerScope} records per scope)`);
      }
      this.#perScope.set(request.scope, mine.add(request.pk));
    }
    const record = claimedRecord(existing, request);
    this.#records.set(request.pk, record);
    return { kind: 'claimed', record, takeover: isTakeover(existing, request.now) };
  }

  async complete({ pk, token, outcome, effects }: C.CompleteRequest<undefined>): Promise<C.WriteResult> {
    this.#open();
    const record = this.#held(pk, token);
    if (!record) return { ok: false };
    if (effects) {
      const value = effects(undefined);
      if (value instanceof Promise) throw new Error('memory store effects must be synchronous');
    }
    this.#records.set(pk, { ...record, ...outcome });
    return { ok: true };
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    this.#open();
    const record = this.#held(pk, token);
    if (!record) return { ok: false };
    // An abandoned renewal landing after a newer one must not shorten the lease (nor the expiry).
    const leaseExpiresAt = Math.max(record.leaseExpiresAt, now + leaseMs);
    this.#records.set(pk, { ...record, leaseExpiresAt, expiresAt: Math.max(record.expiresAt, expiresAt) });
    return { ok: true };
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    this.#open();
    const record = this.#held(pk, token);
    if (!record) return { ok: false };
    this.#remove(pk, record);
    return { ok: true };
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    this.#open();
    return this.#records.get(pk) ?? null;
  }

  async sweep({ now, limit = Infinity }: C.SweepRequest): Promise<number> {
    this.#open();
    let deleted = 0;
    for (const [pk, record] of this.#records) {
      if (deleted >= limit) break;
      if (record.expiresAt <= now) {
        this.#remove(pk, record);
        deleted++;
      }
    }
    return deleted;
  }

  async list({ scope, limit }: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    this.#open();
    // The newest `limit`, without sorting the whole scope. Read from the scope's end (usually the newest), into a
    // short list kept newest first; a record goes before any claimed at the same time, since it came earlier in
    // the scope (ties keep the scope's order, as a stable sort would), and most records are skipped at once.
    const newest: C.IdempotencyRecord[] = [];
    if (limit < 1) return newest;
    const pks = [...(this.#perScope.get(scope) ?? [])];
    for (let i = pks.length - 1; i >= 0; i--) {
      const record = this.#records.get(pks[i] as string) as C.IdempotencyRecord;
      if (newest.length === limit && (newest[limit - 1] as C.IdempotencyRecord).claimedAt > record.claimedAt) continue;
      let [low, high] = [0, newest.length];
      while (low < high) {
        const mid = (low + high) >>> 1;
        if ((newest[mid] as C.IdempotencyRecord).claimedAt > record.claimedAt) low = mid + 1;
        else high = mid;
      }
      newest.splice(low, 0, record);
      if (newest.length > limit) newest.pop();
    }
    return newest;
  }

  async close(): Promise<void> {
    this.#meter.close();
  }

  /** Every call is a round trip, counted even once the store is closed (it then throws). */
  #open(): void {
    this.#meter.add();
    this.#meter.open();
  }

  #held(pk: string, token: string): C.IdempotencyRecord | undefined {
    const record = this.#records.get(pk);
    return record && record.status === 'in_progress' && record.token === token ? record : undefined;
  }

  #remove(pk: string, record: C.IdempotencyRecord): void {
    this.#records.delete(pk);
    const mine = this.#perScope.get(record.scope);
    mine?.delete(pk);
    if (mine?.size === 0) this.#perScope.delete(record.scope);
  }
}
