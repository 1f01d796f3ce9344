/**
 * @module `idem/stores/redis` — records in Redis, one hash per record, one Lua script per operation.
 *
 * - **Keys**: the record `IDEMPOTENCY#<scope>#<key>` is the hash `<prefix>{IDEMPOTENCY#<scope>}#<key>`, and its
 *   scope's index the sorted set `<prefix>{IDEMPOTENCY#<scope>}:claims` (member `<key>`, score `claimedAt`). The
 *   `{…}` hash tag is the scope's, so a record and its index share a Cluster slot and every script — each touching
 *   a record, its index, or both — is atomic on its own and Cluster-safe (a scope holding `}` makes Redis hash a
 *   shorter tag, the same for both keys). A scope's records therefore live on one Cluster node.
 * - **`list` reads the index**, never the keyspace: one script walks the scope's sorted set from its newest member
 *   and reads `limit` records, pruning members whose records have expired; one round trip whatever else the
 *   server holds (a second only when it has pruned 1,000 members in one go). Claims prune the index's two oldest
 *   members when their records are gone, and the index expires with the scope's last record.
 * - **Native expiry**: a claim sets the key's expiry to `ttlMs` (`PEXPIRE`, relative, so it follows the engine's
 *   `expiresAt - now` whatever Redis's own clock says); a renewal moves it to the new `expiresAt - now` the same
 *   way, never back; a completion uses `HSET`, which keeps it.
 * - **Binary bodies** are stored base64-encoded in the `responseBody` field and decoded on read: exact bytes with
 *   any driver, because no reply has to be read as a Buffer. (Costs a third more space for the body.)
 * - **Scripts** run by `EVALSHA`. {@link RedisStore.load} loads them up front (on every node of a Cluster); an
 *   `EVALSHA` that still gets `NOSCRIPT` (a restarted or failed-over server, a node added later) is retried once
 *   with `EVAL`, and both requests are counted in `roundTrips`.
 * - **`sweep` uses `SCAN`**: O(keyspace), for operators, never for hot paths (records expire natively). On a
 *   Cluster it scans every primary (the client's `nodes('master')`).
 * - **Replication** is asynchronous: a write acknowledged by a primary that dies before its replica has it is
 *   lost at failover. `replicas` sends `WAIT` with each write script and fails the call when too few replicas
 *   have it; that narrows the window (a replica that acknowledged may still not be the one promoted), it does
 *   not make Redis a consensus store. docs/STORES.md (Redis Cluster) has the measurements.
 * - **Before this layout** records were `<prefix>{<pk>}`: this version does not see them. They expire natively
 *   within their TTL; docs/STORES.md has the upgrade path.
 */
import { configError } from '../../core/errors.js';
import { recordPk } from '../../core/key.js';
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  ListRequest,
  RecordStatus,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  RoundTripObserver,
  StoredResponse,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { claimedRecord, decodeHeaders, encodeHeaders } from '../contract.js';
import { SCRIPTS, type RedisScript } from './scripts.js';

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
 * Adapts a connected node-redis client, or a connected node-redis cluster, to {@link RedisClient}. Every call maps
 * to exactly one command (a pipeline to one round trip).
 *
 * @example
 * import { createClient } from 'redis'
 * const store = redisStore({ client: fromNodeRedis(await createClient({ url }).connect()) })
 */
