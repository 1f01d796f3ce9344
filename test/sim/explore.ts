/**
 * @module The exhaustive mode: stateless model checking of the real engine on small fixed scenarios
 * (./exhaustive.ts). A run is the seeded simulator's, with every nondeterministic choice of its scheduler taken
 * from a *choice sequence* instead of the seed: which pending event runs next among those due at the earliest
 * time (or several store calls started in one turn), whether a crash, a lease lapse or a clock step strikes
 * before it, and whether a fault fires at a decision point (a stalled store call, a processor outage…). A run
 * follows its prefix, then takes the first alternative at every later choice and records the others; the search
 * backtracks depth first, re-running the engine from the start for each prefix.
 *
 * Pruning: at each step the state is hashed — the time, the processes, the faults used, the store's records, the
 * pending events, and each request's own history (every trace line its steps produced, in order). Two schedules
 * that differ only in the order of steps that do not touch each other (independent requests, or the same record
 * read in either order) reach the same hash, and the second stops there: partial-order reduction by state
 * hashing. The hash includes the schedule's length, so a state reached by a shorter schedule is explored again
 * (in these scenarios it never is: reordered steps make schedules of one length) and the least length of a
 * counterexample found is the shortest there is; once one is known, schedules as long are not pursued.
 */
import { createHash } from 'node:crypto';
import { recordPk } from 'idem';
import { responseBytes, type InvariantName, type Violation } from './checker.js';
import type { BudgetKind, FaultKind, Scenario } from './scenario.js';
import { simulate } from './simulator.js';
import type { Attempt, Choice, Driver, DriverFault, DriverView, Event } from './world.js';

/** Decision-point faults (`Sim.fault`) and the budget each draws on; the rest never fire in this mode. */
const POINT_FAULTS: Partial<Record<FaultKind, BudgetKind>> = {
  'store-hang': 'stall',
  'renew-stall': 'stall',
  'store-delay': 'delay',
  'processor-down': 'processor-down',
  'early-answer': 'early-answer',
  'client-gone': 'client-gone',
};
const STEP_FAULTS: ReadonlyArray<readonly [DriverFault, BudgetKind]> = [
  ['crash', 'crash'],
  ['lapse', 'lapse'],
  ['clock-step', 'clock-step'],
];

/** What a search shares across its runs. */
interface Search {
  readonly visited: Set<string>;
  readonly stack: number[][];
  readonly maxDepth: number;
  /** Prune at states explored already (off: the whole tree of schedules, to check the pruning against). */
  readonly hashing: boolean;
  /** The length of the shortest counterexample found so far (Infinity: none). */
  best: number;
}

/** One step's description, as a schedule prints it. */
function describeEvent(e: Event): string {
  const what = e.what ?? 'timer';
  const where = e.owner ? ` on ${e.owner.label}` : '';
  return `${what}${e.by && !what.includes(e.by) ? ` (${e.by})` : ''}${where}`;
}

/** Who a step belongs to: its request, else its process, else what it is (a client's send, a restart). */
function actorOf(choice: Choice): string {
  if (choice.kind !== 'events') return 'world';
  return choice.events.map((e) => e.by ?? e.owner?.label ?? e.what ?? 'world').join('+');
}

/**
 * Takes each choice from its prefix, then the first alternative, pushing the others on the search's stack.
 * Without a search it only replays its prefix (the shortest counterexample, printed).
 */
class ChoiceDriver implements Driver {
  readonly path: number[] = [];
  /** Steps taken plus faults fired: the schedule's length. */
  length = 0;
  stop: 'pruned' | 'bounded' | 'cut' | undefined;
  readonly #prefix: readonly number[];
  readonly #search: Search | undefined;
  readonly #used: Partial<Record<BudgetKind, number>> = {};
  readonly #histories = new Map<string, string>();
  readonly #budget: Readonly<Partial<Record<BudgetKind, number>>>;
  #actor = 'world';
  #seenLines = 0;

  constructor(scenario: Scenario, prefix: readonly number[], search?: Search) {
    this.#budget = scenario.exhaustive?.budget ?? {};
    this.#prefix = prefix;
    this.#search = search;
  }

