/**
 * How the store reaches Redis: every command counted and reported to `onRoundTrip`, scripts sent by `EVALSHA`
 * with one `EVAL` after `NOSCRIPT`, write scripts paired with `WAIT` when `replicas` is set, `SCAN` pages, and
 * the nodes of a Cluster. Internal: the store holds one.
 */
import type { RoundTrip, WriteResult } from '../contract.js';
import type { RoundTripMeter } from '../shared/round-trips.js';
import type { RedisClient, RedisNodeClient, RedisPipeline, RedisRoundTripRequest } from './redis-options.js';
import { SCRIPTS, type RedisScript } from './scripts.js';

export interface RedisCommands {
  readonly roundTrips: number;
  run(op: RoundTrip['op'], script: RedisScript, names: readonly string[], ...args: string[]): Promise<unknown>;
  write(
    op: RoundTrip['op'],
    script: RedisScript,
    names: readonly string[],
    wrote: (reply: unknown) => boolean,
    ...args: string[]
  ): Promise<unknown>;
  scan(node: RedisNodeClient, op: RoundTrip['op'], pattern: string, count: number): AsyncGenerator<string[]>;
  nodes(role: 'all' | 'master'): Promise<ReadonlyArray<RedisNodeClient>>;
  load(): Promise<void>;
  close(): void;
}

/** A write script's reply as the store's answer: `1` wrote. */
export const written = (reply: unknown): WriteResult => ({ ok: reply === 1 });
export const wroteOne = (reply: unknown): boolean => reply === 1;

export function redisCommands(
  client: RedisClient,
  replicas: number,
  replicaTimeoutMs: number,
  meter: RoundTripMeter,
): RedisCommands {
  /**
   * Every command the store sends goes through here: counted, then reported to `onRoundTrip` with its raw reply
   * once it settles. `request` is only built when someone observes.
   */
  function send<R>(op: RoundTrip['op'], request: () => RedisRoundTripRequest, call: () => Promise<R>): Promise<R> {
    if (meter.closed) return Promise.reject(new Error('redis store is closed'));
    meter.add();
    if (!meter.onRoundTrip) return call();
    return meter.observe(op, request(), call());
  }

  /** One script call for `op`: one `EVALSHA`, plus one `EVAL` if the server answers `NOSCRIPT`. */
  async function run(
    op: RoundTrip['op'],
    script: RedisScript,
    names: readonly string[],
    ...args: string[]
  ): Promise<unknown> {
    const request = (command: 'EVALSHA' | 'EVAL') => () => ({ command, script: script.name, keys: [...names], args });
    try {
      return await send(op, request('EVALSHA'), () => client.evalsha(script.sha, names.length, ...names, ...args));
    } catch (error) {
      // The protocol's error code leads the message (`NOSCRIPT No matching script...`) in every driver.
      if (!(error instanceof Error && error.message.startsWith('NOSCRIPT'))) throw error;
      return send(op, request('EVAL'), () => client.eval(script.source, names.length, ...names, ...args));
    }
  }

  /**
   * One write script for `op`, and with `replicas` its `WAIT`, sent together in one pipeline: one round trip (a
   * second, with `EVAL`, after `NOSCRIPT`). `wrote(reply)` says whether the script changed anything; when it did
   * and `WAIT` reached fewer than `replicas`, the call rejects — the write is on the primary, not acknowledged.
   */
  async function write(
    op: RoundTrip['op'],
    script: RedisScript,
    names: readonly string[],
    wrote: (reply: unknown) => boolean,
    ...args: string[]
  ): Promise<unknown> {
    if (replicas === 0) return run(op, script, names, ...args);
    const wait = [replicas, replicaTimeoutMs] as const;
    let result: [reply: unknown, reached: unknown];
    try {
      result = await scriptWithWait(send, client, wait, op, script, names, args);
    } catch (error) {
      // A Cluster client follows MOVED for a lone command, not for a pipeline whose replies differ (a replica
      // answers the script MOVED and WAIT an error of its own), and would keep sending to the old owner. MOVED
      // means the script did not run: one lone read of the record teaches the client the slot's owner, then again.
      if (!(error instanceof Error && /^(MOVED|ASK) /.test(error.message))) throw error;
      await run(op, SCRIPTS.get, names.slice(0, 1));
      result = await scriptWithWait(send, client, wait, op, script, names, args);
    }
    const [reply, reached] = result;
    if (wrote(reply) && !(typeof reached === 'number' && reached >= replicas)) {
      const got =
        reached instanceof Error
          ? `WAIT failed (${reached.message})`
          : `WAIT reached ${String(reached)} of ${replicas} replicas in ${replicaTimeoutMs} ms`;
      throw new Error(`redis ${op} of ${names[0]}: written on the primary, not acknowledged: ${got}`);
    }
    return reply;
  }

  /** The nodes `load` and `sweep` reach: every node of a Cluster (or its primaries), else the client itself. */
  const nodes = async (role: 'all' | 'master'): Promise<ReadonlyArray<RedisNodeClient>> => {
    if (!client.nodes) return [client];
    const found = await client.nodes(role);
    // An ioredis Cluster knows its nodes once it is ready: before, `nodes()` is empty and would load or sweep nothing.
    if (found.length === 0)
      throw new Error('redis store: the Cluster client knows no nodes yet (await its connect() first)');
    return found;
  };

  return {
    get roundTrips() {
      return meter.count;
    },
    run,
    write,
    scan: (node, op, pattern, count) => scanPages(send, node, op, pattern, count),
    nodes,

    async load(): Promise<void> {
      meter.open();
      await Promise.all(
        (await nodes('all')).flatMap((node) =>
          Object.values(SCRIPTS).map(async ({ name, source, sha }) => {
            const loaded = await send(
              'load',
              () => ({ command: 'SCRIPT LOAD', script: name }),
              () => node.script('LOAD', source),
            );
            if (loaded !== sha)
              throw new Error(`redis SCRIPT LOAD of ${name} returned ${String(loaded)}, expected ${sha}`);
          }),
        ),
      );
    },

    close(): void {
      meter.close();
    },
  };
}

