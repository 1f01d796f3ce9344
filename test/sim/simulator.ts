/**
 * @module The deterministic simulator: several server processes, each a real `createEngine` instance with its
 * own skewed simulated clock, share one real store. It is a discrete-event simulation on one simulated time
 * line: a store call travels to the store (a seeded latency), runs there atomically against the real store,
 * and its reply travels back (another latency); engine timers (lease renewals, waits) and the handler's steps
 * fire as simulated time reaches them; crashes and freezes come from the seed's fault schedule. Which of the
 * pending things happens next is decided by those seeded times alone.
 *
 * Every request draws its latencies, step durations and faults from its own stream (found through
 * `AsyncLocalStorage`, so a store call or a timer is charged to the request that caused it): leaving one
 * request or one fault out of a run leaves the others' draws as they were, which is what makes shrinking work.
 * After each event the event loop is drained (one `setImmediate`), so the engine reaches its next await before
 * the next event: a run is a function of its seed.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  createEngine,
  isIdempotencyError,
  recordPk,
  type Clock,
  type Engine,
  type IdempotencyRecord,
  type RunResult,
  type StoredResponse,
  type WorkContext,
  type WorkResult,
} from 'idem';
import { openBackend, type AnyStore, type Backend, type LedgerRow } from './backend.js';
import { Checker, describe, isFinal, sameRecord, type Violation, type WriteInfo } from './checker.js';
import { lowerDefect, upperDefect, type ScheduledStore } from './defects.js';
import { Rng } from './prng.js';
import {
  makeScenario,
  RETRYABLE_STATUSES,
  T0,
  type FaultKind,
  type Payload,
  type Scenario,
  type ScheduledFault,
  type SimConfig,
} from './scenario.js';

// Short-TTL seeds create engines with ttlMs under the production minimum, which warns once per engine. The
// simulator creates thousands; the warning says nothing here.
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = (warning: string | Error, ...rest: unknown[]) => {
  const options = rest[0];
  if (typeof options === 'object' && options !== null && (options as { code?: unknown }).code === 'IDEM_SHORT_TTL')
    return;
  Reflect.apply(emitWarning, process, [warning, ...rest]);
};

export interface RunOptions {
  /**
   * Faults to leave out: a scheduled one by its id (`c0`, `p1`), or one drawn by a request by `<request>#<n>`
   * (its n-th fault, e.g. `a3#0`). How a failure is shrunk.
   */
  readonly disabledFaults?: ReadonlySet<string>;
  /** Planned client attempts (by index) to leave out. */
  readonly droppedAttempts?: ReadonlySet<number>;
  /** Clients' own retries to leave out, by label (`a3.r` is a3's retry, `a3.r.r` the retry of that). */
  readonly droppedRetries?: ReadonlySet<string>;
  /** Record a human-readable trace. Off in campaigns (a failing seed is re-run with it on). */
  readonly trace?: boolean;
  /** Events before the run is declared stuck. Default 20,000. */
  readonly maxSteps?: number;
}

export interface AppliedFault {
  readonly id: string;
  readonly kind: FaultKind;
}

export interface SimResult {
  readonly seed: number;
  readonly scenario: Scenario;
  readonly violation: Violation | undefined;
  readonly trace: readonly string[];
  /** Faults that happened (not left out), in order. */
  readonly faults: readonly AppliedFault[];
  /** Planned attempts that were not dropped. */
  readonly attempts: readonly number[];
  /** Clients' own retries that were sent. */
  readonly retries: readonly string[];
  /** Client requests that reached a live process (the settling retries included). */
  readonly requests: number;
  readonly steps: number;
  /** How often each path was taken: engine events (`executed`, `takeover`, `replayed`, …) and record lives. */
  readonly coverage: Readonly<Record<string, number>>;
}

interface Incarnation {
  readonly proc: number;
  readonly label: string;
  alive: boolean;
  /** Frozen (a GC pause, a VM migration) until then: it runs nothing, and its timers fire late. */
  pausedUntil: number;
  engine: Engine<unknown>;
  readonly clock: Clock;
  readonly inflight: Map<string, Attempt>;
}

interface Event {
  readonly seq: number;
  at: number;
  /** Dropped when this incarnation crashes. Undefined for clients, restarts, and requests on the wire. */
  readonly owner: Incarnation | undefined;
  readonly fire: () => Promise<void> | void;
  /**
   * A store call reaching the store: its synchronous part (the backend call is invoked here, and runs up to its
   * first `await`), returning the rest. Calls arriving within the seed's batch window start in one turn, so a
   * store that yields inside a call interleaves with the others.
   */
  readonly arrive?: () => () => Promise<Landed | undefined>;
}

/** What a store call saw once the call returned: for the check of writes that landed after a yield. */
interface Landed {
  readonly pk: string;
  /** The record right after the call's synchronous part (undefined for a `get`, which writes nothing). */
  readonly after: IdempotencyRecord | null | undefined;
}

/** A handler running on behalf of an attempt, for the lease-renewal check. */
interface Work {
  readonly inc: Incarnation;
  readonly label: string;
  /** Its start, or its last renewal's reply (the engine schedules the next renewal from there). */
  base: number;
  lastRenewSent: number | undefined;
  /** The handler returned or threw, its process died, or a renewal was refused (the lease is gone). */
  ended: boolean;
}

