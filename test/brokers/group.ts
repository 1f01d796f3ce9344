/**
 * Runs consumer processes (`rabbitmq-consumer.ts`, `nats-consumer.ts`) for the broker tests and collects what
 * they print: one JSON event per line, in the order the test process read them. Tests wait on events, never on
 * a fixed sleep. A process that exits without the test stopping it adds a `crashed` event: waits fail at once.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import type { ConsumerEvent } from './kit.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

type EventOf<K extends ConsumerEvent['event']> = Extract<ConsumerEvent, { event: K }>;

export class ConsumerGroup {
  readonly events: ConsumerEvent[] = [];
  readonly #children = new Map<string, { child: ChildProcessWithoutNullStreams; exited: Promise<string> }>();
  /** Processes the test stopped or killed: their exit is expected. */
  readonly #stopping = new Set<string>();
  readonly #waiters = new Set<() => void>();
  #output = '';

  constructor(
    readonly script: string,
    readonly env: Record<string, string>,
  ) {}

  /** Starts one process per name, all at once; resolves when every one is consuming. */
  async start(names: readonly string[]): Promise<void> {
    for (const name of names) {
      const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/brokers', this.script)], {
        cwd: ROOT,
        env: { PATH: process.env.PATH, NODE_NO_WARNINGS: '1', ...this.env, CONSUMER: name },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const exited = new Promise<string>((resolve) =>
        child.once('exit', (code, signal) => resolve(String(signal ?? code))),
      );
      this.#children.set(name, { child, exited });
      createInterface({ input: child.stdout }).on('line', (line) => {
        this.#output += `${name}> ${line}\n`;
        if (!line.startsWith('{')) return;
        this.events.push(JSON.parse(line) as ConsumerEvent);
        for (const wake of this.#waiters) wake();
      });
      child.stderr.on('data', (chunk: Buffer) => (this.#output += `${name}! ${chunk.toString()}`));
      void exited.then((how) => {
        this.#output += `${name} exited: ${how}\n`;
        if (!this.#stopping.has(name)) this.events.push({ consumer: name, event: 'crashed', error: `exited: ${how}` });
        for (const wake of this.#waiters) wake();
      });
    }
    await Promise.all(names.map((name) => this.next('ready', (e) => e.consumer === name, 60_000)));
  }

  /** The first event of kind `event` that satisfies `match` (already seen or still to come), within `timeoutMs`. */
  next<K extends ConsumerEvent['event']>(
    event: K,
    match: (e: EventOf<K>) => boolean = () => true,
    timeoutMs = 20_000,
  ): Promise<EventOf<K>> {
    return this.until(
      () => this.events.find((e): e is EventOf<K> => e.event === event && match(e as EventOf<K>)),
      `a ${event} event`,
      timeoutMs,
    );
  }

  /** Resolves once `n` events of kind `event` about `payoutId` have arrived, with all of them. */
  count<K extends ConsumerEvent['event']>(
    event: K,
    payoutId: string,
    n: number,
    timeoutMs = 20_000,
  ): Promise<Array<EventOf<K>>> {
    return this.until(
      () => (this.of(event, payoutId).length >= n ? this.of(event, payoutId) : undefined),
      `${n} ${event} events`,
      timeoutMs,
    );
  }

  /** Re-evaluates `probe` on every event until it returns a value; fails at once if a consumer crashed. */
  until<T>(probe: () => T | undefined, what: string, timeoutMs: number): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = probe();
        const crashed = this.events.some((e) => e.event === 'crashed');
        if (found === undefined && !crashed) return;
        this.#waiters.delete(check);
        clearTimeout(timer);
        if (found !== undefined) resolve(found);
        else reject(new Error(`a consumer crashed while waiting for ${what}:\n${this.#output}`));
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`no ${what} in ${timeoutMs} ms:\n${this.#output}`));
      }, timeoutMs);
      this.#waiters.add(check);
      check();
    });
  }

  /** Events about one payout, of one kind. */
  of<K extends ConsumerEvent['event']>(event: K, payoutId: string): Array<EventOf<K>> {
    return this.events.filter((e): e is EventOf<K> => e.event === event && 'payoutId' in e && e.payoutId === payoutId);
  }

  /** Lets a process held at a hold point for `payoutId` go on. */
  release(name: string, payoutId: string): void {
    this.#children.get(name)?.child.stdin.write(`release ${payoutId}\n`);
  }

  /** kill -9; resolves once the process is gone (its broker connection then drops with it). */
  async kill(name: string): Promise<string> {
    const entry = this.#children.get(name);
    if (!entry) throw new Error(`no consumer ${name}`);
    this.#stopping.add(name);
    entry.child.kill('SIGKILL');
    const how = await entry.exited;
    this.#children.delete(name);
    return how;
  }

  get alive(): string[] {
    return [...this.#children.keys()];
  }

  /** SIGTERM to every process still running; SIGKILL after 10 s. */
  async stop(): Promise<void> {
    await Promise.all(
      [...this.#children].map(async ([name, { child, exited }]) => {
        this.#stopping.add(name);
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }),
    );
    this.#children.clear();
  }

  output(): string {
    return this.#output;
  }
}

/** Polls `read` (a broker's or the ledger's state) every 50 ms until `done(value)`, then returns the value. */
export async function poll<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  what: string,
  timeoutMs = 15_000,
): Promise<T> {
  let value!: T;
  await waitFor(
    () => `${what}, still ${JSON.stringify(value)}`,
    async () => done((value = await read())),
    {
      timeoutMs,
      everyMs: 50,
    },
  );
  return value;
}
