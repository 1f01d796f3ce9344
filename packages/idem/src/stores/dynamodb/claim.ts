/**
 * The DynamoDB claim: one conditional PutItem for a new or expired key, a second conditional UpdateItem only to
 * reclaim (a dead lease, a retryable failure), and the rule that an SDK resend refused by its own first attempt
 * counts as claimed. The timelines of the races it closes are in the comment on `claim`, below.
 */
import { PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { ClaimRequest, ClaimResult, IdempotencyRecord } from '../contract.js';
import { claimedRecord, isClaimable, isTakeover } from '../contract.js';
import { claimItem, num, str, ttlSeconds } from './codec.js';
import type { DynamoTable } from './send.js';

/** A claim retries only when another writer changed the item between our two writes; this bounds a livelock. */
export const MAX_CLAIM_ATTEMPTS = 5;
/** A reclaim: the claim's fields, the stored id kept, the previous outcome cleared. */
const TAKEOVER =
  'SET #status = :inProgress, #token = :token, #claimedAt = :now, #leaseExpiresAt = :lease, ' +
  '#expiresAt = :ttl, #expiresAtMs = :expiresAtMs, #retryable = :false ' +
  'REMOVE #resultId, #responseStatus, #responseHeaders, #responseBody';

/*
 * The claim. DynamoDB serialises conditional writes to one item, so the condition is the lock; nothing is read
 * first. Two requests with one new key:
 *
 *   A: PutItem if absent-or-expired ──► written: in_progress, token A            → claimed
 *   B: PutItem if absent-or-expired ──► ConditionalCheckFailed, Item = A's item  → existing (409 / replay)
 *
 * A read-then-write would let both read "absent" and both write. A PutItem replaces the whole item, so it writes
 * the request's fresh id: right for an absent or expired record, wrong for a reclaim (a dead lease or a
 * retryable failure, same fingerprint), which must keep the stored id. So a reclaim is a second write, an
 * UpdateItem conditional on the token the first one returned. Two retries after A crashed:
 *
 *   B: PutItem ──► refused, Item = A's (dead lease)  C: PutItem ──► refused, Item = A's (dead lease)
 *   B: UpdateItem if token = A and still reclaimable ──► token B, A's id kept         → claimed
 *   C: UpdateItem if token = A ... ──► refused, Item = B's (live lease)               → existing
 *   A (late): UpdateItem complete if token = A ──► refused                            → fenced out
 *
 * The reclaim condition re-checks the lease because A may renew in between, and the token pins the id: if the
 * item was replaced meanwhile (expired, then claimed afresh by a writer with a later clock), the write is refused
 * and the loop decides again on the item it returns, instead of handing out a stale id. Only the common cases
 * must be one round trip (new key, replay, conflict, mismatch); a reclaim costs two.
 *
 * With SDK retries (`maxAttempts` > 1), a write can be applied and its reply lost; the SDK sends it again, and
 * the resend fails its own condition against the item its first attempt wrote:
 *
 *   A: PutItem (token A) ──► written, reply lost ──► SDK resends ──► ConditionalCheckFailed, Item = token A's
 *
 * Tokens are fresh per claim, so an item in the way holding this request's token can only be its own earlier
 * attempt: that is `claimed`, not a conflict with itself (a 409 for the only request ever sent for the key).
 */
export async function claim(t: DynamoTable, request: ClaimRequest): Promise<ClaimResult> {
  t.open();
  const { pk, now } = request;
  let seen: IdempotencyRecord | null | undefined; // undefined: not seen yet
  for (let attempt = 0; attempt < MAX_CLAIM_ATTEMPTS; attempt++) {
    // A live item in the way is reclaimed by an update that keeps its id; none, or an expired one, by a PutItem.
    const held = seen && seen.expiresAt > now ? seen : null;
    if (held && !isClaimable(held, request.fingerprint, now)) return { kind: 'existing', record: held };
    const record = claimedRecord(held, request);
    const refused = await t.conditionalWrite(
      held
        ? reclaim(t, held, request, record)
        : new PutItemCommand({
            TableName: t.table,
            Item: claimItem(t.key(pk), t.names, record),
            ...t.condition('attribute_not_exists(#pk) OR #expiresAtMs <= :now', { ':now': num(now) }),
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
      'claim',
      pk,
    );
    // `held` is the item the write was conditional on (its token, for a reclaim): what the claim replaced.
    if (refused === undefined) return { kind: 'claimed', record, takeover: isTakeover(held, now) };
    if (refused?.token === request.token) return { kind: 'claimed', record: refused, takeover: isTakeover(held, now) };
    seen = refused;
  }
  throw new Error(`dynamodb claim of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} attempts (constant contention)`);
}

/** The second write of a reclaim: conditional on the token seen, so the stored id it keeps is that item's. */
function reclaim(
  t: DynamoTable,
  seen: IdempotencyRecord,
  request: ClaimRequest,
  record: IdempotencyRecord,
): UpdateItemCommand {
  return new UpdateItemCommand({
    TableName: t.table,
    Key: t.key(request.pk),
    UpdateExpression: TAKEOVER,
    ...t.condition(
      '#token = :seen AND #fingerprint = :fingerprint AND #expiresAtMs > :now AND ' +
        '((#status = :failed AND #retryable = :true) OR (#status = :inProgress AND #leaseExpiresAt <= :now))',
      {
        ':seen': str(seen.token),
        ':fingerprint': str(request.fingerprint),
        ':now': num(request.now),
        ':failed': str('failed'),
        ':true': { BOOL: true },
        ':inProgress': str('in_progress'),
        ':token': str(record.token),
        ':lease': num(record.leaseExpiresAt),
        ':ttl': num(ttlSeconds(record.expiresAt)),
        ':expiresAtMs': num(record.expiresAt),
        ':false': { BOOL: false },
      },
      TAKEOVER,
    ),
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  });
}
