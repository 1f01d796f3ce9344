/**
 * Several demo server processes on one store, and the nemesis that breaks them: kill -9 (then restart),
 * SIGSTOP/SIGCONT (a frozen process: a real zombie), and, through one fault proxy per process, the store link
 * cut or stalled and then restored. Every action is drawn from a seeded random stream and recorded with its
 * time window, so the checker can tell which attempts a fault could have touched.
 */
import type { FaultProxy } from '../fault-proxy.js';
import { startDemo, type DemoProcess } from '../harness.js';

/** A seeded stream of numbers in [0, 1) (mulberry32). */
export interface Random {
  (): number;
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
}

/**
 * @example
 * const rng = random(42); rng.int(1, 6)
 */
export function random(seed: number): Random {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return Object.assign(next, {
    int: (min: number, max: number) => min + Math.floor(next() * (max - min + 1)),
    pick: <T>(items: readonly T[]) => items[Math.floor(next() * items.length)] as T,
    chance: (p: number) => next() < p,
  });
}

/** One server process's place in the cluster; the process changes when it is killed and restarted. */
export interface Slot {
  readonly index: number;
  readonly env: Record<string, string>;
  readonly skewMs: number;
  /** Between this process and its store (PostgreSQL, Redis); none for SQLite. */
  readonly proxy: FaultProxy | undefined;
  process: DemoProcess | undefined;
  state: 'up' | 'paused' | 'down';
  /** A nemesis action holds this slot. */
  busy: boolean;
  /** Requests the clients have in flight on the current process. */
  inFlight: number;
  /** What earlier (killed) processes of this slot printed. */
  readonly outputs: string[];
}

export type FaultKind = 'kill' | 'pause' | 'cut' | 'stall';

/** A nemesis action, from when it began to when the slot was whole again. */
export interface Fault {
  readonly kind: FaultKind;
  readonly slots: readonly number[];
  readonly start: number;
  end: number;
  /** For kills: requests in flight on the killed process (kill -9 mid-request when > 0). */
  readonly inFlight?: number;
}

/**
 * Starts `count` processes, process i with `env(i)` (its store URL, its clock skew).
 *
 * @example
 * const slots = await startCluster(3, (i) => ({ IDEM_STORE: url, IDEM_CLOCK_SKEW_MS: String(skews[i]) }), skews, proxies)
 */
export async function startCluster(
  count: number,
  env: (index: number) => Record<string, string>,
  skews: readonly number[],
  proxies: ReadonlyArray<FaultProxy | undefined>,
): Promise<Slot[]> {
  const slots: Slot[] = Array.from({ length: count }, (_, index) => ({
    index,
    env: env(index),
    skewMs: skews[index] ?? 0,
    proxy: proxies[index],
    process: undefined,
    state: 'down',
    busy: false,
    inFlight: 0,
    outputs: [],
  }));
  // One first (it migrates), then the rest together.
  const [first, ...rest] = slots;
  if (first) await up(first);
  await Promise.all(rest.map(up));
  return slots;
}

async function up(slot: Slot): Promise<void> {
  if (slot.process) slot.outputs.push(slot.process.output());
  // A restart can fail through no fault of the library's: under load its migration met PostgreSQL's statement
  // timeout while another process's link was stalled (chaos run, seed 525939844). Try again, as a supervisor would.
  for (let tries = 1; ; tries++) {
    try {
      slot.process = await startDemo(slot.env);
      break;
    } catch (error) {
      if (tries >= 3) throw error;
      slot.outputs.push(`(restart ${tries} failed: ${String(error)})`);
    }
  }
  slot.state = 'up';
  slot.inFlight = 0;
}

/** What the nemesis may do, and for how long. */
export interface NemesisOptions {
  readonly kinds: readonly FaultKind[];
  /** The lease, so that a pause outlives it (the paused process becomes a zombie). */
  readonly leaseMs: number;
  /** Milliseconds between the starts of two actions. */
  readonly everyMs: readonly [number, number];
  /** Slots the nemesis never touches (so that slow work there can be judged on renewal alone). */
  readonly spare?: readonly number[];
  /** Told when a process is frozen, and for how long: the workload sends impatient duplicates meanwhile. */
  readonly onFreeze?: (slot: Slot, ms: number) => void;
  /** The processes a kill or a freeze should rather hit (waited for, briefly). Default: requests in flight. */
  readonly prey?: (slot: Slot, kind: 'kill' | 'pause') => boolean;
}

/**
 * Breaks the cluster until `stop()` is called, then heals it: every paused process continued, every proxy
 * restored, every killed process restarted. `faults` lists what was done.
 *
 * @example
 * const nemesis = startNemesis(slots, rng, { kinds: ['kill', 'pause'], leaseMs: 3000, everyMs: [800, 1400] })
 * await workload; await nemesis.stop()
 */
