/**
 * @module Test support for the adapters' time tests: what the handlers did (executions, how many ran at once, the
 * id and `reclaimed` each saw), the signals a case orders its requests by, and a bounded poll.
 */

import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { waitFor } from '../packages/idem/src/testing/fixtures.js';

/** What an execution saw of its idempotency context (undefined on an unguarded request). */
type Seen = { readonly id: string; readonly reclaimed: boolean } | undefined;

/** Counts executions of the work and how many ran at once; holds them while a case keeps its gate shut. */
export class Work {
  runs = 0;
  running = 0;
  /** The most executions that were running at one time. */
  most = 0;
  readonly seen: Array<{ readonly id: string; readonly reclaimed: boolean }> = [];
  readonly #signals = new Map<string, Array<() => void>>();
  #gate: Promise<void> = Promise.resolve();
  #open: () => void = () => {};

  /** Shuts the gate: executions started from now wait in {@link Work.run} until {@link Work.open}. */
  hold(): void {
    this.#gate = new Promise((resolve) => (this.#open = resolve));
  }
  open(): void {
    this.#open();
  }

  /** One execution from start to end, waiting at the gate. Resolves with its number (1 for the first). */
  async run(context: Seen): Promise<number> {
    const n = this.start(context);
    try {
      await this.#gate;
    } finally {
      this.end();
    }
    return n;
  }
  /** An execution begins (for work that ends on an event, not a promise: call {@link Work.end} then). */
  start(context: Seen): number {
    this.seen.push({ id: context?.id ?? '', reclaimed: context?.reclaimed ?? false });
    this.running++;
    this.most = Math.max(this.most, this.running);
    this.notify('start');
    return ++this.runs;
  }
  end(): void {
    this.running--;
    this.notify('end');
  }

  /** What {@link Work.seen} holds when a second execution took the first one's key over: the same id, reclaimed. */
  takenOver(): Array<{ readonly id: string; readonly reclaimed: boolean }> {
    const id = this.seen[0]?.id ?? 'none';
    return [
      { id, reclaimed: false },
      { id, reclaimed: true },
    ];
  }

  /** Resolves at the next `notify(signal)`. */
  next(signal: string): Promise<void> {
    return new Promise((resolve) => this.#signals.set(signal, [...(this.#signals.get(signal) ?? []), resolve]));
  }
  notify(signal: string): void {
    for (const resolve of this.#signals.get(signal)?.splice(0) ?? []) resolve();
  }
}

/** Calls `attempt` until `done(result)` (every 20 ms, at most `withinMs`); rejects with the last result if never. */
export async function until<T>(attempt: () => Promise<T>, done: (result: T) => boolean, withinMs = 5_000): Promise<T> {
  let result!: T;
  await waitFor(
    () => `done, still ${JSON.stringify(result)}`,
    async () => done((result = await attempt())),
    {
      timeoutMs: withinMs,
      everyMs: 20,
    },
  );
  return result;
}

/**
 * A source that sends one line, then, on execution `n` 1, waits for good (after notifying `streaming`); later
 * executions end after the line.
 */
export function lineThenWait(work: Work, n: number): Readable {
  let pushed = false;
  return new Readable({
    read() {
      if (pushed) return;
      pushed = true;
      this.push('line 1\n');
      if (n > 1) this.push(null);
      else work.notify('streaming');
    },
  });
}

/**
 * Server-sent events on `res`: the head and a first event, then, on execution `n` 1, an event every 10 ms until the
 * client leaves (after notifying `streaming`; the execution ends then); later executions end after the first event.
 */
export function eventsUntilGone(work: Work, n: number, res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.flushHeaders();
  res.write('data: 1\n\n');
  if (n > 1) {
    res.end();
    return;
  }
  const ticks = setInterval(() => res.write('data: tick\n\n'), 10);
  res.once('close', () => {
    clearInterval(ticks);
    work.end();
  });
  work.notify('streaming');
}
