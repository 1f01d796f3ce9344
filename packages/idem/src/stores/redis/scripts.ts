/**
 * @module The Lua scripts of the Redis store, one per operation, kept as TypeScript strings so the build ships
 * them. Numbers are never formatted in Lua (Lua 5.1 would print `1.7672256e+12`): every time a script writes
 * arrives as a decimal string computed in JavaScript; Lua only parses to compare.
 *
 * Keys (see `schema.ts`): a record is the hash `<prefix>{IDEMPOTENCY#<scope>}#<key>`; its scope's index is the
 * sorted set `<prefix>{IDEMPOTENCY#<scope>}:claims` (member `<key>`, score `claimedAt`). Both carry the same
 * hash tag, so every key a script touches is in one Cluster slot and each call is atomic on its own. Scripts
 * that reach a record through the index (`list`, `prune`) name it `base .. member` with `base` =
 * `<prefix>{IDEMPOTENCY#<scope>}#` from ARGV: the same tag, the same slot.
 *
 * The index has no expiry. A claim only adds its key (`ZADD`); members whose records have expired are removed by
 * `list` as it meets them and by `sweep` (`prune`), and the index goes with its last member. An index written by
 * an earlier version carries an expiry, which `list` and `prune` remove (`PERSIST`): it would otherwise vanish
 * with the members of live records claimed since.
 *
 * Record layout (one hash): `scope`, `key`, `status`, `fingerprint`, `id`, `token`, `claimedAt`,
 * `leaseExpiresAt`, `expiresAt` (epoch ms, decimal), `retryable` (`0`/`1`), and when present `resultId`,
 * `responseStatus`, `responseHeaders` (JSON) and `responseBody` (base64 of the exact bytes).
 *
 * A write resent by the client after its reply was lost (ioredis's `autoResendUnfulfilledCommands`, on by
 * default) meets what its first run left. The scripts count that as applied, the rule the DynamoDB store follows
 * for SDK retries: a claim finding its own token is `claimed`; a completion finding its own token already settled
 * with the same status is `1`; a release finding no record is `1`. (A renewal's condition still holds on a
 * resend, so it simply runs again.)
 */
import { createHash } from 'node:crypto';

/**
 * A script and the SHA-1 that `EVALSHA` addresses it by.
 *
 * @example
 * await client.evalsha(SCRIPTS.get.sha, 1, 'idem:{IDEMPOTENCY#acct_alice}#k1')
 */
export interface RedisScript {
  readonly name: 'claim' | 'complete' | 'renew' | 'release' | 'get' | 'sweep' | 'list' | 'prune';
  readonly source: string;
  readonly sha: string;
}

