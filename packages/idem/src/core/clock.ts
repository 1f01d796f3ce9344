/**
 * @module The engine's only source of time. Inject one to control time in tests and simulations.
 */

/** An opaque timer handle returned by {@link Clock.setTimeout}. */
export type TimerHandle = unknown;

/**
 * Time as the engine sees it: `now()` in epoch milliseconds, and timers on the same time line.
 *
 * @example
 * const engine = createEngine({ store, clock: systemClock })
 */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The wall clock. Timers are unref'd so a pending lease renewal never keeps a process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => {
    const timer = setTimeout(callback, ms);
    // A pending renewal must not keep a process alive; some runtimes return a number, which has no unref.
    (timer as { unref?: () => void }).unref?.();
    return timer;
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * A clock that only moves when told to, with timers that fire as it passes them.
 *
 * @example
 * const clock = manualClock(Date.parse('2026-01-01T00:00:00Z'))
 * clock.advance(30_000)
 */
export interface ManualClock extends Clock {
  advance(ms: number): void;
  set(epochMs: number): void;
}

export function manualClock(start = 0): ManualClock {
  let now = start;
  let nextId = 1;
  const timers = new Map<number, { at: number; callback: () => void }>();
  const fireDue = (): void => {
    for (;;) {
      let due: [number, { at: number; callback: () => void }] | undefined;
      for (const entry of timers) if (entry[1].at <= now && (!due || entry[1].at < due[1].at)) due = entry;
      if (!due) return;
      timers.delete(due[0]);
      due[1].callback();
    }
  };
  return {
    now: () => now,
    setTimeout: (callback, ms) => {
      const id = nextId++;
      timers.set(id, { at: now + Math.max(0, ms), callback });
      return id;
    },
    clearTimeout: (handle) => {
      timers.delete(handle as number);
    },
    advance: (ms) => {
      now += ms;
      fireDue();
    },
    set: (epochMs) => {
      now = epochMs;
      fireDue();
    },
  };
}

/** True for an object with the three methods of a {@link Clock}. */
export function isClock(value: unknown): value is Clock {
  return (
    typeof value === 'object' &&
    value !== null &&
    ['now', 'setTimeout', 'clearTimeout'].every((m) => typeof (value as Record<string, unknown>)[m] === 'function')
  );
}
