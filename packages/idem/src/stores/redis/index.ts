/**
 * @module `idem/stores/redis` — records in Redis, one hash per record, one Lua script per operation.
 *
 * - **One key per record**, named `<prefix>{<pk>}`. Every script touches only that key, so each call is atomic on
 *   its own and Cluster-safe: the `{…}` hash tag puts the record in its pk's slot (with a pk that itself holds a
 *   `}`, Redis hashes a shorter tag — still one key, still one slot).
 * - **Native expiry**: a claim sets the key's expiry to `ttlMs` (`PEXPIRE`, relative, so it follows the engine's
 *   `expiresAt - now` whatever Redis's own clock says); a renewal moves it to the new `expiresAt - now` the same
 *   way; a completion uses `HSET`, which keeps it.
 * - **Binary bodies** are stored base64-encoded in the `responseBody` field and decoded on read: exact bytes with
 *   any driver, because no reply has to be read as a Buffer. (Costs a third more space for the body.)
 * - **Scripts** run by `EVALSHA`. {@link RedisStore.load} loads them up front; an `EVALSHA` that still gets
 *   `NOSCRIPT` (a restarted or failed-over server, a Cluster node that never saw the load) is retried once with
 *   `EVAL`, and both requests are counted in `roundTrips`.
 * - **`list` and `sweep` use `SCAN`**: O(keyspace), for operators and the demo, never for hot paths. On Cluster a
 *   client sends `SCAN` to one node, so they see that node's records only.
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
import { decodeHeaders, encodeHeaders } from '../contract.js';
import { SCRIPTS, type RedisScript } from './scripts.js';

/**
 * The subset of an ioredis client (`Redis`, or `Cluster` for everything but `list`/`sweep`) that the store calls.
 * Pass an ioredis client as is; wrap a node-redis client with {@link fromNodeRedis}.
 *
 * @example
 * import { Redis } from 'ioredis'
 * const client: RedisClient = new Redis('redis://127.0.0.1:6379')
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
}

/**
 * The subset of a node-redis client (v4 and later; tested with `redis` 6) that {@link fromNodeRedis} calls.
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
}

/**
 * Adapts a connected node-redis client to {@link RedisClient}. Every call maps to exactly one command.
 *
 * @example
 * import { createClient } from 'redis'
 * const store = redisStore({ client: fromNodeRedis(await createClient({ url }).connect()) })
 */
export function fromNodeRedis(client: NodeRedisClient): RedisClient {
  const split = (numKeys: number, keysAndArgs: string[]) => ({
    keys: keysAndArgs.slice(0, numKeys),
    arguments: keysAndArgs.slice(numKeys),
  });
  return {
    evalsha: (sha, numKeys, ...keysAndArgs) => client.evalSha(sha, split(numKeys, keysAndArgs)),
    eval: (source, numKeys, ...keysAndArgs) => client.eval(source, split(numKeys, keysAndArgs)),
    script: (_load, source) => client.scriptLoad(source),
    scan: async (cursor, _match, pattern, _count, count) => {
      const reply = await client.scan(cursor, { MATCH: pattern, COUNT: count });
      return [String(reply.cursor), reply.keys];
    },
  };
}

/**
 * What `onRoundTrip` receives from this store for each command it sends. `EVALSHA`/`EVAL` name the script (the
 * SHA or source sent is `SCRIPTS[script]`'s) with its `keys` and `args`; `SCAN` has its arguments; `SCRIPT LOAD`
 * names the script it loads. `response` is the driver's reply as is: a claim's `[1 | 0, [field, value, …]]`
 * (`0` when a live record is in the way, with that record), `1`/`0` for a conditional write, `[cursor, keys]`
 * for a `SCAN`. A `NOSCRIPT` answer to `EVALSHA` is reported as its `error`, then the `EVAL` that follows.
 */
export type RedisRoundTripRequest =
  | {
      readonly command: 'EVALSHA' | 'EVAL';
      readonly script: RedisScript['name'];
      readonly keys: readonly string[];
      readonly args: readonly string[];
    }
  | { readonly command: 'SCAN'; readonly args: readonly [cursor: string, 'MATCH', pattern: string, 'COUNT', count: number] }
  | { readonly command: 'SCRIPT LOAD'; readonly script: RedisScript['name'] };