function script(name: RedisScript['name'], source: string): RedisScript {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS: record, index. ARGV: now, fingerprint, token, id, leaseExpiresAt, expiresAt, ttlMs, scope, key, member.
 * Returns `{1, id, takeover}` when claimed (`takeover` 1 when it replaced a lapsed `in_progress` record; the rest of the record is the request's, so it does not travel back) and
 * `{0, HGETALL}` (the record in the way) when not — one round trip either way. The id is the request's, or on a
 * takeover the record's own (a key keeps one id for life). A resend finding its own token answers `{1, HGETALL}`:
 * the record as it stands, which may have moved on since the first run wrote it.
 * The condition is `isClaimable` from core/record.ts, evaluated against the engine's `now`, not Redis TIME.
 * A new key costs the read, the write (`HSET`, `PEXPIRE`) and its index entry (`ZADD`, score `claimedAt`), and
 * nothing else: `DEL` only clears a record taken over, and the index is pruned by `list` and `sweep`.
 */
const CLAIM = script(
  'claim',
  `local record = KEYS[1]
local now = tonumber(ARGV[1])
local fingerprint = ARGV[2]
local id = ARGV[4]
local takeover = 0
local current = redis.call('HMGET', record, 'status', 'fingerprint', 'id', 'leaseExpiresAt', 'expiresAt', 'retryable', 'token')
local status = current[1]
if status then
  if current[7] == ARGV[3] then
    return {1, redis.call('HGETALL', record)}
  end
  if tonumber(current[5]) > now then
    local claimable = current[2] == fingerprint and (
      (status == 'failed' and current[6] == '1') or
      (status == 'in_progress' and tonumber(current[4]) <= now))
    if not claimable then
      return {0, redis.call('HGETALL', record)}
    end
    id = current[3]
    if status == 'in_progress' then takeover = 1 end
  end
  redis.call('DEL', record)
end
redis.call('HSET', record, 'scope', ARGV[8], 'key', ARGV[9], 'status', 'in_progress', 'fingerprint', fingerprint,
  'id', id, 'token', ARGV[3], 'claimedAt', ARGV[1], 'leaseExpiresAt', ARGV[5], 'expiresAt', ARGV[6], 'retryable', '0')
redis.call('PEXPIRE', record, ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[10])
return {1, id, takeover}
`,
);

/**
 * KEYS: record. ARGV: token, status, retryable, hasResultId, resultId, hasResponse, responseStatus, responseHeaders,
 * responseBody. Returns 1 when written (or already written by this call's own earlier run: same token, same
 * status), 0 when the record is not `in_progress` under this token. One `HSET` of the fields the outcome has,
 * which leaves the key's expiry alone.
 */
const COMPLETE = script(
  'complete',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token')
if current[2] == ARGV[1] and current[1] == ARGV[2] then
  return 1
end
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
local fields = {'status', ARGV[2], 'retryable', ARGV[3]}
if ARGV[4] == '1' then
  fields[5] = 'resultId'
  fields[6] = ARGV[5]
end
if ARGV[6] == '1' then
  local n = #fields
  fields[n + 1] = 'responseStatus'
  fields[n + 2] = ARGV[7]
  fields[n + 3] = 'responseHeaders'
  fields[n + 4] = ARGV[8]
  fields[n + 5] = 'responseBody'
  fields[n + 6] = ARGV[9]
end
redis.call('HSET', record, unpack(fields))
return 1
`,
);

/**
 * KEYS: record. ARGV: token, leaseExpiresAt, expiresAt, ttlMs (`expiresAt - now`). Returns 1 when the record is
 * `in_progress` under this token (renewed, or already renewed further), 0 otherwise. Each of `leaseExpiresAt` and
 * `expiresAt` keeps the later of stored and given; the key's expiry moves with `expiresAt` (`PEXPIRE`, relative,
 * like the claim) but never back, so a live lease never expires natively.
 */
const RENEW = script(
  'renew',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token', 'leaseExpiresAt', 'expiresAt')
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
-- An abandoned renewal landing after a newer one must not shorten the lease (nor the expiry, nor the PTTL).
if tonumber(current[3]) < tonumber(ARGV[2]) then
  redis.call('HSET', record, 'leaseExpiresAt', ARGV[2])
end
if tonumber(current[4]) < tonumber(ARGV[3]) then
  redis.call('HSET', record, 'expiresAt', ARGV[3])
end
if redis.call('PTTL', record) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', record, ARGV[4])
end
return 1
`,
);

/**
 * KEYS: record, index. ARGV: token, member. Returns 1 when the record was deleted (and left its index), or is
 * already gone — the key is free, which is what a release wants; 0 when another token or a final state holds it.
 */
const RELEASE = script(
  'release',
  `local record = KEYS[1]
local current = redis.call('HMGET', record, 'status', 'token')
if not current[1] then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return 1
end
if current[1] ~= 'in_progress' or current[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', record)
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`,
);

/** KEYS: record. No ARGV. Returns the record's fields (`HGETALL`), empty when there is no record. */
const GET = script(
  'get',
  `return redis.call('HGETALL', KEYS[1])
`,
);

/**
 * KEYS: record, index. ARGV: now, member. Deletes the record when `expiresAt <= now` and takes it out of its
 * index; returns 1 when it did, 0 otherwise (and for non-hashes).
 */
const SWEEP = script(
  'sweep',
  `local record = KEYS[1]
if redis.call('TYPE', record).ok ~= 'hash' then
  return 0
end
local expiresAt = tonumber(redis.call('HGET', record, 'expiresAt'))
if expiresAt and expiresAt <= tonumber(ARGV[1]) then
  redis.call('DEL', record)
  redis.call('ZREM', KEYS[2], ARGV[2])
  return 1
end
return 0
`,
);

/**
 * KEYS: index. ARGV: base, limit, budget. A scope's records, newest claim first: walks the index from its newest
 * member, reads each record (`HGETALL base .. member`), and removes members whose record has expired. Returns
 * `{more, {fields…}…}`: `more` is 1 when it stopped after removing `budget` members (call again; nothing is
 * lost), so one call does bounded work whatever the index holds. O(limit + members removed), never a scan.
 * `PERSIST`: the expiry an earlier version gave the index goes (see the module's comment).
 */
const LIST = script(
  'list',
  `local index = KEYS[1]
local base = ARGV[1]
redis.call('PERSIST', index)
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local found = {}
local kept = 0
while kept < limit do
  local members = redis.call('ZREVRANGE', index, kept, limit - 1)
  if #members == 0 then
    break
  end
  for _, member in ipairs(members) do
    local fields = redis.call('HGETALL', base .. member)
    if #fields == 0 then
      redis.call('ZREM', index, member)
      budget = budget - 1
      if budget <= 0 then
        return {1, found}
      end
    else
      found[#found + 1] = fields
      kept = kept + 1
    end
  end
end
return {0, found}
`,
);

/**
 * KEYS: index. ARGV: base, start, count. Checks `count` members from rank `start` (oldest first) and removes those
 * whose record has expired. Returns `{next start, members removed, members checked}`; `sweep` calls it until a
 * batch comes back short. `PERSIST`, as `list` does.
 */
const PRUNE = script(
  'prune',
  `local index = KEYS[1]
redis.call('PERSIST', index)
local removed = 0
local members = redis.call('ZRANGE', index, tonumber(ARGV[2]), tonumber(ARGV[2]) + tonumber(ARGV[3]) - 1)
for _, member in ipairs(members) do
  if redis.call('EXISTS', ARGV[1] .. member) == 0 then
    redis.call('ZREM', index, member)
    removed = removed + 1
  end
end
return {tonumber(ARGV[2]) + #members - removed, removed, #members}
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
  list: LIST,
  prune: PRUNE,
} as const satisfies Record<RedisScript['name'], RedisScript>;
