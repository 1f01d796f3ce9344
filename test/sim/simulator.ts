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
import { createEngine, recordPk, type Clock, type IdempotencyRecord } from 'idem';
import { openBackend, type Backend } from './backend.js';
import { Checker, describe, isFinal, sameRecord } from './checker.js';
import { Clients, preview } from './clients.js';
import { engineDefect, lowerDefect, upperDefect } from './defects.js';
import { ChargeHandler } from './handler.js';
import { Rng } from './prng.js';
import { makeScenario, T0, type FaultKind, type Scenario, type ScheduledFault, type SimConfig } from './scenario.js';
import { TimeChecker } from './time.js';
import { scheduledStore } from './wire.js';
import {
  current,
  header,
  makeAttempt,
  type AppliedFault,
  type Attempt,
  type Choice,
  type Driver,
  type Event,
  type Fire,
  type Incarnation,
  type Landed,
  type RunOptions,
  type Sim,
  type SimResult,
} from './world.js';

export type { AppliedFault, RunOptions, SimResult } from './world.js';

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
  const scenario = options.scenario ?? makeScenario(seed, config);
  const backend = await openBackend(scenario.backend, scenario.defect);
  try {
    const world = new World(scenario, backend, options);
    return await world.run();
  } finally {
    backend.close();
  }
}

class World implements Sim {
  readonly scenario: Scenario;
  readonly backend: Backend;
  readonly checker: Checker;
  readonly time: TimeChecker;
  readonly #disabled: ReadonlySet<string>;
  readonly #droppedAttempts: ReadonlySet<number>;
  readonly #tracing: boolean;
  readonly #maxSteps: number;
  readonly #lines: string[] = [];
  #now = T0;
  /** The driver stopped the run (its state was explored already): no quiescence check. */
  #stopped = false;
  /** Every process is idle; the settling retries run (a driver injects no fault then). */
  settling = false;
  #seq = 0;
  #steps = 0;
  readonly #applied: AppliedFault[] = [];
  readonly #events: Event[] = [];
  readonly #incarnations: Incarnation[] = [];
  readonly #generation: number[] = [];
  readonly #coverage: Record<string, number> = {};
  readonly #fallbackIds: Rng;
  readonly #driver: Driver | undefined;
  /** Each process's clock offset from true time: its skew, moved by a clock step. */
  readonly #offsets: number[];
  readonly #handler: ChargeHandler;
  readonly #clients: Clients;

  constructor(scenario: Scenario, backend: Backend, options: RunOptions) {
    this.scenario = scenario;
    this.backend = backend;
    this.#disabled = options.disabledFaults ?? new Set();
    this.#droppedAttempts = options.droppedAttempts ?? new Set();
    this.#tracing = options.trace ?? false;
    this.#maxSteps = options.maxSteps ?? 20_000;
    this.checker = new Checker((line) => this.log(() => line));
    this.#offsets = scenario.processes.map((p) => p.skewMs);
    this.time = new TimeChecker(
      this.checker,
      scenario,
      (path) => this.count(path),
      (proc) => this.#offsets[proc] as number,
    );
    this.#driver = options.driver;
    this.#fallbackIds = new Rng(scenario.seed, 'ids');
    this.#handler = new ChargeHandler(this);
    this.#clients = new Clients(this, this.#incarnations, this.#handler, options.droppedRetries ?? new Set());
  }

  get now(): number {
    return this.#now;
  }

