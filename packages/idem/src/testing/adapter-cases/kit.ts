/**
 * @module The server side of the adapter conformance suite: one store and one served app per case, the handler's
 * executions counted per `ref`, switches that take the store down, and the check after every case that no lease
 * is left held.
 */
import { afterEach, beforeEach, expect } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyRecord, IdempotencyStore } from '../../core/record.js';
import type {
  AdapterConformanceOptions,
  AdapterHarness,
  AdapterSuiteOptions,
  ServedApp,
  SuiteContext,
  SuiteInput,
  SuiteReply,
} from '../adapter-harness.js';
import { created, postCharge, refOf, TENANT, type Answer, type PostInit } from './answers.js';

/** Which store calls reject as a backend outage would. */
export interface Switches {
  claim: boolean;
  complete: boolean;
  renew: boolean;
}

/** The work a case serves: its reply for the `execution`th run of the request's `ref`. */
export type Work<Tx> = (input: SuiteInput<Tx>, execution: number) => Promise<SuiteReply> | SuiteReply;

/** What every case group is given: the current case's store and app, and the helpers that drive them. */
export interface SuiteKit<Tx, S extends IdempotencyStore<Tx>> {
  readonly harness: AdapterHarness;
  /** The current case's store (a new one per case). */
  readonly store: S;
  /** Set a switch to take that store call down; every case starts with all of them off. */
  readonly down: Switches;
  readonly served: ServedApp | undefined;
  /** Serves `work` (counted per `ref`, announced to `started`) behind the adapter under test. */
  readonly serve: (
    work: Work<Tx>,
    options?: Omit<AdapterSuiteOptions<Tx>, 'store'>,
    compress?: boolean,
  ) => Promise<void>;
  /** How many times the handler has run for `ref`. */
  readonly runs: (ref: string) => number;
  /** Resolves when the handler next starts for `ref`. */
  readonly started: (ref: string) => Promise<void>;
  /** A promise the handler waits on until the case opens it (afterEach opens any left shut). */
  readonly gate: () => { wait: Promise<void>; open: () => void };
  /** A request left running while the case goes on: if the case fails first, its rejection is not left unhandled. */
  readonly inBackground: <T>(promise: Promise<T>) => Promise<T>;
  readonly record: (key: string, tenant?: string) => Promise<IdempotencyRecord | null>;
  /** How many ledger rows `ref` has. */
  readonly ledger: (ref: string) => Promise<number>;
  /** Declares the ledger row for `ref` as the work's effect. */
  readonly commit: (context: SuiteContext<Tx> | undefined, ref: string) => void;
  /** Polls until the key could be claimed again: no record, a terminal one, or a lease that has lapsed (nothing renews it). */
  readonly claimable: (key: string) => Promise<void>;
  readonly post: (init: PostInit) => Promise<Answer>;
}

