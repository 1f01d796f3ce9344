/**
 * The DynamoDB store under the AWS SDK's own retries (`maxAttempts: 2`, as docs/STORES.md recommends), with a
 * reply lost for real: a proxy in front of dynalite forwards a write, lets dynalite apply it, then closes the
 * connection instead of passing the answer back. The SDK sees ECONNRESET and resends the same request, whose
 * condition now fails against the item its own first attempt wrote. The store must count that refusal as the
 * write having been applied: a claim is `claimed` (not a 409 for the only request ever sent for the key), and a
 * completion, renewal or release that landed is `ok`.
 */
import { randomUUID } from 'node:crypto';
import { DeleteTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { createEngine, recordPk } from 'idem';
import { dynamodbStore, type DynamoDBStore } from 'idem/stores/dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Outcome } from '../../packages/idem/src/core/record.js';
import { claimedRecord, claimRequests, LEASE, T0, TTL } from '../../packages/idem/src/testing/fixtures.js';
import { startLocalDynamo } from '../../apps/demo/src/local-dynamo.js';
import { startReplyDropProxy, type ReplyDropProxy, type SeenRequest } from './reply-drop-proxy.js';

const scope = 'acct_retry';
const request = claimRequests({ scope });
/** A request of DynamoDB operation `op` that names `pk`. */
const write = (op: string, pk: string) => (seen: SeenRequest) =>
  seen.target === `DynamoDB_20120810.${op}` && seen.body.includes(JSON.stringify(pk));

describe('dynamodb store: a write applied, its reply lost, resent by the SDK (maxAttempts: 2)', () => {
  let local: Awaited<ReturnType<typeof startLocalDynamo>>;
  let proxy: ReplyDropProxy;
  let client: DynamoDBClient;
  let store: DynamoDBStore;
  const table = `idem-retry-${randomUUID()}`;

  beforeAll(async () => {
    local = await startLocalDynamo();
    const { hostname, port } = new URL(local.endpoint);
    proxy = await startReplyDropProxy(hostname, Number(port));
    client = new DynamoDBClient({
      region: 'local',
      endpoint: proxy.endpoint,
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      maxAttempts: 2,
    });
    store = dynamodbStore({ client, table });
    await store.createTable({ pollMs: 10 });
  });
  afterAll(async () => {
    await local?.client.send(new DeleteTableCommand({ TableName: table }));
    client?.destroy();
    await proxy?.close();
    await local?.close();
  });

  /** Runs `call` with the reply to the first request matching `match` dropped; checks the SDK sent it twice. */
  const withLostReply = async <R>(match: (seen: SeenRequest) => boolean, call: () => Promise<R>): Promise<R> => {
    const dropped = proxy.dropReplyTo(match);
    const result = await call();
    await dropped;
    expect(proxy.requests.filter(match).length).toBe(2);
    return result;
  };

  it('the only request for a new key is claimed, runs once and completes, though both replies were lost', async () => {
    const engine = createEngine({ store, leaseMs: LEASE, ttlMs: 24 * 3_600_000 });
    const key = randomUUID();
    const pk = recordPk(scope, key);
    let runs = 0;
    const body = new Uint8Array([1, 2, 3]);
    const claimLost = proxy.dropReplyTo(write('PutItem', pk));
    const ran = engine.run({ scope, key, fingerprint: 'a'.repeat(64) }, async () => {
      runs++;
      // The claim was answered (after its resend); lose the completion's reply next.
      await claimLost;
      void proxy.dropReplyTo((seen) => write('UpdateItem', pk)(seen) && seen.body.includes('"succeeded"'));
      return { response: { status: 201, headers: [], body }, resultId: 'ch_1' };
    });
    const result = await ran;
    expect([result.replayed, [...result.response.body], runs]).toEqual([false, [1, 2, 3], 1]);
    expect(proxy.requests.filter(write('PutItem', pk)).length).toBe(2);
    expect(proxy.requests.filter(write('UpdateItem', pk)).length).toBe(2);
    const stored = await store.get(pk);
    expect([stored?.status, stored?.resultId, [...(stored?.response?.body ?? [])]]).toEqual([
      'succeeded',
      'ch_1',
      [1, 2, 3],
    ]);
  });

  it('claim: the resend refused by its own first write is claimed, with the record that write made', async () => {
    const req = request();
    const result = await withLostReply(write('PutItem', req.pk), () => store.claim(req));
    const record = claimedRecord(req);
    expect(result).toEqual({ kind: 'claimed', record, takeover: false });
    expect(await store.get(req.pk)).toEqual(record);
    // Another request's claim is still refused.
    expect((await store.claim({ ...req, token: randomUUID(), now: T0 + 1 })).kind).toBe('existing');
  });

  it('complete: a completion that was applied is ok; a different outcome with the same token is still refused', async () => {
    const req = request();
    await store.claim(req);
    const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_2', response: null };
    const result = await withLostReply(write('UpdateItem', req.pk), () =>
      store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome }),
    );
    expect(result).toEqual({ ok: true });
    expect((await store.get(req.pk))?.status).toBe('succeeded');
    const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome: failed })).toEqual({ ok: false });
  });

  it('renew: a renewal that was applied is ok, and the lease and expiry are the ones it asked for', async () => {
    const req = request();
    await store.claim(req);
    const renewal = { pk: req.pk, token: req.token, now: T0 + 5_000, leaseMs: LEASE, expiresAt: T0 + TTL + 5_000 };
    expect(await withLostReply(write('UpdateItem', req.pk), () => store.renew(renewal))).toEqual({ ok: true });
    const stored = await store.get(req.pk);
    expect([stored?.leaseExpiresAt, stored?.expiresAt]).toEqual([T0 + 5_000 + LEASE, T0 + TTL + 5_000]);
    // A renewal asking for another lease is not mistaken for an earlier attempt of itself.
    expect(await store.renew({ ...renewal, token: randomUUID() })).toEqual({ ok: false });
  });

  it('release: a release that was applied is ok (the key is free)', async () => {
    const req = request();
    await store.claim(req);
    expect(
      await withLostReply(write('DeleteItem', req.pk), () => store.release({ pk: req.pk, token: req.token })),
    ).toEqual({
      ok: true,
    });
    expect(await store.get(req.pk)).toBeNull();
  });
});