export function fromNodeRedis<Node>(client: NodeRedisClient | NodeRedisCluster<Node>): RedisClient {
  const split = (numKeys: number, keysAndArgs: string[]) => ({
    keys: keysAndArgs.slice(0, numKeys),
    arguments: keysAndArgs.slice(numKeys),
  });
  const multi = client.multi?.bind(client);
  const adapted: RedisClient = {
    evalsha: (sha, numKeys, ...keysAndArgs) => client.evalSha(sha, split(numKeys, keysAndArgs)),
    eval: (source, numKeys, ...keysAndArgs) => client.eval(source, split(numKeys, keysAndArgs)),
    script: (_load, source) => {
      if ('nodeClient' in client)
        return Promise.reject(new Error('fromNodeRedis: a cluster loads scripts through nodes()'));
      return client.scriptLoad(source);
    },
    scan: async (cursor, _match, pattern, _count, count) => {
      if ('nodeClient' in client) throw new Error('fromNodeRedis: a cluster scans through nodes()');
      const reply = await client.scan(cursor, { MATCH: pattern, COUNT: count });
      return [String(reply.cursor), reply.keys];
    },
    ...(multi ? { pipeline: () => nodeRedisPipeline(multi(), split) } : {}),
  };
  if (!('nodeClient' in client)) return adapted;
  const cluster = client;
  return {
    ...adapted,
    nodes: async (role) =>
      Promise.all(
        (role === 'master' ? cluster.masters : [...cluster.masters, ...cluster.replicas]).map(async (node) =>
          fromNodeRedis(await cluster.nodeClient(node)),
        ),
      ),
  };
}

