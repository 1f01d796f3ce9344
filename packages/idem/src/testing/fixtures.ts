/**
 * @module What the store tests share: the fixed instants, a claim request builder, a final outcome, a round-trip
 * meter, a store whose `close` also cleans up after it, and a bounded poll. The conformance suite
 * ({@link describeStoreConformance}) builds its requests here, and each store's own tests do the same: a request
 * means one thing everywhere.
 */
import { randomUUID } from 'node:crypto';
import { recordPk } from '../core/key.js';
import type { ClaimRequest, IdempotencyRecord, IdempotencyStore, Outcome } from '../core/record.js';

/** The instant every store test starts at: the clock is injected, so a real backend sees it too. */
export const T0 = Date.parse('2026-01-01T00:00:00Z');
/** The lease a test claim asks for. */
export const LEASE = 10_000;
/** How long a test record lives. */
export const TTL = 60_000;

/** What every request of one builder has unless the call says otherwise. */
export interface RequestDefaults {
  readonly scope: string;
  /** Default `'f'` × 64. */
  readonly fingerprint?: string;
}

/**
 * A builder of claim requests: each call a fresh key, token and id, claimed at {@link T0} for {@link LEASE} and
 * {@link TTL}. `overrides` win; `pk` follows the request's scope and key unless it is given.
 *
 * @example
 * const request = claimRequests({ scope: 'acct_pg' })
 * await store.claim(request({ now: T0 + 1 }))
 */
export function claimRequests({
  scope,
  fingerprint = 'f'.repeat(64),
}: RequestDefaults): (overrides?: Partial<ClaimRequest>) => ClaimRequest {
  return (overrides = {}) => {
    const key = overrides.key ?? randomUUID();
    return {
      pk: recordPk(overrides.scope ?? scope, key),
      scope,
      key,
      fingerprint,
      token: randomUUID(),
      id: randomUUID(),
      now: T0,
      leaseMs: LEASE,
      ttlMs: TTL,
      ...overrides,
    };
  };
}

/**
 * The record a fresh claim of `req` (a {@link claimRequests} request, at {@link T0}) writes: `in_progress` under
 * its token and id, for {@link LEASE} and {@link TTL}, no outcome yet. Spelt out, not derived from `req`'s times:
 * the store under test computes those.
 *
 * @example
 * expect(await store.claim(req)).toEqual({ kind: 'claimed', record: claimedRecord(req) })
 */
export const claimedRecord = ({ pk, scope, key, fingerprint, id, token }: ClaimRequest): IdempotencyRecord => ({
  pk,
  scope,
  key,
  status: 'in_progress',
  fingerprint,
  id,
  token,
  claimedAt: T0,
  leaseExpiresAt: T0 + LEASE,
  expiresAt: T0 + TTL,
  retryable: false,
  resultId: null,
  response: null,
});

/**
 * A final success with a small JSON response (`{}`, 201): what most store tests complete with.
 *
 * @example
 * await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: SUCCEEDED })
 */
export const SUCCEEDED: Outcome = {
  status: 'succeeded',
  retryable: false,
  resultId: 'ch_1',
  response: { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array([0x7b, 0x7d]) },
};

/**
 * A meter on `store.roundTrips`: each call answers the trips since the previous one (or since the meter began).
 *
 * @example
 * const measure = tripMeter(store)
 * await store.claim(req)
 * expect(measure()).toBe(1)
 */
export function tripMeter(store: { readonly roundTrips: number }): () => number {
  let last = store.roundTrips;
  return () => {
    const delta = store.roundTrips - last;
    last = store.roundTrips;
    return delta;
  };
}

/**
 * `store` as the conformance suite sees it, delegating each call (a store with `#private` fields needs its own
 * `this`), with `close` also running `cleanup`: dropping the test's schema, table or keys.
 *
 * @example
 * create: async () => closingWith(store, () => pool.query(`DROP SCHEMA "${schema}" CASCADE`))
 */
export function closingWith<Tx>(store: IdempotencyStore<Tx>, cleanup: () => Promise<unknown>): IdempotencyStore<Tx> {
  return {
    name: store.name,
    get roundTrips() {
      return store.roundTrips;
    },
    ...(store.maxResponseBytes === undefined ? {} : { maxResponseBytes: store.maxResponseBytes }),
    ...(store.acceptsEffects === undefined ? {} : { acceptsEffects: store.acceptsEffects }),
    claim: (r) => store.claim(r),
    complete: (r) => store.complete(r),
    renew: (r) => store.renew(r),
    release: (r) => store.release(r),
    get: (pk) => store.get(pk),
    sweep: (r) => store.sweep(r),
    list: (r) => store.list(r),
    close: async () => {
      await store.close();
      await cleanup();
    },
  };
}

/** How long {@link waitFor} polls, how often, and what it makes of an error. */
export interface WaitOptions {
  /** Default 20 000. */
  readonly timeoutMs?: number;
  /** Default 10. */
  readonly everyMs?: number;
  /**
   * Default false: an error `check` throws ends the wait with that error. True: it counts as "not yet" (a service
   * still starting refuses connections), and the timeout names the last one.
   */
  readonly retryOnError?: boolean;
}

/**
 * Polls `check` until it answers something other than `undefined` or `false`, and returns that; throws, naming
 * `what`, once `timeoutMs` has passed. For ordering a test by the state it waits on (a record `in_progress`, a
 * claim blocked on a lock), never by a fixed sleep. `what` may be a function, asked at the timeout, to say what
 * was seen last.
 *
 * @example
 * const held = await waitFor('the claim to hold its key', async () => (await store.get(pk))?.status === 'in_progress' && pk)
 */
export async function waitFor<T>(
  what: string | (() => string),
  check: () => T | undefined | false | Promise<T | undefined | false>,
  { timeoutMs = 20_000, everyMs = 10, retryOnError = false }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let failure = '';
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      if (!retryOnError) throw error;
      failure = ` (last error: ${error instanceof Error ? error.message : String(error)})`;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}${failure}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * One call of each per-key operation, in a key's order: claim `req`, renew it (T0 + 1), complete it as succeeded
 * (T0 + 2), read it back and list its scope. The round-trip tests count and inspect what each sent.
 */
export async function eachOpOnce<Tx>(store: IdempotencyStore<Tx>, req: ClaimRequest): Promise<void> {
  await store.claim(req);
  await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
  await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: SUCCEEDED });
  await store.get(req.pk);
  await store.list({ scope: req.scope, limit: 10 });
}