export interface RedisStoreOptions extends RoundTripObserver {
  /** An ioredis client, or a node-redis client wrapped by {@link fromNodeRedis}. The store never closes it. */
  readonly client: RedisClient;
  /** Prepended to every record key; must not contain `{` or `}` (the hash tag is the pk's). Default `idem:`. */
  readonly prefix?: string;
  /** Keys per `SCAN` page in `list` and `sweep`. Default 1,000. */
  readonly scanCount?: number;
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
 * Key the work's own writes on the record's `id` under a unique constraint instead (DESIGN.md §4).
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
export function redisStore({ client, prefix = 'idem:', scanCount = 1_000, onRoundTrip }: RedisStoreOptions): RedisStore {
  const expected = 'a Redis client with evalsha, eval, script and scan (an ioredis client, or fromNodeRedis(client))';
  if (typeof client !== 'object' || client === null) throw configError('client', expected, client);
  for (const method of ['evalsha', 'eval', 'script', 'scan'] as const) {
    if (typeof client[method] !== 'function') throw configError('client', expected);
  }
  if (typeof prefix !== 'string' || prefix.includes('{') || prefix.includes('}')) {
    throw configError('prefix', 'a string without `{` or `}`', prefix);
  }
  if (!Number.isInteger(scanCount) || scanCount <= 0) throw configError('scanCount', 'a positive integer', scanCount);
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

  const keyOf = (pk: string): string => `${prefix}{${pk}}`;
  const pkOf = (key: string): string => key.slice(prefix.length + 1, -1);

  /** One script call for `op`: one `EVALSHA`, plus one `EVAL` if the server answers `NOSCRIPT`. */
  async function run(op: RoundTrip['op'], script: RedisScript, key: string, ...args: string[]): Promise<unknown> {
    const request = (command: 'EVALSHA' | 'EVAL') => () => ({ command, script: script.name, keys: [key], args });
    try {
      return await send(op, request('EVALSHA'), () => client.evalsha(script.sha, 1, key, ...args));
    } catch (error) {
      // The protocol's error code leads the message (`NOSCRIPT No matching script...`) in every driver.
      if (!(error instanceof Error && error.message.startsWith('NOSCRIPT'))) throw error;
      return send(op, request('EVAL'), () => client.eval(script.source, 1, key, ...args));
    }
  }

  /** Pages of keys matching `pattern`, one `SCAN` round trip per page. */
  async function* scan(op: RoundTrip['op'], pattern: string, count: number): AsyncGenerator<string[]> {
    const seen = new Set<string>();
    let cursor = '0';
    do {
      const [next, keys] = await send(
        op,
        () => ({ command: 'SCAN', args: [cursor, 'MATCH', pattern, 'COUNT', count] }),
        () => client.scan(cursor, 'MATCH', pattern, 'COUNT', count),
      );
      cursor = next;
      // SCAN may return a key twice; keep the first.
      const fresh = keys.filter((key) => !seen.has(key) && seen.add(key));
      if (fresh.length > 0) yield fresh;
    } while (cursor !== '0');
  }

  const written = (reply: unknown): WriteResult => ({ ok: reply === 1 });

  return {
    name: 'redis',
    prefix,
    get roundTrips() {
      return roundTrips;
    },

    async load(): Promise<void> {
      if (closed) throw new Error('redis store is closed');
      await Promise.all(
        Object.values(SCRIPTS).map(async ({ name, source, sha }) => {
          const loaded = await send(
            'load',
            () => ({ command: 'SCRIPT LOAD', script: name }),
            () => client.script('LOAD', source),
          );
          if (loaded !== sha) throw new Error(`redis SCRIPT LOAD of ${name} returned ${String(loaded)}, expected ${sha}`);
        }),
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
      const reply = await run(
        'claim',
        SCRIPTS.claim,
        keyOf(pk),
        String(now),
        fingerprint,
        token,
        id,
        String(now + leaseMs),
        String(now + ttlMs),
        String(Math.max(1, Math.ceil(ttlMs))),
        scope,
        key,
      );
      if (!Array.isArray(reply) || (reply[0] !== 0 && reply[0] !== 1)) {
        throw new Error(`redis claim script returned an unexpected reply for ${pk}`);
      }
      const record = decode(pk, reply[1]);
      if (record === null) throw new Error(`redis claim script returned no record for ${pk}`);
      return { kind: reply[0] === 1 ? 'claimed' : 'existing', record };
    },

    async complete({ pk, token, outcome, effects }: CompleteRequest): Promise<WriteResult> {
      if (effects !== undefined) {
        throw configError('effects', 'absent: Redis cannot commit them with the record; key the work’s writes on the record id');
      }
      const { status, retryable, resultId, response } = outcome;
      return written(
        await run(
          'complete',
          SCRIPTS.complete,
          keyOf(pk),
          token,
          status,
          retryable ? '1' : '0',
          resultId === null ? '0' : '1',
          resultId ?? '',
          response === null ? '0' : '1',
          response === null ? '' : String(response.status),
          response === null ? '' : encodeHeaders(response.headers),
          response === null ? '' : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64'),
        ),
      );
    },

    async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
      const ttlMs = String(Math.max(1, Math.ceil(expiresAt - now)));
      return written(await run('renew', SCRIPTS.renew, keyOf(pk), token, String(now + leaseMs), String(expiresAt), ttlMs));
    },

    async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
      return written(await run('release', SCRIPTS.release, keyOf(pk), token));
    },

    async get(pk: string): Promise<IdempotencyRecord | null> {
      return decode(pk, await run('get', SCRIPTS.get, keyOf(pk)));
    },

    async sweep({ now, batchSize = scanCount, limit = Infinity }: SweepRequest): Promise<number> {
      let deleted = 0;
      for await (const keys of scan('sweep', `${globEscape(`${prefix}{IDEMPOTENCY#`)}*}`, batchSize)) {
        // Each call deletes at most one record, so a chunk no larger than what is left never overshoots `limit`.
        for (let i = 0; i < keys.length && deleted < limit; ) {
          const chunk = keys.slice(i, i + Math.min(keys.length, limit - deleted));
          i += chunk.length;
          const replies = await Promise.all(chunk.map((key) => run('sweep', SCRIPTS.sweep, key, String(now))));
          deleted += replies.filter((reply) => reply === 1).length;
        }
        if (deleted >= limit) break;
      }
      return deleted;
    },

    async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
      const records: IdempotencyRecord[] = [];
      for await (const keys of scan('list', `${globEscape(`${prefix}{${recordPk(scope, '')}`)}*}`, scanCount)) {
        const page = await Promise.all(keys.map(async (key) => decode(pkOf(key), await run('list', SCRIPTS.get, key))));
        // A record that expired or was released between SCAN and the read comes back null: skip it.
        for (const record of page) if (record !== null && record.scope === scope) records.push(record);
      }
      return records.sort((a, b) => b.claimedAt - a.claimedAt).slice(0, limit);
    },

    async close(): Promise<void> {
      closed = true;
    },
  };
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
