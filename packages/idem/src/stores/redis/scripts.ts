/**
 * @module The Lua scripts of the Redis store, one per operation, kept as TypeScript strings so the build ships
 * them. Each script touches exactly one key, `KEYS[1]` — the record's hash — so every call is atomic on its own
 * and lands in one Cluster hash slot. Numbers are never formatted in Lua (Lua 5.1 would print `1.7672256e+12`):
 * every time a script writes arrives as a decimal string computed in JavaScript; Lua only parses to compare.
 *
 * Record layout (one hash): `scope`, `key`, `status`, `fingerprint`, `id`, `token`, `claimedAt`,
 * `leaseExpiresAt`, `expiresAt` (epoch ms, decimal), `retryable` (`0`/`1`), and when present `resultId`,
 * `responseStatus`, `responseHeaders` (JSON) and `responseBody` (base64 of the exact bytes).
 */
import { createHash } from 'node:crypto';

/**
 * A script and the SHA-1 that `EVALSHA` addresses it by.
 *
 * @example
 * await client.evalsha(SCRIPTS.get.sha, 1, 'idem:{IDEMPOTENCY#acct_alice#k1}')
 */
export interface RedisScript {
  readonly name: 'claim' | 'complete' | 'renew' | 'release' | 'get' | 'sweep';
  readonly source: string;
  readonly sha: string;
}

function script(name: RedisScript['name'], source: string): RedisScript {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * ARGV: now, fingerprint, token, id, leaseExpiresAt, expiresAt, ttlMs, scope, key.
 * Returns `{1, HGETALL}` when claimed, `{0, HGETALL}` (the record in the way) when not — one round trip either way.
 * The condition is `isClaimable` from core/record.ts, evaluated against the engine's `now`, not Redis TIME.
 */
const CLAIM = script(
  'claim',
  `local record = KEYS[1]
local now = tonumber(ARGV[1])
local fingerprint = ARGV[2]
local id = ARGV[4]
local current = redis.call('HMGET', record, 'status', 'fingerprint', 'id', 'leaseExpiresAt', 'expiresAt', 'retryable')
local status = current[1]
if status and tonumber(current[5]) > now then
  local claimable = current[2] == fingerprint and (
    (status == 'failed' and current[6] == '1') or
    (status == 'in_progress' and tonumber(current[4]) <= now))
  if not claimable then
    return {0, redis.call('HGETALL', record)}
  end
  id = current[3]
end
redis.call('DEL', record)
redis.call('HSET', record, 'scope', ARGV[8], 'key', ARGV[9], 'status', 'in_progress', 'fingerprint', fingerprint,
  'id', id, 'token', ARGV[3], 'claimedAt', ARGV[1], 'leaseExpiresAt', ARGV[5], 'expiresAt', ARGV[6], 'retryable', '0')
redis.call('PEXPIRE', record, ARGV[7])
return {1, redis.call('HGETALL', record)}
`,
);

/**
 * ARGV: token, status, retryable, hasResultId, resultId, hasResponse, responseStatus, responseHeaders, responseBody.
 * Returns 1 when written, 0 when the record is not `in_progress` under this token. `HSET` leaves the key's
 * expiry alone, so the record keeps the `expiresAt` its claim set.
 */
const COMPLETE = script(
  'complete',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token')
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', record, 'status', ARGV[2], 'retryable', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', record, 'resultId', ARGV[5])
end
if ARGV[6] == '1' then
  redis.call('HSET', record, 'responseStatus', ARGV[7], 'responseHeaders', ARGV[8], 'responseBody', ARGV[9])
end
return 1
`,
);

/**
 * ARGV: token, leaseExpiresAt, expiresAt, ttlMs (`expiresAt - now`). Returns 1 when renewed, 0 otherwise. Moves
 * the key's expiry with `expiresAt` (`PEXPIRE`, relative, like the claim), so a live lease never expires natively.
 */
const RENEW = script(
  'renew',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token')
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', record, 'leaseExpiresAt', ARGV[2], 'expiresAt', ARGV[3])
redis.call('PEXPIRE', record, ARGV[4])
return 1
`,
);

/** ARGV: token. Returns 1 when the record was deleted, 0 otherwise. */
const RELEASE = script(
  'release',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token')
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', record)
return 1
`,
);

/** No ARGV. Returns the record's fields (`HGETALL`), empty when there is no record. */
const GET = script(
  'get',
  `return redis.call('HGETALL', KEYS[1])
`,
);

/** ARGV: now. Deletes the record when `expiresAt <= now`; returns 1 when it did, 0 otherwise (and for non-hashes). */
const SWEEP = script(
  'sweep',
  `local record = KEYS[1]
if redis.call('TYPE', record).ok ~= 'hash' then
  return 0
end
local expiresAt = tonumber(redis.call('HGET', record, 'expiresAt'))
if expiresAt and expiresAt <= tonumber(ARGV[1]) then
  redis.call('DEL', record)
  return 1
end
return 0
`,
);

/**
 * Every script by operation name.
 *
 * @example
 * for (const { source } of Object.values(SCRIPTS)) await client.script('LOAD', source)
 */
export const SCRIPTS = {
  claim: CLAIM,
  complete: COMPLETE,
  renew: RENEW,
  release: RELEASE,
  get: GET,
  sweep: SWEEP,
} as const satisfies Record<RedisScript['name'], RedisScript>;