/** A {@link RedisPipeline} over a node-redis `multi()`, sent with `execAsPipeline`; per-command errors become `[error, null]`. */
function nodeRedisPipeline(
  multi: NodeRedisMulti,
  split: (numKeys: number, keysAndArgs: string[]) => { keys: string[]; arguments: string[] },
): RedisPipeline {
  const pipeline: RedisPipeline = {
    evalsha: (sha, numKeys, ...keysAndArgs) => (multi.evalSha(sha, split(numKeys, keysAndArgs)), pipeline),
    eval: (source, numKeys, ...keysAndArgs) => (multi.eval(source, split(numKeys, keysAndArgs)), pipeline),
    wait: (numReplicas, timeout) => (multi.WAIT(numReplicas, timeout), pipeline),
    exec: async () => {
      try {
        return (await multi.execAsPipeline()).map((reply): [Error | null, unknown] => [null, reply]);
      } catch (error) {
        // node-redis's MultiErrorReply: every reply, errors included, and which ones are errors.
        const { replies, errorIndexes } = error as { replies?: unknown[]; errorIndexes?: number[] };
        if (!Array.isArray(replies) || !Array.isArray(errorIndexes)) throw error;
        return replies.map((reply, i): [Error | null, unknown] =>
          errorIndexes.includes(i) ? [reply as Error, null] : [null, reply],
        );
      }
    },
  };
  return pipeline;
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

/**
 * Creates a Redis store. `effects` passed to `complete` are refused: Redis cannot commit them with the record.
 * Key the work's own writes on the record's `id` under a unique constraint instead (docs/DESIGN.md: The work's own writes).
 *
 * `sweep` is not needed in production — records expire natively — and costs a `SCAN` of the prefix plus one call
 * per record found; it deletes the records whose `expiresAt` has passed by the `now` it is given (useful when
 * the caller's clock runs ahead of Redis's). `close` stops the store; it does not quit the client you passed.
 * `onRoundTrip` sees every counted command as a {@link RedisRoundTripRequest} with the server's raw reply.
 *
 * @example
 * import { Redis } from 'ioredis'
 * const store = redisStore({ client: new Redis(process.env.REDIS_URL), prefix: 'payments:' })
 * await store.load()
 * const engine = createEngine({ store })
 */
export function redisStore({
  client,
  prefix = 'idem:',
  scanCount = 1_000,
  replicas = 0,
  replicaTimeoutMs = 1_000,
  onRoundTrip,
}: RedisStoreOptions): RedisStore {
  const expected = 'a Redis client with evalsha, eval, script and scan (an ioredis client, or fromNodeRedis(client))';
  if (typeof client !== 'object' || client === null) throw configError('client', expected, client);
  for (const method of ['evalsha', 'eval', 'script', 'scan'] as const) {
    if (typeof client[method] !== 'function') throw configError('client', expected);
  }
  if (typeof prefix !== 'string' || prefix.includes('{') || prefix.includes('}')) {
    throw configError('prefix', 'a string without `{` or `}`', prefix);
  }
  if (!Number.isInteger(scanCount) || scanCount <= 0) throw configError('scanCount', 'a positive integer', scanCount);
  if (!Number.isInteger(replicas) || replicas < 0) throw configError('replicas', 'a non-negative integer', replicas);
  if (!Number.isInteger(replicaTimeoutMs) || replicaTimeoutMs <= 0) {
    throw configError('replicaTimeoutMs', 'a positive integer (WAIT 0 would wait forever)', replicaTimeoutMs);
  }
  if (replicas > 0 && typeof client.pipeline !== 'function') {
    throw configError(
      'client',
      'a client with pipeline() when `replicas` is set (an ioredis client, or fromNodeRedis(client) of one with multi())',
    );
  }
  if (client.nodes !== undefined && typeof client.nodes !== 'function')
    throw configError('client', 'a client whose nodes is a function');
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  }

  let roundTrips = 0;
  let closed = false;

  /**
   * Every command the store sends goes through here: counted, then reported to `onRoundTrip` with its raw reply
   * once it settles. `request` is only built when someone observes.
   */
  function send<R>(op: RoundTrip['op'], request: () => RedisRoundTripRequest, call: () => Promise<R>): Promise<R> {
    if (closed) return Promise.reject(new Error('redis store is closed'));
    roundTrips++;
    if (!onRoundTrip) return call();
    const sent = request();
    return call().then(
      (response) => {
        report({ op, request: sent, response });
        return response;
      },
      (error: unknown) => {
        report({ op, request: sent, error });
        throw error;
      },
    );
  }
  function report(trip: RoundTrip): void {
    try {
      onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the command already ran, and its reply stands.
    }
  }

  const keys = (pk: string) => redisKeys(prefix, pk);

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
    const once = async (): Promise<[reply: unknown, reached: unknown]> => {
      try {
        return await attempt('EVALSHA');
      } catch (error) {
        if (!(error instanceof Error && error.message.startsWith('NOSCRIPT'))) throw error;
        return attempt('EVAL');
      }
    };
    let result: [reply: unknown, reached: unknown];
    try {
      result = await once();
    } catch (error) {
      // A Cluster client follows MOVED for a lone command, not for a pipeline whose replies differ (a replica
      // answers the script MOVED and WAIT an error of its own), and would keep sending to the old owner. MOVED
      // means the script did not run: one lone read of the record teaches the client the slot's owner, then again.
      if (!(error instanceof Error && /^(MOVED|ASK) /.test(error.message))) throw error;
      await run(op, SCRIPTS.get, names.slice(0, 1));
      result = await once();
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

  /** Pages of keys matching `pattern` on `node`, one `SCAN` round trip per page. */
  async function* scan(
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

  const written = (reply: unknown): WriteResult => ({ ok: reply === 1 });
  const wroteOne = (reply: unknown): boolean => reply === 1;
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
    name: 'redis',
    prefix,
    get roundTrips() {
      return roundTrips;
    },

    async load(): Promise<void> {
      if (closed) throw new Error('redis store is closed');
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

    // The race this closes, for two requests A and B with one key and no record:
    //   A: EVALSHA claim → HMGET finds nothing → HSET in_progress (token A) → PEXPIRE → {1, record A}
    //   B: EVALSHA claim → HMGET finds record A, live lease → {0, record A}
    // Redis runs one script at a time, so B's script cannot read between A's read and A's write: there is no
    // window where both see nothing. The same holds for two takeovers of a dead lease — the first script writes
    // a live lease, the second sees it. `now` is the engine's clock, so Redis's own clock never decides.
    async claim(request: ClaimRequest): Promise<ClaimResult> {
      const { pk, scope, key, fingerprint, token, id, now, leaseMs, ttlMs } = request;
      const { record: recordKey, index, base, member } = keys(pk);
      const reply = await write(
        'claim',
        SCRIPTS.claim,
        [recordKey, index],
        (reply) => Array.isArray(reply) && reply[0] === 1,
        String(now),
        fingerprint,
        token,
        id,
        String(now + leaseMs),
        String(now + ttlMs),
        String(Math.max(1, Math.ceil(ttlMs))),
        scope,
        key,
        base,
        member,
      );
      if (!Array.isArray(reply) || (reply[0] !== 0 && reply[0] !== 1)) {
        throw new Error(`redis claim script returned an unexpected reply for ${pk}`);
      }
      // A won claim answers its id (the rest is the request's); a refusal, or a resend meeting its own token, the
      // whole record as it stands.
      if (reply[0] === 1 && typeof reply[1] === 'string')
        return { kind: 'claimed', record: { ...claimedRecord(null, request), id: reply[1] } };
      const record = decode(pk, reply[1]);
      if (record === null) throw new Error(`redis claim script returned no record for ${pk}`);
      return { kind: reply[0] === 1 ? 'claimed' : 'existing', record };
    },

    async complete({ pk, token, outcome, effects }: CompleteRequest): Promise<WriteResult> {
      if (effects !== undefined) {
        throw configError(
          'effects',
          'absent: Redis cannot commit them with the record; key the work’s writes on the record id',
        );
      }
      const { status, retryable, resultId, response } = outcome;
      return written(
        await write(
          'complete',
          SCRIPTS.complete,
          [keys(pk).record],
          wroteOne,
          token,
          status,
          retryable ? '1' : '0',
          resultId === null ? '0' : '1',
          resultId ?? '',
          response === null ? '0' : '1',
          response === null ? '' : String(response.status),
          response === null ? '' : encodeHeaders(response.headers),
          response === null
            ? ''
            : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64'),
        ),
      );
    },

    async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
      const ttlMs = String(Math.max(1, Math.ceil(expiresAt - now)));
      const { record, index } = keys(pk);
      return written(
        await write(
          'renew',
          SCRIPTS.renew,
          [record, index],
          wroteOne,
          token,
          String(now + leaseMs),
          String(expiresAt),
          ttlMs,
        ),
      );
    },

    async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
      const { record, index, member } = keys(pk);
      return written(await write('release', SCRIPTS.release, [record, index], wroteOne, token, member));
    },

    async get(pk: string): Promise<IdempotencyRecord | null> {
      return decode(pk, await run('get', SCRIPTS.get, [keys(pk).record]));
    },

    async sweep({ now, batchSize = scanCount, limit = Infinity }: SweepRequest): Promise<number> {
      let deleted = 0;
      // On a Cluster, each primary's keys: a scope's records live on the primary serving its slot.
      primaries: for (const node of await nodes('master')) {
        for await (const page of scan(node, 'sweep', `${globEscape(`${prefix}{${PK_PREFIX}`)}*`, batchSize)) {
          const found = page.map((key) => parseKey(prefix, key)).filter((keys) => keys !== undefined);
          const records = found.filter((keys) => keys.kind === 'record');
          // Each call deletes at most one record, so a chunk no larger than what is left never overshoots `limit`.
          for (let i = 0; i < records.length && deleted < limit;) {
            const chunk = records.slice(i, i + Math.min(records.length, limit - deleted));
            i += chunk.length;
            const replies = await Promise.all(
              chunk.map(({ record, index, member }) =>
                run('sweep', SCRIPTS.sweep, [record, index], String(now), member),
              ),
            );
            deleted += replies.filter((reply) => reply === 1).length;
          }
          if (deleted >= limit) break primaries;
          // Members whose records expired natively, which no claim or list has pruned yet.
          for (const { index, base } of found.filter((keys) => keys.kind === 'index')) {
            for (let start = 0, checked = batchSize; checked === batchSize;) {
              const reply = await run('sweep', SCRIPTS.prune, [index], base, String(start), String(batchSize));
              [start, , checked] = reply as [number, number, number];
            }
          }
        }
      }
      return deleted;
    },

    async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
      if (!(limit > 0)) return [];
      const { index, base } = redisKeys(prefix, recordPk(scope, ''));
      for (;;) {
        const reply = await run(
          'list',
          SCRIPTS.list,
          [index],
          base,
          String(Math.floor(limit)),
          String(LIST_PRUNE_BUDGET),
        );
        if (!Array.isArray(reply) || !Array.isArray(reply[1]))
          throw new Error(`redis list script returned an unexpected reply for ${scope}`);
        // 1: it stopped after pruning its budget of expired members; the next call picks up where it left off.
        if (reply[0] === 1) continue;
        return (reply[1] as unknown[]).map((fields) => {
          const record = decode(recordPk(scope, '?'), fields);
          if (record === null) throw new Error(`redis list script returned an empty record for ${scope}`);
          return { ...record, pk: recordPk(scope, record.key) };
        });
      }
    },

    async close(): Promise<void> {
      closed = true;
    },
  };
}

