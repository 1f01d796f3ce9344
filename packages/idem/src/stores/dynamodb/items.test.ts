/** The DynamoDB store's items: attribute names and types, expiry attributes, sizes and bytes. */
import { GetItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { kinds, local, recordingStore, request, SINGLE_TABLE } from '#test/fixtures/dynamodb.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import { DEFAULT_ATTRIBUTE_NAMES, DYNAMODB_MAX_RESPONSE_BYTES } from './index.js';

describe('dynamodb store against dynalite', () => {
  it('writes the item of docs/DESIGN.md (Record): attribute names and types exactly, expiresAt in seconds for TTL', async () => {
    const { store, table } = await recordingStore();
    const req = request({ now: T0 + 1_234 });
    await store.claim(req);
    const raw = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect(req.pk).toBe(`IDEMPOTENCY#acct_dynamo#${req.key}`);
    expect(raw.Item).toEqual({
      pk: { S: req.pk },
      scope: { S: 'acct_dynamo' },
      key: { S: req.key },
      status: { S: 'in_progress' },
      fingerprint: { S: req.fingerprint },
      id: { S: req.id },
      token: { S: req.token },
      claimedAt: { N: String(T0 + 1_234) },
      leaseExpiresAt: { N: String(T0 + 1_234 + LEASE) },
      // ceil((T0 + 61 234 ms) / 1000): TTL may only delete after the exact expiry, never before.
      expiresAt: { N: String(T0 / 1000 + 62) },
      expiresAtMs: { N: String(T0 + 1_234 + TTL) },
      retryable: { BOOL: false },
    });

    const body = new Uint8Array([0x00, 0xff, 0x7b]);
    const outcome = {
      status: 'succeeded',
      retryable: false,
      resultId: 'ch_1',
      response: { status: 201, headers: [['x-a', 'b']], body },
    } as const;
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2_000, outcome })).toEqual({ ok: true });
    const done = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect(done.Item?.status).toEqual({ S: 'succeeded' });
    expect(done.Item?.resultId).toEqual({ S: 'ch_1' });
    expect(done.Item?.responseStatus).toEqual({ N: '201' });
    expect(done.Item?.responseHeaders).toEqual({ S: '[["x-a","b"]]' });
    expect([...(done.Item?.responseBody?.B ?? [])]).toEqual([0x00, 0xff, 0x7b]);
  });

  it('renew moves both expiry attributes in its one write: TTL seconds (rounded up) and exact milliseconds', async () => {
    const { store, table, sent } = await recordingStore();
    const req = request();
    await store.claim(req);
    sent.length = 0;
    const expiresAt = T0 + 2 * TTL + 1_001;
    expect(await store.renew({ pk: req.pk, token: req.token, now: T0 + 5_000, leaseMs: LEASE, expiresAt })).toEqual({
      ok: true,
    });
    expect(kinds(sent)).toEqual(['UpdateItemCommand']);
    const raw = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { pk: { S: req.pk } }, ConsistentRead: true }),
    );
    expect([raw.Item?.leaseExpiresAt, raw.Item?.expiresAt, raw.Item?.expiresAtMs]).toEqual([
      { N: String(T0 + 5_000 + LEASE) },
      { N: String(T0 / 1000 + 122) },
      { N: String(expiresAt) },
    ]);
  });

  it('uses the configured attribute names and sort key in the item', async () => {
    const { store, table } = await recordingStore(SINGLE_TABLE);
    const req = request();
    await store.claim(req);
    const raw = await local.client.send(
      new GetItemCommand({
        TableName: table,
        Key: { PK: { S: req.pk }, SK: { S: 'IDEMPOTENCY' } },
        ConsistentRead: true,
      }),
    );
    expect(Object.keys(raw.Item ?? {}).sort()).toEqual(
      [
        'PK',
        'SK',
        'IdemScope',
        'IdemKey',
        'Status',
        'Fingerprint',
        'RecordId',
        'FencingToken',
        'ClaimedAt',
        'LeaseExpiresAt',
        'ttl',
        'ExpiresAtMs',
        'Retryable',
      ].sort(),
    );
    expect(raw.Item?.ttl).toEqual({ N: String((T0 + TTL) / 1000) });
  });

  it('leaves other entities of a shared table alone in list and sweep', async () => {
    const { store, table } = await recordingStore(SINGLE_TABLE);
    const foreign = {
      PK: { S: 'ACCOUNT#acct_dynamo' },
      SK: { S: 'PROFILE' },
      IdemScope: { S: 'acct_dynamo' },
      ClaimedAt: { N: String(T0 + 5) },
      ExpiresAtMs: { N: '0' },
    };
    await local.client.send(new PutItemCommand({ TableName: table, Item: foreign }));
    const mine = request({ now: T0 });
    await store.claim(mine);
    expect((await store.list({ scope: 'acct_dynamo', limit: 10 })).map((r) => r.key)).toEqual([mine.key]);
    expect(await store.sweep({ now: T0 + TTL })).toBe(1);
    const kept = await local.client.send(
      new GetItemCommand({ TableName: table, Key: { PK: foreign.PK, SK: foreign.SK }, ConsistentRead: true }),
    );
    expect(kept.Item).toEqual(foreign);
  });

  it('stores a response of exactly maxResponseBytes beside every other attribute at its largest (the budget in options.ts)', async () => {
    expect(DYNAMODB_MAX_RESPONSE_BYTES).toBe(368_640);
    // Every attribute name at 255 bytes, the sort key's value at 1,024, the pk at DynamoDB's 2,048.
    const long = (name: string) => name.padEnd(255, '_');
    const attributes = Object.fromEntries(Object.keys(DEFAULT_ATTRIBUTE_NAMES).map((field) => [field, long(field)]));
    const { store } = await recordingStore({
      attributes,
      sortKey: { name: long('sortKey'), value: 'S'.repeat(1_024) },
      listIndex: 'byScope',
    });
    expect(store.maxResponseBytes).toBe(DYNAMODB_MAX_RESPONSE_BYTES);
    const key = 'k'.repeat(255);
    const scope = 's'.repeat(2_048 - 'IDEMPOTENCY#'.length - 1 - key.length);
    const req = request({ scope, key, fingerprint: 'f'.repeat(255), token: 't'.repeat(255), id: 'i'.repeat(255) });
    expect(Buffer.byteLength(req.pk)).toBe(2_048);
    expect((await store.claim(req)).kind).toBe('claimed');
    // Split between body and headers; the headers carry characters JSON escapes.
    const headers: Array<[string, string]> = Array.from({ length: 40 }, (_, i) => [
      `x-header-${i}`,
      `"${'v'.repeat(90)}\\"`,
    ]);
    const headerBytes = headers.reduce(
      (sum, [name, value]) => sum + Buffer.byteLength(name) + Buffer.byteLength(value),
      0,
    );
    const body = Uint8Array.from({ length: DYNAMODB_MAX_RESPONSE_BYTES - headerBytes }, (_, i) => (i * 31) % 256);
    const response = { status: 200, headers, body };
    const outcome = { status: 'succeeded', retryable: false, resultId: 'r'.repeat(2_048), response } as const;
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
    const stored = await store.get(req.pk);
    expect(stored?.response?.headers).toEqual(headers);
    expect(Buffer.compare(Buffer.from(stored?.response?.body ?? []), Buffer.from(body))).toBe(0);
    expect(stored?.resultId).toBe(outcome.resultId);

    // The limit is real on dynalite: a body of 400 KB on its own does not fit.
    const over = request();
    await store.claim(over);
    const tooBig = { ...outcome, response: { status: 200, headers: [], body: new Uint8Array(409_600) } };
    await expect(store.complete({ pk: over.pk, token: over.token, now: T0 + 1, outcome: tooBig })).rejects.toThrow(
      'Item size to update has exceeded the maximum allowed size',
    );
  });

  it('round-trips every byte value, and an empty body', async () => {
    const { store } = await recordingStore();
    const all = new Uint8Array(256).map((_, i) => i);
    for (const body of [all, new Uint8Array(0)]) {
      const req = request();
      await store.claim(req);
      const response = { status: 200, headers: [['content-type', 'application/octet-stream']] as const, body };
      const outcome = { status: 'succeeded', retryable: false, resultId: null, response } as const;
      expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
      const stored = await store.get(req.pk);
      expect(stored?.response?.body).toBeInstanceOf(Uint8Array);
      expect([...(stored?.response?.body ?? [1])]).toEqual([...body]);
      expect(stored?.response?.headers).toEqual([['content-type', 'application/octet-stream']]);
      expect(stored?.resultId).toBeNull();
    }
  });
});
