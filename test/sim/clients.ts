/**
 * @module The clients and the server side of their requests: a client sends an attempt to a process, which runs
 * it through its engine (or refuses it, or holds it while frozen); the client retries on its own while its
 * budget lasts, after a timeout, a lost answer, a reset connection, a 409 or a 503.
 */
import { isIdempotencyError, recordPk, type RunResult, type StoredResponse } from 'idem';
import { serve, type Mishap } from './binding.js';
import { isFinal } from './checker.js';
import type { ChargeHandler } from './handler.js';
import type { Scenario } from './scenario.js';
import { current, makeAttempt, type Attempt, type Event, type Incarnation, type Seen, type Sim } from './world.js';

/**
 * Every client of one run, and what each attempt saw.
 *
 * @example
 * clients.send(attempt)
 */
export class Clients {
  readonly #sim: Sim;
  readonly #incarnations: readonly Incarnation[];
  readonly #handler: ChargeHandler;
  readonly #droppedRetries: ReadonlySet<string>;
  readonly #retriesLeft: number[];
  readonly #satisfied = new Set<number>();
  readonly #timeouts = new Map<string, Event>();
  readonly seen = new Map<string, Seen>();
  /** Clients' own retries that were sent. */
  readonly sentRetries: string[] = [];
  /** Client requests that reached a live process (the settling retries included). */
  requests = 0;

  constructor(
    sim: Sim,
    incarnations: readonly Incarnation[],
    handler: ChargeHandler,
    droppedRetries: ReadonlySet<string>,
  ) {
    this.#sim = sim;
    this.#incarnations = incarnations;
    this.#handler = handler;
    this.#droppedRetries = droppedRetries;
    this.#retriesLeft = sim.scenario.keys.map((k) => k.retries);
  }

  /** A client sends an attempt; unless it is a settling retry, it gives up waiting after its timeout. */
  send(attempt: Attempt): void {
    const sim = this.#sim;
    const plan = sim.scenario.keys[attempt.keyIndex] as Scenario['keys'][number];
    const inc = this.#incarnations[attempt.process] as Incarnation;
    const what = `${attempt.tampered ? 'TAMPERED ' : ''}${JSON.stringify(attempt.payload)}`;
    sim.log(() => `client ${attempt.label} → ${inc.label} ${recordPk(plan.scope, plan.key)} ${what}`);
    if (!attempt.settle) {
      const timeout = sim.at(
        sim.now + plan.timeoutMs,
        undefined,
        () => this.sees(attempt, { kind: 'nothing' }, `gives up after ${plan.timeoutMs} ms`),
        undefined,
        `client ${attempt.label} gives up`,
      );
      this.#timeouts.set(attempt.label, timeout);
    }
    this.#accept(attempt);
  }

  /** The server side of an attempt: refused by a dead process, held by a frozen one, else run by its engine. */
  #accept(attempt: Attempt, held = false): void {
    const sim = this.#sim;
    const plan = sim.scenario.keys[attempt.keyIndex] as Scenario['keys'][number];
    const inc = this.#incarnations[attempt.process] as Incarnation;
    const pk = recordPk(plan.scope, plan.key);
    if (inc.alive && inc.pausedUntil > sim.now) {
      sim.log(() => `    ${inc.label} is frozen: ${attempt.label} waits in its backlog`);
      sim.at(inc.pausedUntil, inc, () => this.#accept(attempt, true));
      return;
    }
    if (!inc.alive) return this.sees(attempt, { kind: 'nothing' }, 'connection refused (the process is down)');
    if (held) sim.log(() => `${inc.label} wakes and picks up ${attempt.label}`);
    this.requests++;
    inc.inflight.set(attempt.label, attempt);
    sim.time.requestAccepted(inc, attempt.label, sim.now);
    const request = { scope: plan.scope, key: plan.key, fingerprint: attempt.fingerprint };
    const mishap = this.#mishap(attempt);
    const running: Promise<RunResult | undefined> = current.run(attempt, () =>
      mishap
        ? serve(sim, inc, attempt, request, pk, this.#handler, mishap, {
            early: (status) => {
              inc.inflight.delete(attempt.label);
              sim.log(() => `client ${attempt.label} gets ${status} from a timeout middleware`);
              this.sees(attempt, { kind: 'early', status });
            },
            gone: () => {
              inc.inflight.delete(attempt.label);
              this.sees(attempt, { kind: 'nothing' }, 'leaves while the answer streams');
            },
          })
        : inc.engine.run(request, (ctx) => this.#handler.run(inc, attempt, pk, ctx)),
    );
    void running.then(
      (result) => {
        if (!inc.alive) return;
        sim.time.requestDone(attempt.label);
        if (result === undefined)
          return sim.log(() => `${inc.label} is done with ${attempt.label} (its answer left early)`);
        inc.inflight.delete(attempt.label);
        sim.log(
          () => `${inc.label} answers ${attempt.label}: ${result.replayed ? 'replay ' : ''}${preview(result.response)}`,
        );
        // Every answer the engine gives counts, whether or not it reaches the client: stricter than "received".
        sim.checker.onAnswer(attempt.label, result);
        const lost = sim.fault('response-lost', attempt);
        if (lost !== undefined)
          this.sees(attempt, { kind: 'nothing' }, `✗ fault ${lost}: the answer is lost on the way`);
        else this.sees(attempt, { kind: 'answer', result });
      },
      (error: unknown) => {
        if (!inc.alive) return;
        sim.time.requestDone(attempt.label);
        inc.inflight.delete(attempt.label);
        if (isIdempotencyError(error)) {
          sim.log(() => `${inc.label} refuses ${attempt.label}: ${error.code}`);
          this.sees(attempt, { kind: 'error', code: error.code, retryAfterMs: error.retryAfterMs });
        } else {
          sim.log(() => `${inc.label} fails ${attempt.label}: ${String(error)}`);
          sim.checker.fail('unexpected-error', `${attempt.label} on ${inc.label}: ${String(error)}`);
        }
      },
    );
  }

