/** The Redis store: one class; every command goes through send.ts (counted, reported, `EVALSHA` then `EVAL`). */
import { configError } from '../../core/errors.js';
import type * as C from '../contract.js';
import { encodeHeaders } from '../shared/headers.js';
import { bindMethods, RoundTripMeter } from '../shared/round-trips.js';
import { claim } from './claim.js';
import { decode } from './codec.js';
import { list } from './list.js';
import type { RedisStore, RedisStoreOptions } from './redis-options.js';
import { redisKeys } from './schema.js';
import { SCRIPTS } from './scripts.js';
import { redisCommands, written, wroteOne, type RedisCommands } from './send.js';
import { sweep } from './sweep.js';

export class RedisStoreImpl implements RedisStore {
  readonly name = 'redis';
  readonly acceptsEffects = false;
  readonly prefix: string;
  readonly #scanCount: number;
  readonly #io: RedisCommands;

  constructor({
    client,
    prefix = 'idem:',
    scanCount = 1_000,
    replicas = 0,
    replicaTimeoutMs = 1_000,
    onRoundTrip,
  }: RedisStoreOptions) {
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
    const meter = new RoundTripMeter('redis', onRoundTrip);
    this.prefix = prefix;
    this.#scanCount = scanCount;
    this.#io = redisCommands(client, replicas, replicaTimeoutMs, meter);
    bindMethods(this);
  }

  get roundTrips(): number {
    return this.#io.roundTrips;
  }

  /** One script reads and claims atomically; the race it closes: claim.ts. */
  claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    return claim(this.#io, this.prefix, request);
  }

  async complete({ pk, token, outcome, effects }: C.CompleteRequest): Promise<C.WriteResult> {
    if (effects !== undefined) {
      throw configError(
        'effects',
        'absent: Redis cannot commit them with the record; key the work’s writes on the record id',
      );
    }
    const { status, retryable, resultId, response } = outcome;
    return this.#writeRecord(
      'complete',
      pk,
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
    );
  }

  renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    const ttlMs = String(Math.max(1, Math.ceil(expiresAt - now)));
    return this.#writeRecord('renew', pk, token, String(now + leaseMs), String(expiresAt), ttlMs);
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    const { record, index, member } = redisKeys(this.prefix, pk);
    return written(await this.#io.write('release', SCRIPTS.release, [record, index], wroteOne, token, member));
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    return decode(pk, await this.#io.run('get', SCRIPTS.get, [redisKeys(this.prefix, pk).record]));
  }

  sweep(request: C.SweepRequest): Promise<number> {
    return sweep(this.#io, this.prefix, this.#scanCount, request);
  }

  list(request: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    return list(this.#io, this.prefix, request);
  }

  async close(): Promise<void> {
    this.#io.close();
  }

  load(): Promise<void> {
    return this.#io.load();
  }

  /** A write script on the record's hash alone (complete, renew): `1` wrote. */
  async #writeRecord(op: 'complete' | 'renew', pk: string, ...args: string[]): Promise<C.WriteResult> {
    return written(await this.#io.write(op, SCRIPTS[op], [redisKeys(this.prefix, pk).record], wroteOne, ...args));
  }
}