const PK_PREFIX = 'IDEMPOTENCY#';
/** Expired index members one `list` call removes at most before it returns and is called again. */
const LIST_PRUNE_BUDGET = 1_000;

/**
 * The keys of the record `pk` (`IDEMPOTENCY#<scope>#<key>`, the scope's `#` and `%` escaped by `recordPk`, so its
 * second `#` ends the scope): the record's hash, its scope's index, and how the index names it (`base` + `member`).
 */
function redisKeys(prefix: string, pk: string): { record: string; index: string; base: string; member: string } {
  const end = pk.indexOf('#', PK_PREFIX.length);
  if (!pk.startsWith(PK_PREFIX) || end === -1)
    throw new Error(`redis store: ${pk} is not a record pk (IDEMPOTENCY#<scope>#<key>)`);
  const tag = `${prefix}{${pk.slice(0, end)}}`;
  const member = pk.slice(end + 1);
  return { record: `${tag}#${member}`, index: `${tag}:claims`, base: `${tag}#`, member };
}

/** What a key found under the prefix is: a record (`…}#<key>`), a scope's index (`…}:claims`), or neither. */
function parseKey(
  prefix: string,
  key: string,
): ({ kind: 'record' | 'index' } & ReturnType<typeof redisKeys>) | undefined {
  const rest = key.slice(prefix.length);
  const end = rest.indexOf('#', PK_PREFIX.length + 1);
  if (end > 0 && rest[end - 1] === '}') {
    return { kind: 'record', ...redisKeys(prefix, `${rest.slice(1, end - 1)}#${rest.slice(end + 1)}`) };
  }
  if (end === -1 && rest.endsWith('}:claims')) return { kind: 'index', ...redisKeys(prefix, `${rest.slice(1, -8)}#`) };
  return undefined;
}

