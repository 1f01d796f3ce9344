/**
 * The Redis store's public shapes: the subset of an ioredis client it calls (and of node-redis, for
 * `fromNodeRedis`), its options, the store's interface, and what `onRoundTrip` receives.
 */
import type { IdempotencyStore, RoundTripObserver } from '../contract.js';
import type { RedisScript } from './scripts.js';

/**
 * The subset of an ioredis client (`Redis`, or `Cluster`) that the store calls. Pass an ioredis client as is; wrap
 * a node-redis client or cluster with {@link fromNodeRedis}.
 *
 * @example
 * import { Cluster, Redis } from 'ioredis'
 * const client: RedisClient = new Redis('redis://127.0.0.1:6379')
 * const cluster: RedisClient = new Cluster([{ host: '127.0.0.1', port: 7000 }])
 */
export interface RedisClient {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
  script(subcommand: 'LOAD', script: string): Promise<unknown>;
  scan(
    cursor: string,
    matchToken: 'MATCH',
    pattern: string,
    countToken: 'COUNT',
    count: number,
  ): Promise<[cursor: string, keys: string[]]>;
  /**
   * Commands sent together to the node that serves their keys, on one connection (ioredis `pipeline()`). Needed
   * only with `replicas`: the write script and its `WAIT` must reach the same connection.
   */
  pipeline?(): RedisPipeline;
  /**
   * Redis Cluster only: a client for each node the client knows (ioredis `Cluster.nodes(role)`: the primaries,
   * and the replicas when `scaleReads` reaches them). With it, `load` loads the scripts on those nodes and `sweep`
   * scans every primary; a Cluster client would otherwise send both to one random node.
   */
  nodes?(role: 'all' | 'master'): ReadonlyArray<RedisNodeClient> | Promise<ReadonlyArray<RedisNodeClient>>;
}

/** What the store calls on one node of a Cluster: `SCRIPT LOAD` and `SCAN`. */
export type RedisNodeClient = Pick<RedisClient, 'script' | 'scan'>;

/**
 * The subset of an ioredis pipeline the store builds with `replicas`: a script, then `WAIT`, in one round trip.
 * `exec` resolves with each command's `[error, reply]`.
 *
 * @example
 * const [[error, reply], [, acknowledged]] = await client.pipeline().evalsha(sha, 1, key).wait(1, 100).exec()
 */
export interface RedisPipeline {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: string[]): RedisPipeline;
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): RedisPipeline;
  wait(numReplicas: number, timeout: number): RedisPipeline;
  exec(): Promise<Array<[error: Error | null, reply: unknown]> | null>;
}

/**
 * The subset of a node-redis client (v4 and later; tested with `redis` 6) that {@link fromNodeRedis} calls.
 * `multi` is needed only with `replicas`.
 *
 * @example
 * import { createClient } from 'redis'
 * const client: NodeRedisClient = await createClient({ url: 'redis://127.0.0.1:6379' }).connect()
 */
export interface NodeRedisClient {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  scriptLoad(script: string): Promise<unknown>;
  scan(cursor: string, options: { MATCH: string; COUNT: number }): Promise<{ cursor: string | number; keys: string[] }>;
  multi?(): NodeRedisMulti;
}

/**
 * The subset of a node-redis cluster (`createCluster(…)`, connected) that {@link fromNodeRedis} calls: scripts
 * are routed by their first key; `masters`, `replicas` and `nodeClient` reach each node for `load` and `sweep`.
 *
 * @example
 * import { createCluster } from 'redis'
 * const cluster: NodeRedisCluster = await createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] }).connect()
 */
export interface NodeRedisCluster<Node = unknown> {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  multi?(): NodeRedisMulti;
  readonly masters: readonly Node[];
  readonly replicas: readonly Node[];
  nodeClient(node: Node): Promise<NodeRedisClient>;
}

/** The subset of a node-redis `multi()` that {@link fromNodeRedis} uses for a pipeline (`execAsPipeline`, not MULTI). */
export interface NodeRedisMulti {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): unknown;
  eval(script: string, options: { keys: string[]; arguments: string[] }): unknown;
  WAIT(numberOfReplicas: number, timeout: number): unknown;
  execAsPipeline(): Promise<unknown[]>;
}

/**
 * What `onRoundTrip` receives from this store for each command it sends. `EVALSHA`/`EVAL` name the script (the
 * SHA or source sent is `SCRIPTS[script]`'s) with its `keys` and `args`; `SCAN` has its arguments; `SCRIPT LOAD`
 * names the script it loads. `response` is the driver's reply as is: a claim's `[1 | 0, [field, value, …]]`
 * (`0` when a live record is in the way, with that record), `1`/`0` for a conditional write, a list's
 * `[more, [[field, value, …], …]]`, `[cursor, keys]` for a `SCAN`. A `NOSCRIPT` answer to `EVALSHA` is reported
 * as its `error`, then the `EVAL` that follows. With `replicas`, a write script's request carries
 * `wait: [replicas, timeoutMs]` (the `WAIT` sent with it) and its response is `[script reply, replicas reached]`.
 */
export type RedisRoundTripRequest =
  | {
      readonly command: 'EVALSHA' | 'EVAL';
      readonly script: RedisScript['name'];
      readonly keys: readonly string[];
      readonly args: readonly string[];
      readonly wait?: readonly [replicas: number, timeoutMs: number];
    }
  | {
      readonly command: 'SCAN';
      readonly args: readonly [cursor: string, 'MATCH', pattern: string, 'COUNT', count: number];
    }
  | { readonly command: 'SCRIPT LOAD'; readonly script: RedisScript['name'] };

export interface RedisStoreOptions extends RoundTripObserver {
  /** An ioredis client, or a node-redis client wrapped by {@link fromNodeRedis}. The store never closes it. */
  readonly client: RedisClient;
  /** Prepended to every record key; must not contain `{` or `}` (the hash tag is the pk's). Default `idem:`. */
  readonly prefix?: string;
  /** Keys per `SCAN` page in `sweep`. Default 1,000. */
  readonly scanCount?: number;
  /**
   * Replicas that must hold each write before the store reports it: every write script (claim, complete, renew,
   * release) goes out with `WAIT replicas replicaTimeoutMs` in one round trip (the client needs `pipeline`). A
   * write that reaches fewer replicas in time rejects: a claim so refused does not let the work run (the engine
   * answers 503), though the record stays on the primary until its lease lapses. Refusals wrote nothing and are
   * not checked. `WAIT` holds the connection it is sent on until it returns. Default 0: no `WAIT`.
   */
  readonly replicas?: number;
  /** How long `WAIT` waits for `replicas`, in ms; keep it under the client's command timeout. Default 1,000. */
  readonly replicaTimeoutMs?: number;
}

/** The store, plus {@link RedisStore.load}. */
export interface RedisStore extends IdempotencyStore {
  readonly prefix: string;
  /**
   * Loads every script into the server (`SCRIPT LOAD`, one round trip each) so that later calls cost exactly one
   * `EVALSHA`. Optional: without it, the first call of each script falls back to `EVAL` (two round trips).
   */
  load(): Promise<void>;
}
