import { randomUUID } from 'node:crypto';
import { DeleteTableCommand, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { local } from '#test/fixtures/dynamodb.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import { dynamodbStore } from './index.js';

it('a late renewal moves none of the three attributes back (lease, TTL seconds, exact ms), in 2 round trips', async () => {
  const table = `idem-test-${randomUUID()}`;
  const store = dynamodbStore({ client: local.client, table });
  await store.createTable({ pollMs: 10 });
  try {
    const key = randomUUID();
    const pk = recordPk('acct_dynamo_renew', key);
    const token = randomUUID();
    const claim = { pk, scope: 'acct_dynamo_renew', key, fingerprint: 'f'.repeat(64), token, id: randomUUID() };
    expect((await store.claim({ ...claim, now: T0, leaseMs: LEASE, ttlMs: TTL })).kind).toBe('claimed');
    const renew = (now: number, expiresAt: number) => store.renew({ pk, token, now, leaseMs: LEASE, expiresAt });
    const later = T0 + 2 * TTL + 1_001;
    expect(await renew(T0 + 200, later)).toEqual({ ok: true });
    const before = store.roundTrips;
    // Landing late with an expiry a whole TTL-second earlier: refused by its condition, then read (dynalite
    // returns no ALL_OLD item) and found already further on, so ok.
    expect(await renew(T0 + 100, T0 + TTL + 1)).toEqual({ ok: true });
    expect(store.roundTrips - before).toBe(2);
    const raw = await local.client.send(new GetItemCommand({ TableName: table, Key: { pk: { S: pk } } }));
    expect([raw.Item?.leaseExpiresAt, raw.Item?.expiresAt, raw.Item?.expiresAtMs]).toEqual([
      { N: String(T0 + 200 + LEASE) },
      { N: String(Math.ceil(later / 1000)) },
      { N: String(later) },
    ]);
  } finally {
    await store.close();
    await local.client.send(new DeleteTableCommand({ TableName: table }));
  }
});
