/** `fromNodeRedis`: a node-redis client or cluster seen as the {@link RedisClient} the store calls. */
import type { NodeRedisClient, NodeRedisCluster, NodeRedisMulti, RedisClient, RedisPipeline } from './redis-options.js';

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