/** Escapes Redis glob metacharacters so `text` matches only itself in a `SCAN MATCH` pattern. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

const STATUSES: readonly string[] = ['in_progress', 'succeeded', 'failed'] satisfies RecordStatus[];

/** A record from `HGETALL`'s flat `[field, value, …]` reply; null when the key does not exist. */
function decode(pk: string, reply: unknown): IdempotencyRecord | null {
  if (!Array.isArray(reply)) throw new Error(`redis returned a non-array record for ${pk}`);
  if (reply.length === 0) return null;
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), String(reply[i + 1]));
  const text = (name: string): string => {
    const value = fields.get(name);
    if (value === undefined) throw new Error(`redis record ${pk} has no ${name} field`);
    return value;
  };
  const time = (name: string): number => {
    const value = Number(text(name));
    if (!Number.isFinite(value)) throw new Error(`redis record ${pk} has a non-numeric ${name}`);
    return value;
  };
  const status = text('status');
  if (!STATUSES.includes(status)) throw new Error(`redis record ${pk} has an unknown status ${status}`);
  const responseStatus = fields.get('responseStatus');
  const response: StoredResponse | null =
    responseStatus === undefined
      ? null
      : {
          status: Number(responseStatus),
          headers: decodeHeaders(text('responseHeaders')),
          body: Uint8Array.from(Buffer.from(text('responseBody'), 'base64')),
        };
  return {
    pk,
    scope: text('scope'),
    key: text('key'),
    status: status as RecordStatus,
    fingerprint: text('fingerprint'),
    id: text('id'),
    token: text('token'),
    claimedAt: time('claimedAt'),
    leaseExpiresAt: time('leaseExpiresAt'),
    expiresAt: time('expiresAt'),
    retryable: text('retryable') === '1',
    resultId: fields.get('resultId') ?? null,
    response,
  };
}
