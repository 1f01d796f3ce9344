/** The Durable Objects store, Worker side: one class, every call one `fetch` to the object that holds the key. */
import { configError } from '../../core/errors.js';
import { recordPk } from '../../core/key.js';
import type * as C from '../contract.js';
import type {
  DurableObjectNamespaceLike,
  DurableObjectsRoundTripRequest,
  DurableObjectsStore,
  DurableObjectsStoreOptions,
} from './durable-objects-options.js';
import { readRecord, sendOutcome, type Operation, type WireRecord } from './wire.js';

/**
 * 960 KiB of body and header bytes. An object's SQLite row holds at most 2,000,000 bytes (Cloudflare's limit for a
 * SQLite-backed object); headers are kept as JSON, at most about twice their bytes (a header value's `"`, `\` and
 * characters above U+007F take two), which leaves 33,920 bytes for the other columns and the JSON's framing.
 */
export const MAX_RESPONSE_BYTES = 983_040;

const DEFAULT_SWEEP_BATCH = 1_000;
const PK_PREFIX = 'IDEMPOTENCY#';

/** FNV-1a over the key's UTF-16 code units: the shard of a key, the same in every isolate. */
function shardOf(key: string, shards: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % shards;
}

export class DurableObjectsStoreImpl implements DurableObjectsStore {
  readonly name = 'durable-objects';
  readonly acceptsEffects = false;
  readonly maxResponseBytes = MAX_RESPONSE_BYTES;
  readonly shards: number;
  readonly prefix: string;
  readonly #namespace: DurableObjectNamespaceLike;
  readonly #onRoundTrip: ((trip: C.RoundTrip) => void) | undefined;
  /** The objects this store has called: what `sweep` reaches (the alarms reach every object). */
  readonly #addressed = new Set<string>();
  #roundTrips = 0;
  #closed = false;

  constructor({ namespace, shards = 1, prefix = '', onRoundTrip }: DurableObjectsStoreOptions) {
    if (typeof namespace?.idFromName !== 'function' || typeof namespace.get !== 'function') {
      throw configError('namespace', 'a Durable Object namespace binding (with idFromName() and get())');
    }
    if (!Number.isSafeInteger(shards) || shards < 1) throw configError('shards', 'a positive integer', shards);
    if (typeof prefix !== 'string' || prefix.includes('#')) {
      throw configError('prefix', 'a string without `#` (the separator of object names)', prefix);
    }
    if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
      throw configError('onRoundTrip', 'a function', onRoundTrip);
    }
    this.#namespace = namespace;
    this.shards = shards;
    this.prefix = prefix;
    this.#onRoundTrip = onRoundTrip;
  }

  get roundTrips(): number {
    return this.#roundTrips;
  }

  /**
   * `<prefix>#<scope>`, then `#<shard>` when there is more than one: neither the prefix (refused with a `#`) nor the
   * scope's part of `pk` (escaped) holds a `#`, so no two stores' (prefix, scope, shard) share a name.
   */
  objectOf(pk: string): string {
    const end = pk.indexOf('#', PK_PREFIX.length);
    if (!pk.startsWith(PK_PREFIX) || end < 0) throw configError('pk', 'IDEMPOTENCY#<scope>#<key> (recordPk)', pk);
    const scope = `${this.prefix}#${pk.slice(PK_PREFIX.length, end)}`;
    return this.shards === 1 ? scope : `${scope}#${shardOf(pk.slice(end + 1), this.shards)}`;
  }

  async claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    const { kind, record, takeover } = (await this.#call('claim', this.objectOf(request.pk), request)) as {
      kind: C.ClaimResult['kind'];
      record: WireRecord;
      takeover?: boolean;
    };
    // An object of an older deployment says nothing: the engine then counts every reclaim as a takeover.
    if (kind === 'existing' || typeof takeover !== 'boolean') return { kind, record: readRecord(record) };
    return { kind, record: readRecord(record), takeover };
  }

  async complete({ pk, token, now, outcome, effects }: C.CompleteRequest): Promise<C.WriteResult> {
    if (effects) throw configError('effects', 'absent: the Durable Objects store has no transaction to run them in');
    return (await this.#call('complete', this.objectOf(pk), {
      pk,
      token,
      now,
      outcome: sendOutcome(outcome),
    })) as C.WriteResult;
  }

  async renew(request: C.RenewRequest): Promise<C.WriteResult> {
    return (await this.#call('renew', this.objectOf(request.pk), request)) as C.WriteResult;
  }

  async release(request: C.ReleaseRequest): Promise<C.WriteResult> {
    return (await this.#call('release', this.objectOf(request.pk), request)) as C.WriteResult;
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    const record = (await this.#call('get', this.objectOf(pk), { pk })) as WireRecord | null;
    return record && readRecord(record);
  }

  /** One call per shard of the scope, at once; merged newest claim first. */
  async list({ scope, limit }: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    const first = this.objectOf(recordPk(scope, ''));
    const base = this.shards === 1 ? first : first.slice(0, first.lastIndexOf('#'));
    const names = this.shards === 1 ? [base] : Array.from({ length: this.shards }, (_, i) => `${base}#${i}`);
    const lists = await Promise.all(names.map((name) => this.#call('list', name, { scope, limit })));
    return (lists as WireRecord[][])
      .flat()
      .sort((a, b) => b.claimedAt - a.claimedAt)
      .slice(0, limit)
      .map(readRecord);
  }

  /**
   * Deletes expired records (`expiresAt <= now`) in the objects this store has called since it was created, in
   * batches of `batchSize` (one call each). The objects' alarms delete expired records everywhere without it.
   */
  async sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: C.SweepRequest): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize <= 0)
      throw configError('batchSize', 'a positive integer', batchSize);
    if (!(Number.isSafeInteger(limit) || limit === Infinity) || limit < 0) {
      throw configError('limit', 'a non-negative integer', limit);
    }
    let deleted = 0;
    for (const name of [...this.#addressed]) {
      for (;;) {
        const take = Math.min(batchSize, limit - deleted);
        if (take <= 0) return deleted;
        const changes = (await this.#call('sweep', name, { now, take })) as number;
        deleted += changes;
        if (changes < take) break;
      }
    }
    return deleted;
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  /** Every call goes through here: counted, reported to `onRoundTrip`, and an error answer thrown. */
  async #call(op: Operation, object: string, body: unknown): Promise<unknown> {
    if (this.#closed) throw new Error('durable-objects store is closed');
    this.#roundTrips++;
    this.#addressed.add(object);
    const request: DurableObjectsRoundTripRequest = { object, body };
    try {
      const stub = this.#namespace.get(this.#namespace.idFromName(object));
      const response = await stub.fetch(
        new Request(`https://idem/${op}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        }),
      );
      const value = (await response.json()) as unknown;
      if (!response.ok) {
        const reason = (value as { error?: unknown } | null)?.error;
        throw new Error(
          `durable-objects store: ${op} in object ${object} failed (${response.status}: ${String(reason)})`,
        );
      }
      this.#report({ op, request, response: value });
      return value;
    } catch (error) {
      this.#report({ op, request, error });
      throw error;
    }
  }

  #report(trip: C.RoundTrip): void {
    try {
      this.#onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the call already happened, and its result stands.
    }
  }
}