  async run(): Promise<SimResult> {
    const s = this.scenario;
    if (this.#tracing) for (const line of header(s)) this.log(() => line);
    for (let i = 0; i < s.processes.length; i++) {
      this.#generation.push(0);
      this.#incarnations.push(this.#boot(i));
    }
    const attempts: number[] = [];
    for (const plan of s.attempts) {
      if (this.#droppedAttempts.has(plan.index)) continue;
      attempts.push(plan.index);
      const attempt = makeAttempt(s.seed, `a${plan.index}`, plan);
      this.at(T0 + plan.at, undefined, () => this.#clients.send(attempt), undefined, `client a${plan.index} sends`);
    }
    for (const fault of s.schedule) {
      if (this.#disabled.has(fault.id)) continue;
      this.at(T0 + fault.at, undefined, () => this.#strike(fault));
    }

    await this.#loop();
    if (!this.checker.violation && !this.#stopped) await this.#settle();
    const broken = this.checker.violation;
    if (broken) this.log(() => `✗ INVARIANT BROKEN "${broken.invariant}": ${broken.message}`);
    return {
      seed: s.seed,
      scenario: s,
      violation: this.checker.violation,
      trace: this.#lines,
      faults: this.#applied,
      attempts,
      retries: this.#clients.sentRetries,
      requests: this.#clients.requests,
      steps: this.#steps,
      coverage: {
        ...this.#coverage,
        'record lives': this.checker.counts.lives,
        'lives after expiry': this.checker.counts.livesAfterExpiry,
      },
    };
  }

  // ── the event loop ───────────────────────────────────────────────────────────────────────────────────────

  /** Runs events in time order until none is left, or until an invariant breaks. */
  async #loop(): Promise<void> {
    for (;;) {
      if (this.checker.violation) return;
      let next: Event | undefined;
      for (const e of this.#events) if (!next || e.at < next.at || (e.at === next.at && e.seq < next.seq)) next = e;
      if (!next) return;
      let chosen: Event[] | undefined;
      if (this.#driver) {
        const due = next.at;
        this.#now = Math.max(this.#now, due);
        this.time.beforeEvent(this.#now);
        if (this.checker.violation) return;
        const choice = await this.#driver.choose(
          this.#events.filter((e) => e.at === due).sort((a, b) => a.seq - b.seq),
          this,
        );
        if (choice.kind === 'stop') {
          this.#stopped = true;
          return;
        }
        this.log(() => `step ${this.#steps + 1}: ${choice.label}`);
        if (choice.kind === 'fault') {
          this.#steps++;
          this.#inject(choice);
          await drain();
          continue;
        }
        chosen = [...choice.events];
        next = chosen[0] ?? next;
      }
      if (++this.#steps > this.#maxSteps) {
        this.checker.fail(
          'no-quiescence',
          `still busy after ${this.#maxSteps} events (${this.#events.length} pending)`,
        );
        return;
      }
      this.#now = Math.max(this.#now, next.at);
      this.time.beforeEvent(this.#now);
      if (this.checker.violation) return;
      if (next.arrive) {
        // Every store call arriving within the window starts now, in one turn, in arrival order; then each
        // finishes in the same order. A store call that never yields finishes within its start, as before.
        const horizon = next.at + this.scenario.batchWindowMs;
        const batch =
          chosen ??
          this.#events.filter((e) => e.arrive && e.at <= horizon).sort((a, b) => a.at - b.at || a.seq - b.seq);
        for (const e of batch) this.#events.splice(this.#events.indexOf(e), 1);
        if (batch.length > 1) {
          this.count('store calls started in one turn (batches)');
          this.log(() => `    ${batch.length} store calls reach the store in one turn`);
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
      const now = await this.backend.observe(pk);
      if (sameRecord(seen, now)) continue;
      this.log(
        () => `    ! a write to ${pk} landed after a yield inside a store call: ${describe(seen)} → ${describe(now)}`,
      );
      this.checker.onStoreOp('late-write', pk, {}, seen, now, undefined, false);
    }
    for (const row of this.backend.newLedgerRows()) this.checker.onLedgerRow(row, await this.backend.observe(row.pk));
  }

  at(at: number, owner: Incarnation | undefined, fire: Fire, arrive?: Event['arrive'], what?: string): Event {
    const by = current.getStore()?.label;
    const event: Event = { seq: this.#seq++, at, owner, fire, what, by, ...(arrive ? { arrive } : {}) };
    this.#events.push(event);
    return event;
  }

  /** The processes as they are now (an exhaustive driver hashes them with the rest of the state). */
  get incarnations(): readonly Incarnation[] {
    return this.#incarnations;
  }

  /** The trace so far, and the pending events (an exhaustive driver hashes them). */
  get lines(): readonly string[] {
    return this.#lines;
  }

  get pending(): readonly Event[] {
    return this.#events;
  }

  offset(proc: number): number {
    return this.#offsets[proc] as number;
  }

  /** A fault an exhaustive driver chose: a crash (restarting at once), a lease lapse, a clock step. */
  #inject(choice: Extract<Choice, { kind: 'fault' }>): void {
    const { fault, process } = choice;
    const s = this.scenario;
    if (fault === 'clock-step')
      return void (this.#offsets[process] = (this.#offsets[process] as number) + (s.exhaustive?.clockStepMs ?? 0));
    const kind = fault === 'crash' ? 'crash' : 'partition';
    // A lease lapse: the process is cut off from the store (and the processor) for a lease and a millisecond.
    const ms = fault === 'crash' ? 0 : s.leaseMs + 1;
    this.#strike({ id: fault === 'crash' ? 'c0' : 'n0', kind, at: this.#now - T0, process, ms });
  }

  cancel(event: Event | undefined): void {
    const i = event ? this.#events.indexOf(event) : -1;
    if (i >= 0) this.#events.splice(i, 1);
  }

  fault(kind: FaultKind, attempt: Attempt | undefined = current.getStore()): string | undefined {
    const p = this.scenario.faults[kind];
    if (!attempt || attempt.settle) return undefined;
    if (this.#driver ? !this.#driver.fault(kind, attempt) : p === 0 || !attempt.rng.chance(p)) return undefined;
    const id = `${attempt.label}#${attempt.faults++}`;
    if (this.#disabled.has(id)) return undefined;
    this.#applied.push({ id, kind });
    return id;
  }

  log(line: () => string): void {
    if (this.#tracing) this.#lines.push(`[${String(this.#now - T0).padStart(9)} ms] ${line()}`);
  }

  count(path: string): void {
    this.#coverage[path] = (this.#coverage[path] ?? 0) + 1;
  }

  // ── processes ─────────────────────────────────────────────────────────────────────────────────────────────

  #boot(proc: number): Incarnation {
    const s = this.scenario;
    const { name } = s.processes[proc] as Scenario['processes'][number];
    const generation = this.#generation[proc] as number;
    const label = `${name}#${generation}`;
    const clock: Clock = {
      now: () => this.#now + (this.#offsets[proc] as number),
      // A timer belongs to the request that set it: its callback runs on that request's behalf.
      setTimeout: (callback, ms) => {
        const attempt = current.getStore();
        const fire = attempt ? () => current.run(attempt, callback) : callback;
        return this.at(this.#now + Math.max(0, ms), incarnation, fire, undefined, `timer ${ms} ms`);
      },
      clearTimeout: (handle) => this.cancel(handle as Event),
    };
    const incarnation: Incarnation = {
      proc,
      label,
      alive: true,
      pausedUntil: 0,
      partitionedUntil: 0,
      engine: undefined as never,
      clock,
      inflight: new Map(),
    };
    const lower = lowerDefect(s.defect, this.backend.storeFor(), this.backend);
    const store = upperDefect(
      s.defect,
      scheduledStore(this, incarnation, lower),
      this.backend,
      () => current.getStore()?.effects,
    );
    incarnation.engine = createEngine<unknown>({
      store,
      clock,
      generateId: () => (current.getStore()?.ids ?? this.#fallbackIds).hex(10),
      leaseMs: s.leaseMs,
      renewEveryMs: s.renewEveryMs,
      leaseMarginMs: s.leaseMarginMs,
      storeTimeoutMs: s.storeTimeoutMs,
      maxHoldMs: s.maxHoldMs,
      ...engineDefect(s.defect),
      ttlMs: s.ttlMs,
      waitForOutcomeMs: s.waitForOutcomeMs,
      onEvent: (event) => {
        if (event.type === 'store_op') return;
        this.count(event.type === 'executed' ? `executed:${event.outcome}` : event.type);
        if (event.type === 'takeover' || event.type === 'lease_lost' || event.type === 'stale_write_refused') {
          this.log(
            () =>
              `${label} event ${event.type}${'op' in event ? ` (${event.op})` : ''} ${recordPk(event.scope, event.key)}`,
          );
        }
      },
    });
    this.#handler.effectsOnFailure =
      s.effectsOnFailure &&
      (typeof (incarnation.engine as { begin?: unknown }).begin === 'function' ||
        s.defect === 'effects-with-retryable');
    return incarnation;
  }

  /** A scheduled crash, freeze or partition. */
  #strike(fault: ScheduledFault): void {
    const victim = this.#incarnations[fault.process] as Incarnation;
    if (!victim.alive || victim.pausedUntil > this.#now) return;
    this.#applied.push({ id: fault.id, kind: fault.kind });
    if (fault.kind === 'partition') {
      victim.partitionedUntil = Math.max(victim.partitionedUntil, this.#now + fault.ms);
      this.log(
        () => `✗ fault ${fault.id}: ${victim.label} is cut off from the store for ${fault.ms} ms (no call answers)`,
      );
      return;
    }
    const mine = this.#events.filter((e) => e.owner === victim);
    if (fault.kind === 'crash') {
      // Its memory is gone: timers, handler steps, replies on their way to it. Requests it already sent stay on
      // the wire and reach the store; its store writes so far remain.
      victim.alive = false;
      for (const event of mine) this.cancel(event);
      this.time.crashed(victim);
      this.log(
        () =>
          `✗ fault ${fault.id}: ${victim.label} crashes (${mine.length} timers and replies lost, ` +
          `requests ${[...victim.inflight.keys()].join(', ') || 'none'} cut off); restarts in ${fault.ms} ms`,
      );
      for (const attempt of victim.inflight.values())
        this.#clients.sees(attempt, { kind: 'nothing' }, 'the connection resets');
      this.at(
        this.#now + fault.ms,
        undefined,
        () => this.#restart(fault.process),
        undefined,
        `${victim.label} restarts`,
      );
      return;
    }
    const until = (victim.pausedUntil = this.#now + fault.ms);
    for (const event of mine) event.at = Math.max(event.at, until);
    this.time.paused(victim, fault.ms);
    this.log(() => `✗ fault ${fault.id}: ${victim.label} freezes for ${fault.ms} ms (its timers and replies wait)`);
  }

  #restart(proc: number): void {
    if ((this.#incarnations[proc] as Incarnation).alive) return;
    this.#generation[proc] = (this.#generation[proc] as number) + 1;
    const incarnation = this.#boot(proc);
    this.#incarnations[proc] = incarnation;
    this.log(() => `${incarnation.label} starts (a fresh engine)`);
  }

  // ── quiescence ───────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Every process is idle. Restart the dead, let every lease run out, check no record is still held, then have
   * each key's client retry once more, fault-free: it must get an answer (or a mismatch if a tampered request
   * owns the key now), never "still in progress".
   */
  async #settle(): Promise<void> {
    const s = this.scenario;
    this.settling = true;
    for (let proc = 0; proc < this.#incarnations.length; proc++) {
      this.#restart(proc);
      (this.#incarnations[proc] as Incarnation).partitionedUntil = 0; // the network heals
    }
    // Past every lease by every clock: the skew, or more if a clock stepped (the exhaustive mode's clock step).
    this.#now += s.leaseMs + 2 * Math.max(s.maxSkewMs, ...this.#offsets.map(Math.abs)) + 1;
    const slowest = Math.min(...this.#offsets.map((offset) => this.#now + offset));
    this.log(() => 'every process is idle and every lease has run out; each client retries once more, fault-free');
    const used = new Set(s.attempts.filter((a) => !this.#droppedAttempts.has(a.index)).map((a) => a.keyIndex));
    for (const plan of s.keys) {
      if (!used.has(plan.index)) continue;
      const pk = recordPk(plan.scope, plan.key);
      const record = await this.backend.observe(pk);
      if (record?.status === 'in_progress' && record.leaseExpiresAt > slowest) {
        this.checker.fail(
          'stuck-in-progress',
          `${pk} is in_progress with its lease still running once idle: ${describe(record)}`,
        );
        return;
      }
    }
    for (const plan of s.keys) {
      if (!used.has(plan.index)) continue;
      const label = `settle${plan.index}`;
      const process = new Rng(s.seed, label).int(0, s.processes.length - 1);
      const { payload, fingerprint } = plan;
      this.#clients.send(
        makeAttempt(s.seed, label, {
          keyIndex: plan.index,
          process,
          payload,
          fingerprint,
          tampered: false,
          settle: true,
        }),
      );
      await this.#loop();
      if (this.checker.violation || this.#stopped) return;
      const seen = this.#clients.seen.get(label);
      const pk = recordPk(plan.scope, plan.key);
      const record = await this.backend.observe(pk);
      if (seen?.kind === 'answer' && isFinal(seen.result.response.status)) continue;
      if (seen?.kind === 'answer') {
        this.checker.fail(
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
      this.checker.fail(
        'stuck-in-progress',
        `${label}: a retry once every process was idle got ${seen?.kind === 'error' ? seen.code : 'no answer'}; ${pk} is ${describe(record)}`,
      );
      return;
    }
  }
}
