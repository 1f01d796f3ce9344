/**
 * The Redis claim: one script (scripts.ts, `CLAIM`) that reads the record and writes the claim atomically, so no
 * other request can read between. The race it closes is told in the comment on `claim`, below.
 */
import type { ClaimRequest, ClaimResult } from '../contract.js';
import { claimedRecord } from '../contract.js';
import { decode } from './codec.js';
import { redisKeys } from './schema.js';
import { SCRIPTS } from './scripts.js';
import type { RedisCommands } from './send.js';

// The race this closes, for two requests A and B with one key and no record:
//   A: EVALSHA claim → HMGET finds nothing → HSET in_progress (token A) → PEXPIRE → ZADD → {1, id A}
//   B: EVALSHA claim → HMGET finds record A, live lease → {0, record A}
// Redis runs one script at a time, so B's script cannot read between A's read and A's write: there is no
// window where both see nothing. The same holds for two takeovers of a dead lease — the first script writes
// a live lease, the second sees it. `now` is the engine's clock, so Redis's own clock never decides.
export async function claim(io: RedisCommands, prefix: string, request: ClaimRequest): Promise<ClaimResult> {
  const { pk, scope, key, fingerprint, token, id, now, leaseMs, ttlMs } = request;
  const { record: recordKey, index, member } = redisKeys(prefix, pk);
  const reply = await io.write(
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
    member,
  );
  if (!Array.isArray(reply) || (reply[0] !== 0 && reply[0] !== 1)) {
    throw new Error(`redis claim script returned an unexpected reply for ${pk}`);
  }
  // A won claim answers its id (the rest is the request's); a refusal, or a resend meeting its own token, the
  // whole record as it stands.
  if (reply[0] === 1 && typeof reply[1] === 'string')
    return { kind: 'claimed', record: { ...claimedRecord(null, request), id: reply[1] }, takeover: reply[2] === 1 };
  const record = decode(pk, reply[1]);
  if (record === null) throw new Error(`redis claim script returned no record for ${pk}`);
  return { kind: reply[0] === 1 ? 'claimed' : 'existing', record };
}