export function startNemesis(
  slots: Slot[],
  rng: Random,
  { kinds, leaseMs, everyMs, spare = [], onFreeze, prey = (slot) => slot.inFlight > 0 }: NemesisOptions,
) {
  const faults: Fault[] = [];
  const actions = new Set<Promise<void>>();
  let stopping = false;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const track = (action: Promise<void>) => {
    actions.add(action);
    void action.finally(() => actions.delete(action));
  };

  const act = async (kind: FaultKind): Promise<void> => {
    const free = slots.filter((s) => !s.busy && s.state === 'up' && !spare.includes(s.index));
    const upCount = slots.filter((s) => s.state === 'up').length;
    if (free.length === 0) return;
    if (kind === 'kill' || kind === 'pause') {
      if (upCount < 2) return; // keep one process serving
      // Prefer a process with requests in flight (kill -9 or freeze it mid-request): wait a little for one.
      const wanted = (s: Slot) => prey(s, kind);
      for (let i = 0; i < (kind === 'pause' ? 60 : 20) && !free.some(wanted); i++) await sleep(50);
      const busyOnes = free.filter((s) => wanted(s) && !s.busy && s.state === 'up');
      const candidates = busyOnes.length > 0 ? busyOnes : free.filter((s) => !s.busy && s.state === 'up');
      if (candidates.length === 0) return;
      const slot = rng.pick(candidates);
      slot.busy = true;
      const fault: Fault = { kind, slots: [slot.index], start: Date.now(), end: Number.NaN, inFlight: slot.inFlight };
      faults.push(fault);
      const child = slot.process?.child;
      if (kind === 'kill') {
        slot.state = 'down';
        await slot.process?.stop('SIGKILL');
        await sleep(rng.int(200, 600));
        await up(slot);
      } else {
        // Frozen well past the lease (and the skew between clocks), so a duplicate can take the key over meanwhile.
        const frozenMs = rng.int(leaseMs + 1_500, leaseMs + 2_500);
        slot.state = 'paused';
        child?.kill('SIGSTOP');
        onFreeze?.(slot, frozenMs);
        await sleep(frozenMs);
        child?.kill('SIGCONT');
        slot.state = 'up';
      }
      fault.end = Date.now();
      slot.busy = false;
      return;
    }
    const withProxy = free.filter((s) => s.proxy);
    if (withProxy.length === 0) return;
    // Mostly one process loses its store (a partial partition); sometimes all of them (but the spared) do.
    const targets = rng.chance(0.3) ? withProxy : [rng.pick(withProxy)];
    for (const s of targets) s.busy = true;
    const fault: Fault = { kind, slots: targets.map((s) => s.index), start: Date.now(), end: Number.NaN };
    faults.push(fault);
    for (const s of targets) {
      if (kind === 'cut') s.proxy?.cut();
      else s.proxy?.stall();
    }
    // A stall longer than the store timeouts (2–2.5 s) makes clients give up on statements that still run later.
    await sleep(kind === 'cut' ? rng.int(300, 1_200) : rng.int(300, 3_000));
    for (const s of targets) s.proxy?.restore();
    fault.end = Date.now();
    for (const s of targets) s.busy = false;
  };

  // Kinds in a seeded shuffled round robin, so that every kind is injected, and about equally often.
  let deck: FaultKind[] = [];
  const loop = (async () => {
    while (!stopping) {
      await sleep(rng.int(everyMs[0], everyMs[1]));
      if (stopping) break;
      if (deck.length === 0) deck = [...kinds].sort(() => rng() - 0.5);
      track(act(deck.pop() as FaultKind));
    }
  })();

  return {
    faults,
    /** No new actions from now on (those under way run their course). */
    calm(): void {
      stopping = true;
    },
    async stop(): Promise<void> {
      stopping = true;
      await loop;
      await Promise.all(actions);
      for (const slot of slots) {
        slot.proxy?.restore();
        if (slot.state === 'paused') slot.process?.child.kill('SIGCONT');
      }
    },
  };
}

/** Everything every process of the cluster printed, killed ones included. */
export function clusterOutput(slots: readonly Slot[]): string {
  return slots.flatMap((slot) => [...slot.outputs, slot.process?.output() ?? '']).join('\n');
}

/** Stops every process of the cluster (SIGTERM, then SIGKILL for a straggler). */
export async function stopCluster(slots: readonly Slot[]): Promise<void> {
  await Promise.all(
    slots.map(async (slot) => {
      const process = slot.process;
      if (!process) return;
      process.child.kill('SIGCONT');
      const timer = setTimeout(() => process.child.kill('SIGKILL'), 5_000);
      await process.stop('SIGTERM');
      clearTimeout(timer);
    }),
  );
}
