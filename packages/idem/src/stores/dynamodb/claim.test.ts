/** The DynamoDB store's claim: the conditional PutItem, takeovers, their races, and its round trips. */
import { randomUUID } from 'node:crypto';
import { ConditionalCheckFailedException, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { GetItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { failedOutcome, kinds, local, recordingStore, request, track, trackedTable } from '#test/fixtures/dynamodb.js';
import type { IdempotencyRecord, RoundTrip } from '../contract.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import { dynamodbStore, type DynamoDBClientLike, type DynamoDBStore } from './index.js';

describe('dynamodb store against dynalite', () => {
  it('claims with a PutItem that asks for ALL_OLD, and reads the item back when the engine ignores it', async () => {
    const { store, sent } = await recordingStore();
    const first = request();
    await store.claim(first);
    expect(kinds(sent)).toEqual(['PutItemCommand']);
    const put = sent[0] as PutItemCommand;
    expect(put.input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect(put.input.ConditionExpression).toBe('attribute_not_exists(#pk) OR #expiresAtMs <= :now');
    expect(put.input.ExpressionAttributeNames).toEqual({ '#pk': 'pk', '#expiresAtMs': 'expiresAtMs' });
    expect(put.input.ExpressionAttributeValues).toEqual({ ':now': { N: String(T0) } });

    sent.length = 0;
    const before = store.roundTrips;
    const second = await store.claim({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
    expect(second.kind).toBe('existing');
    expect(second.record.token).toBe(first.token);
    expect(kinds(sent)).toEqual(['PutItemCommand', 'GetItemCommand']);
    expect((sent[0] as PutItemCommand).input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect((sent[1] as GetItemCommand).input.ConsistentRead).toBe(true);
    expect(store.roundTrips - before).toBe(2);
  });

  it('reports every round trip to onRoundTrip: command, input, output, or the engine’s own error', async () => {
    const trips: RoundTrip[] = [];
    const { store, table } = await recordingStore({ onRoundTrip: (trip) => trips.push(trip) });
    trips.length = 0;
    const before = store.roundTrips;
    const first = request();
    await store.claim(first);
    await store.claim({ ...first, token: randomUUID(), now: T0 + 1 });
    await store.renew({ pk: first.pk, token: 'stale', now: T0 + 2, leaseMs: LEASE, expiresAt: T0 + TTL });
    expect(trips.map((t) => [t.op, (t.request as { command: string }).command])).toEqual([
      ['claim', 'PutItem'],
      ['claim', 'PutItem'],
      ['claim', 'GetItem'],
      ['renew', 'UpdateItem'],
      // A refused renewal reads the item (dynalite returns none with the failure) to tell its own earlier attempt,
      // resent by the SDK, from another holder: here another holder, so ok: false.
      ['renew', 'GetItem'],
    ]);
    expect(store.roundTrips - before).toBe(5);
    expect((trips[0]?.request as { input: { TableName: string } }).input.TableName).toBe(table);
    expect(trips[0]?.error).toBeUndefined();
    expect(trips[1]?.error).toBeInstanceOf(ConditionalCheckFailedException);
    expect(trips[1]?.response).toBeUndefined();
    expect((trips[2]?.response as { Item: Record<string, unknown> }).Item.token).toEqual({ S: first.token });
    expect(trips[3]?.error).toBeInstanceOf(ConditionalCheckFailedException);
  });

  it('takes over a dead lease with an UpdateItem conditional on the token it saw, keeping the id', async () => {
    const { store, sent } = await recordingStore();
    const first = request();
    await store.claim(first);
    sent.length = 0;
    const before = store.roundTrips;
    const takeover = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + LEASE };
    const result = await store.claim(takeover);
    expect(result.kind).toBe('claimed');
    expect(result.record.id).toBe(first.id);
    expect(result.record.token).toBe(takeover.token);
    // dynalite: the refused Put, its GetItem fallback, the takeover. On DynamoDB: 2.
    expect(kinds(sent)).toEqual(['PutItemCommand', 'GetItemCommand', 'UpdateItemCommand']);
    expect(store.roundTrips - before).toBe(3);
    const update = sent[2] as UpdateItemCommand;
    expect(update.input.ExpressionAttributeValues?.[':seen']).toEqual({ S: first.token });
    expect(update.input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
    expect(await store.get(first.pk)).toEqual({ ...result.record });
  });

  it('two concurrent takeovers of one dead lease: exactly one wins, the other sees the winner', async () => {
    const { store } = await recordingStore();
    const first = request();
    await store.claim(first);
    const attempts = [0, 1].map(() => ({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + LEASE }));
    const results = await Promise.all(attempts.map((attempt) => store.claim(attempt)));
    expect(results.map((r) => r.kind).sort()).toEqual(['claimed', 'existing']);
    const winner = results.find((r) => r.kind === 'claimed')?.record as IdempotencyRecord;
    for (const r of results) expect(r.record.token).toBe(winner.token);
    expect(winner.id).toBe(first.id);
    expect(await store.complete({ pk: first.pk, token: first.token, now: T0 + LEASE, outcome: failedOutcome })).toEqual(
      {
        ok: false,
      },
    );
  });

  it('a takeover whose item was replaced after it was read is refused, re-read, and keeps the stored id', async () => {
    const table = trackedTable();
    const other = dynamodbStore({ client: local.client, table });
    await other.createTable({ pollMs: 10 });
    const first = request();
    await other.claim(first);
    await other.complete({ pk: first.pk, token: first.token, now: T0 + 1, outcome: failedOutcome });
    // Another writer whose clock is past the first record's expiry replaces it (fresh id, same payload) and
    // fails retryably, in the gap between our read of the first record and our takeover write.
    const replacement = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + TTL };
    let interleaved = false;
    const send = async (command: { input: unknown }) => {
      if (!interleaved && command.constructor.name === 'UpdateItemCommand') {
        interleaved = true;
        expect((await other.claim(replacement)).kind).toBe('claimed');
        await other.complete({ pk: first.pk, token: replacement.token, now: T0 + TTL, outcome: failedOutcome });
      }
      return local.client.send(command as PutItemCommand);
    };
    const client = { send } as DynamoDBClientLike;
    const store = dynamodbStore({ client, table });
    const retry = { ...first, token: randomUUID(), id: randomUUID(), now: T0 + 2 };
    const result = await store.claim(retry);
    expect(interleaved).toBe(true);
    expect(result.kind).toBe('claimed');
    expect(result.record.id).toBe(replacement.id);
    expect((await store.get(first.pk))?.id).toBe(replacement.id);
    expect((await store.get(first.pk))?.token).toBe(retry.token);
  });

  it('50 concurrent claims through 3 separate clients: exactly one is claimed', async () => {
    const table = trackedTable();
    const clients = [0, 1, 2].map(
      () =>
        new DynamoDBClient({
          region: 'local',
          endpoint: local.endpoint,
          credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
        }),
    );
    for (const client of clients) track({ close: async () => client.destroy() });
    const stores = clients.map((client) => dynamodbStore({ client, table }));
    await (stores[0] as DynamoDBStore).createTable({ pollMs: 10 });
    const base = request();
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        (stores[i % 3] as DynamoDBStore).claim({ ...base, token: randomUUID(), id: randomUUID() }),
      ),
    );
    const winners = results.filter((r) => r.kind === 'claimed');
    expect(winners.length).toBe(1);
    const winner = (winners[0] as { record: IdempotencyRecord }).record;
    for (const r of results) expect(r.record.token).toBe(winner.token);
    expect((await (stores[2] as DynamoDBStore).get(base.pk))?.token).toBe(winner.token);
  });
});