/** Registers the per-case set-up and tear-down in the current `describe`, and answers the kit the cases use. */
export function suiteKit<Tx, S extends IdempotencyStore<Tx>>({
  harness,
  createStore,
  effect,
  countEffects,
}: AdapterConformanceOptions<Tx, S>): SuiteKit<Tx, S> {
  let store: S;
  const down: Switches = { claim: false, complete: false, renew: false };
  let served: ServedApp | undefined;
  let tenants: Set<string>;
  let gates: Array<() => void>;
  let executions: Map<string, number>;
  let onStart: Map<string, Array<() => void>>;

  beforeEach(async () => {
    store = await createStore();
    Object.assign(down, { claim: false, complete: false, renew: false });
    served = undefined;
    tenants = new Set([TENANT]);
    gates = [];
    executions = new Map();
    onStart = new Map();
  });

  afterEach(async () => {
    // Handlers a failed case left waiting finish first, so what is reported is a lease nothing ends.
    for (const open of gates) open();
    try {
      // Every request of the case has been answered: no record may still hold (and renew) a lease.
      await expectNoLeaseHeld(store, tenants);
    } finally {
      await served?.close();
      await store.close();
    }
  });

  const record = (key: string, tenant = TENANT): Promise<IdempotencyRecord | null> => store.get(recordPk(tenant, key));
  return {
    harness,
    get store() {
      return store;
    },
    down,
    get served() {
      return served;
    },
    serve: async (work, options = {}, compress = false) => {
      served = await harness.serve<Tx>({
        options: { store: switchable(store, down), onError: () => {}, ...options },
        compress,
        handler: async (input) => {
          const ref = refOf(input.body);
          const n = (executions.get(ref) ?? 0) + 1;
          executions.set(ref, n);
          for (const notify of onStart.get(ref)?.splice(0) ?? []) notify();
          return work(input, n);
        },
      });
    },
    runs: (ref) => executions.get(ref) ?? 0,
    started: (ref) => new Promise((resolve) => onStart.set(ref, [...(onStart.get(ref) ?? []), resolve])),
    gate: () => {
      let open!: () => void;
      const wait = new Promise<void>((resolve) => (open = resolve));
      gates.push(open);
      return { wait, open };
    },
    inBackground: (promise) => {
      void promise.catch(() => {});
      return promise;
    },
    record,
    ledger: (ref) => countEffects(ref, store),
    commit: (context, ref) => context?.declare({ effects: (tx) => effect(tx, ref) }),
    claimable: (key) => lapsed(key, record),
    post: (init) => {
      if (!served) throw new Error('serve() first');
      if (init.tenant !== undefined) tenants.add(init.tenant);
      return postCharge(served.url, init);
    },
  };
}

/**
 * Serves work held at a gate (then answering 201 `created`), posts `key` once and resolves when the handler has
 * started: a first attempt running, which `open` lets finish.
 */
export async function runningFirst<Tx, S extends IdempotencyStore<Tx>>(
  { serve, gate, started, inBackground, post }: SuiteKit<Tx, S>,
  key: string,
  ref: string,
): Promise<{ first: Promise<Answer>; open: () => void }> {
  const hold = gate();
  await serve(async (_input, n) => {
    await hold.wait;
    return created(n, 'json');
  });
  const begun = started(ref);
  const first = inBackground(post({ key, ref }));
  await begun;
  return { first, open: hold.open };
}

/** Fails, naming them, if records of `tenants` are still `in_progress` after a short grace. */
async function expectNoLeaseHeld<Tx>(store: IdempotencyStore<Tx>, tenants: ReadonlySet<string>): Promise<void> {
  await expect
    .poll(
      async () => {
        const open: string[] = [];
        for (const scope of tenants) {
          for (const r of await store.list({ scope, limit: 1_000 }))
            if (r.status === 'in_progress') open.push(`${scope}/${r.key}`);
        }
        return open;
      },
      { timeout: 2_000, interval: 25, message: 'records left in_progress after every request was answered' },
    )
    .toEqual([]);
}

function lapsed(key: string, record: (key: string) => Promise<IdempotencyRecord | null>): Promise<void> {
  return expect
    .poll(
      async () => {
        const r = await record(key);
        return r === null || r.status !== 'in_progress' || r.leaseExpiresAt <= Date.now();
      },
      { timeout: 5_000, interval: 20, message: `the lease of ${key} never lapsed: something still renews it` },
    )
    .toBe(true);
}

/** The store, with switches that make `claim`, `complete` or `renew` reject as a backend outage would. */
function switchable<Tx>(inner: IdempotencyStore<Tx>, down: Switches): IdempotencyStore<Tx> {
  const outage = (op: string) => Promise.reject(new Error(`${op}: the store is switched off by the conformance suite`));
  return {
    name: inner.name,
    get roundTrips() {
      return inner.roundTrips;
    },
    ...(inner.maxResponseBytes === undefined ? {} : { maxResponseBytes: inner.maxResponseBytes }),
    claim: (request) => (down.claim ? outage('claim') : inner.claim(request)),
    complete: (request) => (down.complete ? outage('complete') : inner.complete(request)),
    renew: (request) => (down.renew ? outage('renew') : inner.renew(request)),
    release: (request) => inner.release(request),
    get: (pk) => inner.get(pk),
    sweep: (request) => inner.sweep(request),
    list: (request) => inner.list(request),
    // The suite closes the real store itself, after the server.
    close: async () => {},
  };
}