/** One client request: what it sends, and its own stream of draws. */
interface Attempt {
  readonly label: string;
  readonly keyIndex: number;
  readonly process: number;
  readonly payload: Payload;
  readonly fingerprint: string;
  readonly tampered: boolean;
  /** A settling retry: no faults, no client timeout, no further retries. */
  readonly settle?: boolean;
  readonly rng: Rng;
  readonly ids: Rng;
  faults: number;
  /** The effects the handler last returned (for the planted `effects-with-retryable`). */
  effects?: ((tx: unknown) => unknown) | undefined;
}

type ProcessorReply =
  { kind: 'charged'; chargeId: string } | { kind: 'declined' } | { kind: 'unavailable'; status: number };

/** What a client saw of one attempt. */
type Seen =
  | { kind: 'answer'; result: RunResult }
  | { kind: 'error'; code: string; retryAfterMs: number | undefined }
  | { kind: 'nothing' };

/** The request on whose behalf the engine is running right now. */
const current = new AsyncLocalStorage<Attempt>();

/** Drains the microtask queue: every promise chain the last event started runs to its next pending await. */
const drain = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Runs one seed.
 *
 * @example
 * const result = await simulate(42)
 * if (result.violation) console.log(result.violation.message)
 */
export async function simulate(seed: number, config: SimConfig = {}, options: RunOptions = {}): Promise<SimResult> {
  const scenario = makeScenario(seed, config);
  const backend = await openBackend(scenario.backend, scenario.defect);
  try {
    const world = new World(scenario, backend, options);
    return await world.run();
  } finally {
    backend.close();
  }
}

class World {
  readonly #s: Scenario;
  readonly #backend: Backend;
  readonly #disabled: ReadonlySet<string>;
  readonly #droppedAttempts: ReadonlySet<number>;
  readonly #droppedRetries: ReadonlySet<string>;
  readonly #tracing: boolean;
  readonly #maxSteps: number;
  readonly #lines: string[] = [];
  readonly #checker: Checker;
  #now = T0;
  #seq = 0;
  #steps = 0;
  #requests = 0;
  readonly #applied: AppliedFault[] = [];
  readonly #sentRetries: string[] = [];
  readonly #events: Event[] = [];
  readonly #incarnations: Incarnation[] = [];
  readonly #generation: number[] = [];
  readonly #processor = new Map<string, string>();
  #charges = 0;
  readonly #ownLedger = new Map<string, LedgerRow>();
  readonly #seen = new Map<string, Seen>();
  readonly #coverage: Record<string, number> = {};
  readonly #retriesLeft: number[];
  readonly #satisfied = new Set<number>();
  readonly #timeouts = new Map<string, Event>();
  readonly #fallbackIds: Rng;
  readonly #works = new Map<string, Work>();
  #effectsOnFailure = false;

  constructor(scenario: Scenario, backend: Backend, options: RunOptions) {
    this.#s = scenario;
    this.#backend = backend;
    this.#disabled = options.disabledFaults ?? new Set();
    this.#droppedAttempts = options.droppedAttempts ?? new Set();
    this.#droppedRetries = options.droppedRetries ?? new Set();
    this.#tracing = options.trace ?? false;
    this.#maxSteps = options.maxSteps ?? 20_000;
    this.#checker = new Checker((line) => this.#log(() => line));
    this.#retriesLeft = scenario.keys.map((k) => k.retries);
    this.#fallbackIds = new Rng(scenario.seed, 'ids');
  }