  /**
   * What goes wrong with this request at the binding (drawn as it arrives): a timeout middleware's early answer,
   * a client that leaves while the answer streams. Undefined: neither, and the engine's own `run` serves it.
   */
  #mishap(attempt: Attempt): Mishap | undefined {
    const lease = this.#sim.scenario.leaseMs;
    const early = this.#sim.fault('early-answer', attempt);
    const gone = this.#sim.fault('client-gone', attempt);
    if (early === undefined && gone === undefined) return undefined;
    const { rng } = attempt;
    // The exhaustive mode fixes them: the middleware answers at half a lease, the handler is stuck a lease more;
    // the client leaves at once from an answer a lease long that never ends.
    const fixed = this.#sim.scenario.exhaustive !== undefined;
    const afterMs = fixed ? lease / 2 : rng.int(Math.floor(lease / 4), 2 * lease);
    const stallMs = fixed ? afterMs + lease : afterMs + rng.int(1, 2 * lease);
    const streamMs = fixed ? lease : rng.int(1, 2 * lease);
    if (early !== undefined) attempt.stallUntil = this.#sim.now + stallMs;
    return {
      ...(early === undefined ? {} : { early: { id: early, afterMs, stallMs } }),
      ...(gone === undefined
        ? {}
        : {
            gone: {
              id: gone,
              streamMs,
              leaveMs: fixed ? 0 : rng.int(0, streamMs - 1),
              stuck: fixed || rng.chance(0.5),
            },
          }),
    };
  }

  /**
   * What the client does with what it saw of an attempt (once per attempt: a timeout and a late answer do not
   * both count). A final answer satisfies it; a mismatch stops it; anything else (nothing, a 503, a 409, a lost
   * lease, an unreachable store) makes it retry — the same request, to any process — while its retries last.
   */
  sees(attempt: Attempt, seen: Seen, why?: string): void {
    const sim = this.#sim;
    if (this.seen.has(attempt.label)) return;
    this.seen.set(attempt.label, seen);
    if (why !== undefined) sim.log(() => `client ${attempt.label}: ${why}; it sees nothing`);
    if (attempt.settle) return;
    sim.cancel(this.#timeouts.get(attempt.label));
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
        : attempt.rng.int(0, sim.scenario.leaseMs);
    const process = attempt.rng.int(0, sim.scenario.processes.length - 1);
    const label = `${attempt.label}.r`;
    if (this.#droppedRetries.has(label)) return;
    this.sentRetries.push(label);
    sim.count('client retries');
    const retry = makeAttempt(sim.scenario.seed, label, { ...attempt, process });
    sim.log(() => `client ${attempt.label} will retry as ${label} in ${delay} ms`);
    sim.at(sim.now + delay, undefined, () => this.send(retry));
  }
}

/**
 * A response's status and body, for traces.
 *
 * @example
 * preview(response) // '201 {"id":"ch_1",…}'
 */
export function preview(response: StoredResponse): string {
  return `${response.status} ${Buffer.from(response.body).toString('utf8')}`;
}
