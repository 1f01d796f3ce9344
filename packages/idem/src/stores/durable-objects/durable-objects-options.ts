/**
 * The Durable Objects store's public shapes: the parts of the Workers runtime it touches (structural, so the
 * package needs no `@cloudflare/workers-types`), its options, the store's interface, and what `onRoundTrip` sees.
 */
import type { IdempotencyStore, RoundTripObserver } from '../contract.js';

/** The part of a Durable Object stub the store calls: `fetch`, to the object that holds the key. */
export interface DurableObjectStubLike {
  fetch(request: Request): Promise<Response>;
}

/** The part of a `DurableObjectNamespace` binding the store calls. */
export interface DurableObjectNamespaceLike {
  idFromName(name: string): unknown;
  get(id: unknown): DurableObjectStubLike;
}

/** A cursor of `ctx.storage.sql.exec`. */
export interface SqlCursorLike {
  toArray(): Array<Record<string, unknown>>;
}

/** The part of a Durable Object's `ctx` (its `DurableObjectState`) the object class uses. */
export interface DurableObjectStateLike {
  readonly storage: {
    readonly sql: { exec(query: string, ...bindings: unknown[]): SqlCursorLike };
    getAlarm(): Promise<number | null>;
    setAlarm(scheduledTime: number): Promise<void>;
  };
  blockConcurrencyWhile<T>(callback: () => Promise<T>): Promise<T>;
}

export interface DurableObjectsStoreOptions extends RoundTripObserver {
  /**
   * The binding of a namespace whose class is {@link IdempotencyDurableObject} (or a subclass), SQLite-backed
   * (`new_sqlite_classes` in the migration). Give it to Idem alone: the objects are named after scopes.
   */
  readonly namespace: DurableObjectNamespaceLike;
  /**
   * Objects per scope: 1 (the default) puts a scope's keys in one object; more spread them over that many by a
   * hash of the key, for a scope busier than one object serves (Cloudflare's soft limit: about 1,000 requests a
   * second per object). `list` then asks every shard of the scope. Never change it while records live: a key
   * would move to another object, where a retry finds no record and runs the work again.
   */
  readonly shards?: number;
  /**
   * Put before every object name (default none): stores with different prefixes share a namespace without
   * sharing a record, e.g. one per environment. Like `shards`, never change it while records live.
   */
  readonly prefix?: string;
}

/**
 * What `onRoundTrip` receives from this store: the object addressed (its name) and the JSON body sent to it; the
 * response is the object's JSON answer.
 */
export interface DurableObjectsRoundTripRequest {
  readonly object: string;
  readonly body: unknown;
}

/** A Durable Objects store: the contract, plus how its keys are spread. */
export interface DurableObjectsStore extends IdempotencyStore {
  readonly shards: number;
  readonly prefix: string;
  /** The name of the object that holds `pk` (for operators: `namespace.idFromName(name)`). */
  objectOf(pk: string): string;
}
