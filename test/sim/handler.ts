/**
 * @module The simulated charge handler: call the processor (idempotent on the record id it is given), then write
 * the ledger — a separate one unique on the record id (`own`), or rows handed to `effects` so they commit with
 * the completion (`shared`). Its steps take simulated time, so other events interleave with them.
 */
import type { StoredResponse, WorkContext, WorkResult } from 'idem';
import type { LedgerRow } from './backend.js';
import { RETRYABLE_STATUSES, T0, type Payload } from './scenario.js';
import type { Attempt, Incarnation, Sim } from './world.js';

type ProcessorReply =
  { kind: 'charged'; chargeId: string } | { kind: 'declined' } | { kind: 'unavailable'; status: number };

/**
 * The handler every process runs, and the card processor and separate ledger it writes to.
 *
 * @example
 * const result = await handler.run(incarnation, attempt, pk, lease)
 */
export class ChargeHandler {
  readonly #sim: Sim;
  readonly #processor = new Map<string, string>();
  #charges = 0;
  readonly #ownLedger = new Map<string, LedgerRow>();
  /**
   * Effects with a retryable answer are the handler's to offer and the engine's to drop: the phased engine
   * (Engine.begin) commits effects only with a final outcome. Before it, the engine passed them through, so the
   * handler offers them only to an engine that makes that promise (or to the planted defect that breaks it).
   */
  effectsOnFailure = false;

  constructor(sim: Sim) {
    this.#sim = sim;
  }

  /**
   * Runs the work for an attempt, telling the time checker when it starts and ends. `settles`: the lease is
   * settled as soon as the work ends (`Engine.run`), rather than once its answer has streamed (the binding).
   */
  async run(
    inc: Incarnation,
    attempt: Attempt,
    pk: string,
    ctx: WorkContext,
    settles = true,
  ): Promise<WorkResult<unknown>> {
    this.#sim.time.workStarted(inc, attempt.label, pk, ctx.signal, this.#sim.now);
    try {
      const result = await this.#work(inc, attempt, pk, ctx);
      attempt.effects = result.effects;
      return result;
    } finally {
      this.#sim.time.workEnded(attempt.label, this.#sim.now, settles);
    }
  }

  async #work(inc: Incarnation, attempt: Attempt, pk: string, ctx: WorkContext): Promise<WorkResult<unknown>> {
    const sim = this.#sim;
    const by = attempt.label;
    sim.log(() => `${inc.label} work ${by} starts: id=${ctx.id}${ctx.reclaimed ? ' (reclaimed)' : ''}`);
    sim.checker.onWorkStart(by, ctx.id, attempt.fingerprint);
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
        sim.scenario.defect === 'retryable-503-as-final' && reply.status === 503
          ? ({ outcome: 'failed-final' } as const)
          : {};
      if (sim.scenario.ledger === 'shared' && this.effectsOnFailure) {
        // A handler that hands its "failed attempt" row to effects with a retryable answer: the engine must drop them.
        const row: LedgerRow = { recordId: ctx.id, pk, chargeId: `failed-${by}`, amount: payload.amount };
        sim.count('effects offered with a retryable answer');
        return { response, ...outcome, effects: sim.backend.ledgerEffect(row) };
      }
      return { response, ...outcome };
    }
    if (sim.scenario.honoursAbort && ctx.signal.aborted) throw ctx.signal.reason;
    const row: LedgerRow = { recordId: ctx.id, pk, chargeId: reply.chargeId, amount: payload.amount };
    if (sim.scenario.ledger === 'shared') {
      const response = this.#charge(inc, row.chargeId, payload);
      return { response, resultId: row.chargeId, effects: sim.backend.ledgerEffect(row) };
    }
    // A separate ledger: the write carries the record id under a unique constraint (docs/DESIGN.md: The work's own writes).
    const stored = await this.#step(inc, attempt, 'write ledger', () => {
      const existing = this.#ownLedger.get(ctx.id);
      if (existing) return existing;
      this.#ownLedger.set(ctx.id, row);
      sim.checker.onLedgerRow(row);
      return row;
    });
    return { response: this.#charge(inc, stored.chargeId, payload), resultId: stored.chargeId };
  }

  #step<T>(inc: Incarnation, attempt: Attempt, name: string, effect: () => T): Promise<T> {
    const sim = this.#sim;
    const slow = sim.fault('slow-step', attempt);
    const lease = sim.scenario.leaseMs;
    // Slow: 0.3–2.5 leases; with a record kept only a few leases, up to 1.25 TTLs, so work outlives its record's
    // first expiresAt and only renewals carrying it forward keep the key.
    const span = sim.scenario.ttlMs < 10 * lease ? Math.max(lease, sim.scenario.ttlMs / 2) : lease;
    const fixed = sim.scenario.exhaustive;
    const drawn = fixed
      ? name === 'call processor'
        ? fixed.workMs
        : 0
      : slow === undefined
        ? attempt.rng.int(1, Math.floor(lease / 4))
        : Math.floor(span * (0.3 + 2.2 * attempt.rng.next()));
    if (slow !== undefined)
      sim.log(() => `${inc.label} work ${attempt.label}: ${name} ✗ fault ${slow}: slow, takes ${drawn} ms`);
    // Stuck on a slow call past a timeout middleware's answer (an `early-answer` fault): longer still.
    const stuck = attempt.stallUntil === undefined ? 0 : attempt.stallUntil - sim.now;
    attempt.stallUntil = undefined;
    const ms = Math.max(drawn, stuck);
    if (stuck > drawn) sim.log(() => `${inc.label} work ${attempt.label}: ${name} is stuck, takes ${ms} ms`);
    return new Promise<T>((resolve) => {
      const done = (): void => {
        // A process cut off from the network (a `partition`) cannot reach the processor either: the call waits.
        const cut = inc.partitionedUntil - sim.now;
        if (name === 'call processor' && cut > 0) {
          sim.log(() => `${inc.label} work ${attempt.label}: ${name} waits ${cut} ms for the network`);
          inc.clock.setTimeout(done, cut);
          return;
        }
        const value = effect();
        sim.log(
          () =>
            `${inc.label} work ${attempt.label}: ${name} → ${typeof value === 'object' ? JSON.stringify(value) : String(value)}`,
        );
        resolve(value);
      };
      inc.clock.setTimeout(done, ms);
    });
  }

  /** The card processor, idempotent on the record id it is given (as a real one is on its idempotency key). */
  #callProcessor(attempt: Attempt, id: string, payload: Payload): ProcessorReply {
    const sim = this.#sim;
    const down = sim.fault('processor-down', attempt);
    if (down !== undefined) {
      const status = sim.scenario.exhaustive?.downStatus ?? attempt.rng.pick(RETRYABLE_STATUSES);
      sim.log(() => `    ✗ fault ${down}: the processor is down (nothing charged), answered ${status}`);
      return { kind: 'unavailable', status };
    }
    if (payload.source === 'tok_chargeDeclined') return { kind: 'declined' };
    let chargeId = this.#processor.get(id);
    if (chargeId === undefined) {
      chargeId = `ch_${++this.#charges}`;
      this.#processor.set(id, chargeId);
      const charged = chargeId;
      sim.log(() => `    processor: NEW CHARGE ${charged} of ${payload.amount} for id ${id}`);
      sim.checker.onCharge(attempt.label, id, chargeId);
    }
    const lost = sim.fault('processor-reply-lost', attempt);
    if (lost !== undefined) {
      sim.log(() => `    ✗ fault ${lost}: the processor's reply is lost (the charge stands)`);
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
}