/** How `redisCommands` sends a command: counted, and reported to `onRoundTrip` once it settles. */
type Send = <R>(op: RoundTrip['op'], request: () => RedisRoundTripRequest, call: () => Promise<R>) => Promise<R>;

/**
 * A write script and its `WAIT` in one pipeline, through `send`: `EVALSHA`, then `EVAL` after `NOSCRIPT`. Resolves
 * with the script's reply and what `WAIT` answered (the replicas reached, or its error).
 */
async function scriptWithWait(
  send: Send,
  client: RedisClient,
  wait: readonly [replicas: number, replicaTimeoutMs: number],
  op: RoundTrip['op'],
  script: RedisScript,
  names: readonly string[],
  args: string[],
): Promise<[reply: unknown, reached: unknown]> {
  const [replicas, replicaTimeoutMs] = wait;
  const attempt = (command: 'EVALSHA' | 'EVAL') =>
    send(
      op,
      () => ({ command, script: script.name, keys: [...names], args, wait }),
      async (): Promise<[reply: unknown, reached: unknown]> => {
        const pipeline = (client.pipeline as () => RedisPipeline)();
        if (command === 'EVALSHA') pipeline.evalsha(script.sha, names.length, ...names, ...args);
        else pipeline.eval(script.source, names.length, ...names, ...args);
        const replies = await pipeline.wait(replicas, replicaTimeoutMs).exec();
        if (!Array.isArray(replies) || replies.length !== 2)
          throw new Error(`redis ${op}: the pipeline with WAIT returned ${String(replies)}`);
        const [[error, reply] = [null, undefined], [waitError, reached] = [null, undefined]] = replies;
        if (error) throw error;
        return [reply, waitError ?? reached];
      },
    );
  try {
    return await attempt('EVALSHA');
  } catch (error) {
    if (!(error instanceof Error && error.message.startsWith('NOSCRIPT'))) throw error;
    return attempt('EVAL');
  }
}

/** Pages of keys matching `pattern` on `node`, one `SCAN` round trip per page, through `send`. */
async function* scanPages(
  send: Send,
  node: RedisNodeClient,
  op: RoundTrip['op'],
  pattern: string,
  count: number,
): AsyncGenerator<string[]> {
  const seen = new Set<string>();
  let cursor = '0';
  do {
    const [next, keys] = await send(
      op,
      () => ({ command: 'SCAN', args: [cursor, 'MATCH', pattern, 'COUNT', count] }),
      () => node.scan(cursor, 'MATCH', pattern, 'COUNT', count),
    );
    cursor = next;
    // SCAN may return a key twice; keep the first.
    const fresh = keys.filter((key) => !seen.has(key) && seen.add(key));
    if (fresh.length > 0) yield fresh;
  } while (cursor !== '0');
}