  async run(): Promise<SimResult> {
    const s = this.#s;
    this.#log(
      () =>
        `seed ${s.seed}: ${s.backend} store, ${s.ledger} ledger${s.defect ? `, PLANTED DEFECT ${s.defect}` : ''}; ` +
        `lease ${s.leaseMs} ms, renew every ${s.renewEveryMs} ms, wait-for-outcome ${s.waitForOutcomeMs} ms, ` +
        `handler ${s.honoursAbort ? 'honours' : 'ignores'} abort`,
    );
    this.#log(
      () =>
        `processes: ${s.processes.map((p) => `${p.name} (clock ${p.skewMs >= 0 ? '+' : ''}${p.skewMs} ms)`).join(', ')}`,
    );
    this.#log(
      () => `keys: ${s.keys.map((k) => `${recordPk(k.scope, k.key)} ${JSON.stringify(k.payload)}`).join('; ')}`,
    );
    const rates = Object.entries(s.faults).filter(([k, p]) => p > 0 && k !== 'crash' && k !== 'pause');
    this.#log(() => `fault rates: ${rates.map(([k, p]) => `${k} ${p.toFixed(3)}`).join(', ') || 'none'}`);

    for (let i = 0; i < s.processes.length; i++) {
      this.#generation.push(0);
      this.#incarnations.push(this.#boot(i));
    }
    const attempts: number[] = [];
    for (const plan of s.attempts) {
      if (this.#droppedAttempts.has(plan.index)) continue;
      attempts.push(plan.index);
      const attempt = this.#attempt(`a${plan.index}`, plan);
      this.#at(T0 + plan.at, undefined, () => this.#send(attempt));
    }
    for (const fault of s.schedule) {
      if (this.#disabled.has(fault.id)) continue;
      this.#at(T0 + fault.at, undefined, () => this.#strike(fault));
    }

    await this.#loop();
    if (!this.#checker.violation) await this.#settle();
    const broken = this.#checker.violation;
    if (broken) this.#log(() => `✗ INVARIANT BROKEN "${broken.invariant}": ${broken.message}`);
    return {
      seed: s.seed,
      scenario: s,
      violation: this.#checker.violation,
      trace: this.#lines,
      faults: this.#applied,
      attempts,
      retries: this.#sentRetries,
      requests: this.#requests,
      steps: this.#steps,
      coverage: {
        ...this.#coverage,
        'record lives': this.#checker.counts.lives,
        'lives after expiry': this.#checker.counts.livesAfterExpiry,
      },
    };
  }

  #attempt(label: string, from: Omit<Attempt, 'label' | 'rng' | 'ids' | 'faults'>): Attempt {
    const seed = this.#s.seed;
    return { ...from, label, rng: new Rng(seed, `request ${label}`), ids: new Rng(seed, `ids ${label}`), faults: 0 };
  }

  // ── the event loop ───────────────────────────────────────────────────────────────────────────────────────

  /** Runs events in time order until none is left, or until an invariant breaks. */
  async #loop(): Promise<void> {
    for (;;) {
      if (this.#checker.violation) return;
      let next: Event | undefined;
      for (const e of this.#events) if (!next || e.at < next.at || (e.at === next.at && e.seq < next.seq)) next = e;
      if (!next) return;
      if (++this.#steps > this.#maxSteps) {
        this.#checker.fail(
          'no-quiescence',
          `still busy after ${this.#maxSteps} events (${this.#events.length} pending)`,
        );
        return;
      }
      this.#now = Math.max(this.#now, next.at);
      this.#checkRenewals();
      if (this.#checker.violation) return;
      if (next.arrive) {
        // Every store call arriving within the window starts now, in one turn, in arrival order; then each
        // finishes in the same order. A store call that never yields finishes within its start, as before.
        const horizon = next.at + this.#s.batchWindowMs;
        const batch = this.#events
          .filter((e) => e.arrive && e.at <= horizon)
          .sort((a, b) => a.at - b.at || a.seq - b.seq);
        for (const e of batch) this.#events.splice(this.#events.indexOf(e), 1);
        if (batch.length > 1) {
          this.#count('store calls started in one turn (batches)');
          this.#log(() => `    ${batch.length} store calls reach the store in one turn`);
        }
        const finishes = batch.map((e) => (e.arrive as NonNullable<Event['arrive']>)());
        const landed: Landed[] = [];
        for (const finish of finishes) {
          const seen = await finish();
          if (seen) landed.push(seen);
        }
        await this.#lateWrites(landed);
      } else {
        this.#events.splice(this.#events.indexOf(next), 1);
        await next.fire();
      }
      await drain();
    }
  }

  /**
   * After a batch of store calls: a record that differs from what the last call on it left right after its
   * synchronous part was written after a yield inside a store call. Reported to the checker as its own write.
   */
  async #lateWrites(landed: readonly Landed[]): Promise<void> {
    const last = new Map<string, IdempotencyRecord | null>();
    for (const { pk, after } of landed) if (after !== undefined) last.set(pk, after);
    for (const [pk, seen] of last) {
      const now = await this.#backend.observe(pk);
      if (sameRecord(seen, now)) continue;
      this.#log(
        () => `    ! a write to ${pk} landed after a yield inside a store call: ${describe(seen)} → ${describe(now)}`,
      );
      this.#checker.onStoreOp('late-write', pk, {}, seen, now, undefined, false);
    }
    for (const row of this.#backend.newLedgerRows())
      this.#checker.onLedgerRow(row, await this.#backend.observe(row.pk));
  }

  /**
   * The lease is kept by renewal (docs/DESIGN.md: Lease): a handler running on a live process that has not been
   * frozen meanwhile must have had a renewal sent within `renewEveryMs` of its start or of its last renewal's
   * reply. Checked before each event, so the event that ends the work cannot hide a renewal that never came.
   */
  #checkRenewals(): void {
    const every = this.#s.renewEveryMs;
    for (const work of this.#works.values()) {
      if (work.ended || !work.inc.alive || work.inc.pausedUntil >= this.#now) continue;
      const base = Math.max(work.base, work.inc.pausedUntil);
      if (this.#now <= base + every) continue;
      if (work.lastRenewSent !== undefined && work.lastRenewSent >= base) continue;
      this.#checker.fail(
        'lease-not-renewed',
        `${work.label} on ${work.inc.label}: no renewal sent between ${base - T0} ms and ${this.#now - T0} ms (renew every ${every} ms)`,
      );
      return;
    }
  }

  #at(at: number, owner: Incarnation | undefined, fire: () => Promise<void> | void, arrive?: Event['arrive']): Event {
    const event: Event = arrive ? { seq: this.#seq++, at, owner, fire, arrive } : { seq: this.#seq++, at, owner, fire };
    this.#events.push(event);
    return event;
  }

  #cancel(event: Event | undefined): void {
    const i = event ? this.#events.indexOf(event) : -1;
    if (i >= 0) this.#events.splice(i, 1);
  }

  /** Does the request at hand suffer a fault of this kind now? Its id, or undefined (none, or left out). */
  #fault(kind: FaultKind, attempt = current.getStore()): string | undefined {
    const p = this.#s.faults[kind];
    if (!attempt || attempt.settle || p === 0 || !attempt.rng.chance(p)) return undefined;
    const id = `${attempt.label}#${attempt.faults++}`;
    if (this.#disabled.has(id)) return undefined;
    this.#applied.push({ id, kind });
    return id;
  }

  #log(line: () => string): void {
    if (this.#tracing) this.#lines.push(`[${String(this.#now - T0).padStart(9)} ms] ${line()}`);
  }

  #count(path: string): void {
    this.#coverage[path] = (this.#coverage[path] ?? 0) + 1;
  }

  // ── processes ─────────────────────────────────────────────────────────────────────────────────────────────

  #boot(proc: number): Incarnation {
    const { name, skewMs } = this.#s.processes[proc] as Scenario['processes'][number];
    const generation = this.#generation[proc] as number;
    const label = `${name}#${generation}`;
    const clock: Clock = {
      now: () => this.#now + skewMs,
      // A timer belongs to the request that set it: its callback runs on that request's behalf.
      setTimeout: (callback, ms) => {
        const attempt = current.getStore();
        const fire = attempt ? () => current.run(attempt, callback) : callback;
        return this.#at(this.#now + Math.max(0, ms), incarnation, fire);
      },
      clearTimeout: (handle) => this.#cancel(handle as Event),
    };
    const incarnation: Incarnation = {
      proc,
      label,
      alive: true,
      pausedUntil: 0,
      engine: undefined as never,
      clock,
      inflight: new Map(),
    };
    const lower = lowerDefect(this.#s.defect, this.#backend.storeFor(), this.#backend);
    const store = upperDefect(
      this.#s.defect,
      this.#scheduled(incarnation, lower),
      this.#backend,
      () => current.getStore()?.effects,
    );
    incarnation.engine = createEngine<unknown>({
      store,
      clock,
      generateId: () => (current.getStore()?.ids ?? this.#fallbackIds).hex(10),
      leaseMs: this.#s.leaseMs,
      renewEveryMs: this.#s.renewEveryMs,
      ttlMs: this.#s.ttlMs,
      waitForOutcomeMs: this.#s.waitForOutcomeMs,
      onEvent: (event) => {
        if (event.type === 'store_op') return;
        this.#count(event.type === 'executed' ? `executed:${event.outcome}` : event.type);
        if (event.type === 'takeover' || event.type === 'lease_lost' || event.type === 'stale_write_refused') {
          this.#log(
            () =>
              `${label} event ${event.type}${'op' in event ? ` (${event.op})` : ''} ${recordPk(event.scope, event.key)}`,
          );
        }
      },
    });
    // Effects with a retryable answer are the handler's to offer and the engine's to drop: the phased engine
    // (Engine.begin) commits effects only with a final outcome. Before it, the engine passed them through, so the
    // handler offers them only to an engine that makes that promise (or to the planted defect that breaks it).
    this.#effectsOnFailure =
      this.#s.effectsOnFailure &&
      (typeof (incarnation.engine as { begin?: unknown }).begin === 'function' ||
        this.#s.defect === 'effects-with-retryable');
    return incarnation;
  }

  /** A scheduled crash or freeze. */
  #strike(fault: ScheduledFault): void {
    const victim = this.#incarnations[fault.process] as Incarnation;
    if (!victim.alive || victim.pausedUntil > this.#now) return;
    this.#applied.push({ id: fault.id, kind: fault.kind });
    const mine = this.#events.filter((e) => e.owner === victim);
    if (fault.kind === 'crash') {
      // Its memory is gone: timers, handler steps, replies on their way to it. Requests it already sent stay on
      // the wire and reach the store; its store writes so far remain.
      victim.alive = false;
      for (const event of mine) this.#cancel(event);
      for (const work of this.#works.values()) if (work.inc === victim) work.ended = true;
      this.#log(
        () =>
          `✗ fault ${fault.id}: ${victim.label} crashes (${mine.length} timers and replies lost, ` +
          `requests ${[...victim.inflight.keys()].join(', ') || 'none'} cut off); restarts in ${fault.ms} ms`,
      );
      for (const attempt of victim.inflight.values())
        this.#clientSees(attempt, { kind: 'nothing' }, 'the connection resets');
      this.#at(this.#now + fault.ms, undefined, () => this.#restart(fault.process));
      return;
    }
    const until = (victim.pausedUntil = this.#now + fault.ms);
    for (const event of mine) event.at = Math.max(event.at, until);
    this.#log(() => `✗ fault ${fault.id}: ${victim.label} freezes for ${fault.ms} ms (its timers and replies wait)`);
  }

  #restart(proc: number): void {
    if ((this.#incarnations[proc] as Incarnation).alive) return;
    this.#generation[proc] = (this.#generation[proc] as number) + 1;
    const incarnation = this.#boot(proc);
    this.#incarnations[proc] = incarnation;
    this.#log(() => `${incarnation.label} starts (a fresh engine)`);
  }

  // ── the store: a request on the wire, an atomic call, a reply on the wire ────────────────────────────────

  #scheduled(inc: Incarnation, lower: AnyStore): ScheduledStore {
    const op = <T>(name: string, pk: string, info: WriteInfo, detail: string, exec: () => Promise<T>) =>
      this.#storeCall(inc, name, pk, info, detail, exec);
    return {
      name: `sim(${lower.name})`,
      get roundTrips() {
        return lower.roundTrips;
      },
      claim: (r) =>
        op(
          'claim',
          r.pk,
          { now: r.now, token: r.token, fingerprint: r.fingerprint },
          `fp=${r.fingerprint.slice(0, 8)} now=${r.now - T0}`,
          () => lower.claim(r),
        ),
      complete: (r) => {
        const response = r.outcome.response ? ` ${r.outcome.response.status}` : '';
        return op(
          'complete',
          r.pk,
          { token: r.token, now: r.now },
          `→${r.outcome.status}${response} token=${r.token}`,
          () => lower.complete(r),
        );
      },
      renew: (r) =>
        op('renew', r.pk, { token: r.token, now: r.now }, `token=${r.token} now=${r.now - T0}`, () => lower.renew(r)),
      release: (r) => op('release', r.pk, { token: r.token }, `token=${r.token}`, () => lower.release(r)),
      get: (pk) => op('get', pk, {}, '', () => lower.get(pk)),
      sweep: (r) => lower.sweep(r),
      list: (r) => lower.list(r),
      close: () => lower.close(),
      raw: (name, pk, exec, now) => op(name, pk, { now }, '', exec),
    };
  }

  /** One leg of a round trip: usually a few ms, sometimes tens or hundreds. */
  #latency(attempt: Attempt | undefined): number {
    if (!attempt) return 1;
    const r = attempt.rng.next();
    return r < 0.8
      ? attempt.rng.int(0, 5)
      : r < 0.95
        ? attempt.rng.int(5, 100)
        : attempt.rng.int(100, Math.floor(this.#s.leaseMs / 2));
  }

  #storeCall<T>(
    inc: Incarnation,
    name: string,
    pk: string,
    info: WriteInfo,
    detail: string,
    exec: () => Promise<T>,
  ): Promise<T> {
    const attempt = current.getStore();
    const by = attempt ? ` (${attempt.label})` : '';
    const work = attempt && name === 'renew' ? this.#works.get(attempt.label) : undefined;
    if (work) work.lastRenewSent = this.#now;
    return new Promise<T>((resolve, reject) => {
      /** The reply travels back; a dead process never reads it, a frozen one reads it when it wakes. */
      const replyLater = (reply: () => void, ok: boolean | undefined): void => {
        if (!inc.alive) return;
        this.#at(Math.max(this.#now + this.#latency(attempt), inc.pausedUntil), inc, () => {
          if (work && inc.alive) {
            work.base = this.#now;
            if (ok === false) work.ended = true; // a refused renewal: the lease is gone, and the engine stops renewing
          }
          reply();
        });
      };
      const arrive = (): (() => Promise<Landed | undefined>) => {
        const down = this.#fault('store-down', attempt);
        if (down !== undefined) {
          this.#log(() => `${inc.label} ${name} ${pk}${by} ✗ fault ${down}: the store is unreachable`);
          return async () => {
            replyLater(() => reject(new Error('sim: store unreachable')), undefined);
            return undefined;
          };
        }
        // Each observation reads the record when it is called (both backends read synchronously, and the promise
        // carries that moment's record): before the call, and right after its synchronous part.
        const writes = name !== 'get';
        const beforeRead = writes ? this.#backend.observe(pk) : undefined;
        let running: Promise<T>;
        try {
          running = exec();
        } catch (error) {
          running = Promise.reject(error instanceof Error ? error : new Error(String(error)));
        }
        const afterRead = writes ? this.#backend.observe(pk) : undefined;
        // The ledger rows this call's effects committed (read synchronously too: in a batch, the next call's
        // effects must not be charged to this one).
        const rows = name === 'complete' ? this.#backend.newLedgerRows() : [];
        return async () => {
          const before = (await beforeRead) ?? null;
          const after = afterRead === undefined ? undefined : await afterRead;
          let value: T | undefined;
          let error: unknown;
          let threw = false;
          try {
            value = await running;
          } catch (e) {
            error = e;
            threw = true;
          }
          const result = threw ? `threw ${String(error)}` : outcome(value);
          this.#log(() => `${inc.label} ${name} ${pk}${detail ? ` ${detail}` : ''}${by} → ${result}`);
          if (after !== undefined) {
            this.#checker.onStoreOp(name, pk, info, before, after, value, threw);
            for (const row of rows) this.#checker.onLedgerRow(row, after);
          }
          const lost = threw ? undefined : this.#fault('store-reply-lost', attempt);
          if (lost !== undefined) this.#log(() => `    ✗ fault ${lost}: the reply is lost (the call took effect)`);
          const ok = threw || lost !== undefined ? undefined : (value as { ok?: unknown } | undefined)?.ok === true;
          replyLater(
            lost !== undefined
              ? () => reject(new Error('sim: store reply lost'))
              : threw
                ? () => reject(error instanceof Error ? error : new Error(String(error)))
                : () => resolve(value as T),
            name === 'renew' ? ok : undefined,
          );
          return { pk, after };
        };
      };
      const delayed = this.#fault('store-delay', attempt);
      const ms =
        delayed === undefined
          ? this.#latency(attempt)
          : this.#s.leaseMs + (attempt as Attempt).rng.int(0, this.#s.leaseMs);
      if (delayed !== undefined)
        this.#log(() => `${inc.label} ${name} ${pk}${by} ✗ fault ${delayed}: ${ms} ms on the wire`);
      // On the wire: it reaches the store even if its sender dies.
      this.#at(this.#now + ms, undefined, () => {}, arrive);
    });
  }

  // ── clients and the handler ──────────────────────────────────────────────────────────────────────────────

  /** A client sends an attempt; unless it is a settling retry, it gives up waiting after its timeout. */
  #send(attempt: Attempt): void {
    const plan = this.#s.keys[attempt.keyIndex] as Scenario['keys'][number];
    const inc = this.#incarnations[attempt.process] as Incarnation;
    const what = `${attempt.tampered ? 'TAMPERED ' : ''}${JSON.stringify(attempt.payload)}`;
    this.#log(() => `client ${attempt.label} → ${inc.label} ${recordPk(plan.scope, plan.key)} ${what}`);
    if (!attempt.settle) {
      const timeout = this.#at(this.#now + plan.timeoutMs, undefined, () =>
        this.#clientSees(attempt, { kind: 'nothing' }, `gives up after ${plan.timeoutMs} ms`),
      );
      this.#timeouts.set(attempt.label, timeout);
    }
    this.#accept(attempt);
  }

  /** The server side of an attempt: refused by a dead process, held by a frozen one, else run by its engine. */
  #accept(attempt: Attempt, held = false): void {
    const plan = this.#s.keys[attempt.keyIndex] as Scenario['keys'][number];
    const inc = this.#incarnations[attempt.process] as Incarnation;
    const pk = recordPk(plan.scope, plan.key);
    if (inc.alive && inc.pausedUntil > this.#now) {
      this.#log(() => `    ${inc.label} is frozen: ${attempt.label} waits in its backlog`);
      this.#at(inc.pausedUntil, inc, () => this.#accept(attempt, true));
      return;
    }
    if (!inc.alive) return this.#clientSees(attempt, { kind: 'nothing' }, 'connection refused (the process is down)');
    if (held) this.#log(() => `${inc.label} wakes and picks up ${attempt.label}`);
    this.#requests++;
    inc.inflight.set(attempt.label, attempt);
    const request = { scope: plan.scope, key: plan.key, fingerprint: attempt.fingerprint };
    const running = current.run(attempt, () => inc.engine.run(request, (ctx) => this.#handler(inc, attempt, pk, ctx)));
    void running.then(
      (result) => {
        if (!inc.alive) return;
        inc.inflight.delete(attempt.label);
        this.#log(
          () => `${inc.label} answers ${attempt.label}: ${result.replayed ? 'replay ' : ''}${preview(result.response)}`,
        );
        // Every answer the engine gives counts, whether or not it reaches the client: stricter than "received".
        this.#checker.onAnswer(attempt.label, result);
        const lost = this.#fault('response-lost', attempt);
        if (lost !== undefined)
          this.#clientSees(attempt, { kind: 'nothing' }, `✗ fault ${lost}: the answer is lost on the way`);
        else this.#clientSees(attempt, { kind: 'answer', result });
      },
      (error: unknown) => {
        if (!inc.alive) return;
        inc.inflight.delete(attempt.label);
        if (isIdempotencyError(error)) {
          this.#log(() => `${inc.label} refuses ${attempt.label}: ${error.code}`);
          this.#clientSees(attempt, { kind: 'error', code: error.code, retryAfterMs: error.retryAfterMs });
        } else {
          this.#log(() => `${inc.label} fails ${attempt.label}: ${String(error)}`);
          this.#checker.fail('unexpected-error', `${attempt.label} on ${inc.label}: ${String(error)}`);
        }
      },
    );
  }

  /**
   * What the client does with what it saw of an attempt (once per attempt: a timeout and a late answer do not
   * both count). A final answer satisfies it; a mismatch stops it; anything else (nothing, a 503, a 409, a lost
   * lease, an unreachable store) makes it retry — the same request, to any process — while its retries last.
   */
  #clientSees(attempt: Attempt, seen: Seen, why?: string): void {
    if (this.#seen.has(attempt.label)) return;
    this.#seen.set(attempt.label, seen);
    if (why !== undefined) this.#log(() => `client ${attempt.label}: ${why}; it sees nothing`);
    if (attempt.settle) return;
    this.#cancel(this.#timeouts.get(attempt.label));
    this.#timeouts.delete(attempt.label);
    const key = attempt.keyIndex;
    if (seen.kind === 'answer' && isFinal(seen.result.response.status)) this.#satisfied.add(key);
    if (seen.kind === 'error' && seen.code === 'FINGERPRINT_MISMATCH') return;
    if (this.#satisfied.has(key) || (this.#retriesLeft[key] as number) <= 0) return;
    this.#retriesLeft[key] = (this.#retriesLeft[key] as number) - 1;
    // A 409 carries Retry-After in whole seconds (at least 1); everything else backs off at random.
    const delay =
      seen.kind === 'error' && seen.code === 'IN_FLIGHT'
        ? Math.max(1, Math.ceil((seen.retryAfterMs ?? 0) / 1000)) * 1000 + attempt.rng.int(0, 300)
        : attempt.rng.int(0, this.#s.leaseMs);
    const process = attempt.rng.int(0, this.#s.processes.length - 1);
    const label = `${attempt.label}.r`;
    if (this.#droppedRetries.has(label)) return;
    this.#sentRetries.push(label);
    this.#count('client retries');
    const retry = this.#attempt(label, { ...attempt, process });
    this.#log(() => `client ${attempt.label} will retry as ${label} in ${delay} ms`);
    this.#at(this.#now + delay, undefined, () => this.#send(retry));
  }

  /** The simulated charge handler: its steps take simulated time, so other events interleave with them. */
  async #handler(inc: Incarnation, attempt: Attempt, pk: string, ctx: WorkContext): Promise<WorkResult<unknown>> {
    const work: Work = { inc, label: attempt.label, base: this.#now, lastRenewSent: undefined, ended: false };
    this.#works.set(attempt.label, work);
    try {
      const result = await this.#work(inc, attempt, pk, ctx);
      attempt.effects = result.effects;
      return result;
    } finally {
      work.ended = true;
    }
  }

  async #work(inc: Incarnation, attempt: Attempt, pk: string, ctx: WorkContext): Promise<WorkResult<unknown>> {
    const by = attempt.label;
    this.#log(() => `${inc.label} work ${by} starts: id=${ctx.id}${ctx.reclaimed ? ' (reclaimed)' : ''}`);
    this.#checker.onWorkStart(by, ctx.id, attempt.fingerprint);
    const { payload } = attempt;
    if (payload.source === 'tok_invalid') {
      await this.#step(inc, attempt, 'validate', () => 'refused before anything happened');
      return { response: this.#json(inc, 400, { error: 'invalid_source' }), outcome: 'release' };
    }
    const reply = await this.#step(inc, attempt, 'call processor', () => this.#callProcessor(attempt, ctx.id, payload));
    if (reply.kind === 'declined') return { response: this.#json(inc, 402, { error: 'card_declined' }) };
    if (reply.kind === 'unavailable') {
      const response = this.#json(inc, reply.status, { error: 'processor_unavailable' });
      // The planted defect: the engine's classification of a 503 made final (an outcome it honours).
      const outcome =
        this.#s.defect === 'retryable-503-as-final' && reply.status === 503
          ? ({ outcome: 'failed-final' } as const)
          : {};
      if (this.#s.ledger === 'shared' && this.#effectsOnFailure) {
        // A handler that hands its "failed attempt" row to effects with a retryable answer: the engine must drop them.
        const row: LedgerRow = { recordId: ctx.id, pk, chargeId: `failed-${by}`, amount: payload.amount };
        this.#count('effects offered with a retryable answer');
        return { response, ...outcome, effects: this.#backend.ledgerEffect(row) };
      }
      return { response, ...outcome };
    }
    if (this.#s.honoursAbort && ctx.signal.aborted) throw ctx.signal.reason;
    const row: LedgerRow = { recordId: ctx.id, pk, chargeId: reply.chargeId, amount: payload.amount };
    if (this.#s.ledger === 'shared') {
      const response = this.#charge(inc, row.chargeId, payload);
      return { response, resultId: row.chargeId, effects: this.#backend.ledgerEffect(row) };
    }
    // A separate ledger: the write carries the record id under a unique constraint (docs/DESIGN.md: The work's own writes).
    const stored = await this.#step(inc, attempt, 'write ledger', () => {
      const existing = this.#ownLedger.get(ctx.id);
      if (existing) return existing;
      this.#ownLedger.set(ctx.id, row);
      this.#checker.onLedgerRow(row);
      return row;
    });
    return { response: this.#charge(inc, stored.chargeId, payload), resultId: stored.chargeId };
  }

  #step<T>(inc: Incarnation, attempt: Attempt, name: string, effect: () => T): Promise<T> {
    const slow = this.#fault('slow-step', attempt);
    const lease = this.#s.leaseMs;
    // Slow: 0.3–2.5 leases; with a record kept only a few leases, up to 1.25 TTLs, so work outlives its record's
    // first expiresAt and only renewals carrying it forward keep the key.
    const span = this.#s.ttlMs < 10 * lease ? Math.max(lease, this.#s.ttlMs / 2) : lease;
    const ms =
      slow === undefined
        ? attempt.rng.int(1, Math.floor(lease / 4))
        : Math.floor(span * (0.3 + 2.2 * attempt.rng.next()));
    if (slow !== undefined)
      this.#log(() => `${inc.label} work ${attempt.label}: ${name} ✗ fault ${slow}: slow, takes ${ms} ms`);
    return new Promise<T>((resolve) => {
      inc.clock.setTimeout(() => {
        const value = effect();
        this.#log(
          () =>
            `${inc.label} work ${attempt.label}: ${name} → ${typeof value === 'object' ? JSON.stringify(value) : String(value)}`,
        );
        resolve(value);
      }, ms);
    });
  }

  /** The card processor, idempotent on the record id it is given (as a real one is on its idempotency key). */
  #callProcessor(attempt: Attempt, id: string, payload: Payload): ProcessorReply {
    const down = this.#fault('processor-down', attempt);
    if (down !== undefined) {
      const status = attempt.rng.pick(RETRYABLE_STATUSES);
      this.#log(() => `    ✗ fault ${down}: the processor is down (nothing charged), answered ${status}`);
      return { kind: 'unavailable', status };
    }
    if (payload.source === 'tok_chargeDeclined') return { kind: 'declined' };
    let chargeId = this.#processor.get(id);
    if (chargeId === undefined) {
      chargeId = `ch_${++this.#charges}`;
      this.#processor.set(id, chargeId);
      const charged = chargeId;
      this.#log(() => `    processor: NEW CHARGE ${charged} of ${payload.amount} for id ${id}`);
      this.#checker.onCharge(attempt.label, id, chargeId);
    }
    const lost = this.#fault('processor-reply-lost', attempt);
    if (lost !== undefined) {
      this.#log(() => `    ✗ fault ${lost}: the processor's reply is lost (the charge stands)`);
      return { kind: 'unavailable', status: 503 };
    }
    return { kind: 'charged', chargeId };
  }

  #charge(inc: Incarnation, chargeId: string, payload: Payload): StoredResponse {
    return this.#json(inc, 201, {
      id: chargeId,
      amount: payload.amount,
      currency: payload.currency,
      status: 'succeeded',
    });
  }

  /** A JSON response. It names the process and its time, as real ones carry a request id: attempts differ. */
  #json(inc: Incarnation, status: number, body: Record<string, unknown>): StoredResponse {
    return {
      status,
      headers: [
        ['content-type', 'application/json'],
        ['x-served-by', inc.label],
      ],
      body: new TextEncoder().encode(JSON.stringify({ ...body, served_by: inc.label, at: inc.clock.now() - T0 })),
    };
  }

  // ── quiescence ───────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Every process is idle. Restart the dead, let every lease run out, check no record is still held, then have
   * each key's client retry once more, fault-free: it must get an answer (or a mismatch if a tampered request
   * owns the key now), never "still in progress".
   */
  async #settle(): Promise<void> {
    for (let proc = 0; proc < this.#incarnations.length; proc++) this.#restart(proc);
    this.#now += this.#s.leaseMs + 2 * this.#s.maxSkewMs + 1;
    const slowest = Math.min(...this.#s.processes.map((p) => this.#now + p.skewMs));
    this.#log(() => 'every process is idle and every lease has run out; each client retries once more, fault-free');
    const used = new Set(this.#s.attempts.filter((a) => !this.#droppedAttempts.has(a.index)).map((a) => a.keyIndex));
    for (const plan of this.#s.keys) {
      if (!used.has(plan.index)) continue;
      const pk = recordPk(plan.scope, plan.key);
      const record = await this.#backend.observe(pk);
      if (record?.status === 'in_progress' && record.leaseExpiresAt > slowest) {
        this.#checker.fail(
          'stuck-in-progress',
          `${pk} is in_progress with its lease still running once idle: ${describe(record)}`,
        );
        return;
      }
    }
    for (const plan of this.#s.keys) {
      if (!used.has(plan.index)) continue;
      const label = `settle${plan.index}`;
      const process = new Rng(this.#s.seed, label).int(0, this.#s.processes.length - 1);
      const { payload, fingerprint } = plan;
      this.#send(
        this.#attempt(label, { keyIndex: plan.index, process, payload, fingerprint, tampered: false, settle: true }),
      );
      await this.#loop();
      if (this.#checker.violation) return;
      const seen = this.#seen.get(label);
      const pk = recordPk(plan.scope, plan.key);
      const record = await this.#backend.observe(pk);
      if (seen?.kind === 'answer' && isFinal(seen.result.response.status)) continue;
      if (seen?.kind === 'answer') {
        this.#checker.fail(
          'outcome-class',
          `${label}: a fault-free retry once every process was idle got ${preview(seen.result.response)}; ${pk} is ${describe(record)}`,
        );
        return;
      }
      if (
        seen?.kind === 'error' &&
        seen.code === 'FINGERPRINT_MISMATCH' &&
        record &&
        record.fingerprint !== fingerprint
      )
        continue;
      this.#checker.fail(
        'stuck-in-progress',
        `${label}: a retry once every process was idle got ${seen?.kind === 'error' ? seen.code : 'no answer'}; ${pk} is ${describe(record)}`,
      );
      return;
    }
  }
}

function outcome(value: unknown): string {
  if (value === undefined) return 'written';
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  if ('kind' in value && 'record' in value) return `${String(value.kind)}: ${describe(value.record as never)}`;
  if ('ok' in value) return value.ok ? 'ok' : 'refused';
  return describe(value as never);
}

function preview(response: StoredResponse): string {
  return `${response.status} ${Buffer.from(response.body).toString('utf8')}`;
}