  async choose(candidates: readonly Event[], world: DriverView): Promise<Choice> {
    this.#absorb(world);
    const alternatives = this.#alternatives(candidates, world);
    const index = this.path.length;
    let pick = this.#prefix[index] ?? 0;
    const search = this.#search;
    if (index >= this.#prefix.length && search) {
      if (this.length >= search.maxDepth) return this.#halt('bounded');
      if (this.length + 1 >= search.best) return this.#halt('cut');
      if (search.hashing) {
        const hash = await this.#hash(world);
        if (search.visited.has(hash)) return this.#halt('pruned');
        search.visited.add(hash);
      }
      for (let i = alternatives.length - 1; i >= 1; i--) search.stack.push([...this.path, i]);
      pick = 0;
    }
    const choice = alternatives[pick] as Choice;
    this.path.push(pick);
    this.length++;
    if (choice.kind === 'fault') this.#used[choice.fault] = (this.#used[choice.fault] ?? 0) + 1;
    this.#actor = actorOf(choice);
    return choice;
  }

  fault(kind: FaultKind, _attempt: Attempt): boolean {
    const budget = POINT_FAULTS[kind];
    if (!budget || (this.#used[budget] ?? 0) >= (this.#budget[budget] ?? 0)) return false;
    const index = this.path.length;
    let pick = this.#prefix[index] ?? 0;
    const search = this.#search;
    if (index >= this.#prefix.length && search) {
      if (this.length + 1 < search.best && this.length < search.maxDepth) search.stack.push([...this.path, 1]);
      pick = 0;
    }
    this.path.push(pick);
    if (pick === 0) return false;
    this.length++;
    this.#used[budget] = (this.#used[budget] ?? 0) + 1;
    return true;
  }

  #halt(why: 'pruned' | 'bounded' | 'cut'): Choice {
    this.stop = why;
    return { kind: 'stop' };
  }

  #alternatives(candidates: readonly Event[], world: DriverView): Choice[] {
    const out: Choice[] = candidates.map((e) => ({ kind: 'events', events: [e], label: describeEvent(e) }));
    const arrivals = candidates.filter((e) => e.arrive);
    if (arrivals.length > 1) {
      out.push({
        kind: 'events',
        events: arrivals,
        label: `${arrivals.length} store calls start in one turn: ${arrivals.map(describeEvent).join('; ')}`,
      });
    }
    if (world.settling) return out;
    const budget = this.#budget;
    for (const [fault, kind] of STEP_FAULTS) {
      if ((this.#used[kind] ?? 0) >= (budget[kind] ?? 0)) continue;
      for (const inc of world.incarnations) {
        if (!inc.alive || (fault === 'lapse' && inc.partitionedUntil > world.now)) continue;
        const what =
          fault === 'crash'
            ? `${inc.label} crashes (restarts at once)`
            : fault === 'lapse'
              ? `${inc.label} loses the store and the network for a lease (${world.scenario.leaseMs + 1} ms): its lease lapses`
              : `${inc.label}'s clock steps ${world.scenario.exhaustive?.clockStepMs ?? 0} ms forward`;
        out.push({ kind: 'fault', fault, process: inc.proc, label: `✗ ${what}` });
      }
    }
    return out;
  }

  /** The trace lines since the last step belong to that step's request: its history grows by them. */
  #absorb(world: DriverView): void {
    const lines = world.lines;
    if (this.#seenLines === lines.length) return;
    let text = '';
    for (let i = this.#seenLines; i < lines.length; i++) {
      const line = lines[i] as string;
      const body = line.slice(line.indexOf('] ') + 2);
      if (!body.startsWith('step ')) text += `${body}\n`;
    }
    this.#seenLines = lines.length;
    const prior = this.#histories.get(this.#actor) ?? '';
    this.#histories.set(this.#actor, createHash('sha1').update(prior).update(text).digest('base64'));
  }

  async #hash(world: DriverView): Promise<string> {
    const now = world.now;
    const h = createHash('sha1');
    // The schedule's length too: a state is one state at one depth, so depth first finds the shortest schedule.
    h.update(`${now}|${this.length}|${JSON.stringify(this.#used)}\n`);
    for (const inc of world.incarnations) {
      const cut = Math.max(0, inc.partitionedUntil - now);
      h.update(`${inc.label} ${inc.alive} ${cut} ${Math.max(0, inc.pausedUntil - now)} ${world.offset(inc.proc)}\n`);
    }
    for (const key of world.scenario.keys) {
      const record = await world.backend.observe(recordPk(key.scope, key.key));
      h.update(
        record ? JSON.stringify({ ...record, response: record.response && responseBytes(record.response) }) : '-',
      );
    }
    const pending = world.pending.map(
      (e) => `${e.at - now}|${e.owner?.label ?? ''}|${e.by ?? ''}|${e.what ?? ''}|${e.arrive ? 1 : 0}`,
    );
    h.update(pending.sort().join('\n'));
    h.update(
      [...this.#histories]
        .map(([actor, digest]) => `${actor}=${digest}`)
        .sort()
        .join('\n'),
    );
    return h.digest('base64');
  }
}

export interface Counterexample {
  readonly invariant: InvariantName;
  readonly message: string;
  /** Steps taken plus faults fired at decision points. */
  readonly length: number;
  /** The choice sequence that replays it. */
  readonly path: readonly number[];
}

export interface Exploration {
  /** Schedules run: each ran to quiescence, or stopped at a state explored already. */
  readonly schedules: number;
  /** Schedules that ran to the end (quiescence, or an invariant broken). */
  readonly complete: number;
  /** Schedules stopped at a state explored already (at the same length). */
  readonly pruned: number;
  /** Distinct states hashed. */
  readonly states: number;
  /** Schedules stopped by the depth bound: nonzero means the exploration is incomplete. */
  readonly bounded: number;
  /** Schedules not pursued past the length of a counterexample already found. */
  readonly cut: number;
  readonly violations: number;
  readonly byInvariant: Readonly<Record<string, number>>;
  readonly shortest: Counterexample | undefined;
  /** Every schedule was explored: no bound was hit. */
  readonly completed: boolean;
  readonly wallMs: number;
}

/**
 * Explores every schedule of a small scenario, depth first.
 *
 * @example
 * const result = await explore(exhaustiveScenario('double-submit'))
 * console.log(result.schedules, result.completed)
 */
export async function explore(scenario: Scenario, { maxDepth = 400, hashing = true } = {}): Promise<Exploration> {
  const started = performance.now();
  const search: Search = { visited: new Set(), stack: [[]], maxDepth, hashing, best: Infinity };
  const n = { schedules: 0, complete: 0, pruned: 0, bounded: 0, cut: 0, violations: 0 };
  const byInvariant: Record<string, number> = {};
  let shortest: Counterexample | undefined;
  for (let prefix = search.stack.pop(); prefix; prefix = search.stack.pop()) {
    const driver = new ChoiceDriver(scenario, prefix, search);
    const result = await simulate(scenario.seed, {}, { scenario, driver, trace: true, maxSteps: maxDepth * 4 });
    n.schedules++;
    n[driver.stop ?? 'complete']++;
    const v = result.violation;
    if (!v) continue;
    n.violations++;
    byInvariant[v.invariant] = (byInvariant[v.invariant] ?? 0) + 1;
    if (!shortest || driver.length < shortest.length) {
      shortest = { invariant: v.invariant, message: v.message, length: driver.length, path: [...driver.path] };
      search.best = driver.length;
    }
  }
  return {
    ...n,
    states: search.visited.size,
    byInvariant,
    shortest,
    completed: n.bounded === 0,
    wallMs: performance.now() - started,
  };
}

/**
 * Replays a choice sequence with its trace: the counterexample, step by step.
 *
 * @example
 * const { trace } = await replaySchedule(scenario, result.shortest.path)
 */
export async function replaySchedule(
  scenario: Scenario,
  path: readonly number[],
): Promise<{ readonly trace: readonly string[]; readonly violation: Violation | undefined; readonly length: number }> {
  const driver = new ChoiceDriver(scenario, path);
  const result = await simulate(scenario.seed, {}, { scenario, driver, trace: true });
  return { trace: result.trace, violation: result.violation, length: driver.length };
}
