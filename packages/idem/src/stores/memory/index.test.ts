import type { RoundTrip } from 'idem';
import { describeStoreConformance } from 'idem/testing';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from './index.js';

describeStoreConformance({ name: 'memory', create: async () => memoryStore() });

describe('memory store round trips', () => {
  it('reports each call with its request and answer, and a throwing observer changes nothing', async () => {
    const trips: RoundTrip[] = [];
    const store = memoryStore({ onRoundTrip: (trip) => trips.push(trip) });
    const request = {
      pk: 'IDEMPOTENCY#s#k',
      scope: 's',
      key: 'k',
      fingerprint: 'f',
      token: 't',
      id: 'i',
      now: 0,
      leaseMs: 10,
      ttlMs: 100,
    };
    const claimed = await store.claim(request);
    expect(trips).toEqual([{ op: 'claim', request, response: claimed }]);
    expect(await store.get('IDEMPOTENCY#s#missing')).toBeNull();
    expect(trips.length).toBe(store.roundTrips);

    const throwing = memoryStore({
      onRoundTrip: () => {
        throw new Error('observer broke');
      },
    });
    expect((await throwing.claim(request)).kind).toBe('claimed');
  });
});

describe('memory store caps', () => {
  const claim = (scope: string, key: string) =>
    ({
      pk: recordPk(scope, key),
      scope,
      key,
      fingerprint: 'f',
      token: `t-${scope}-${key}`,
      id: `i-${scope}-${key}`,
      now: 0,
      leaseMs: 10,
      ttlMs: 100,
    }) as const;

  it('one scope that fills its share leaves the others able to claim (default share: maxRecords / 10)', async () => {
    const store = memoryStore({ maxRecords: 20 });
    for (let i = 0; i < 2; i++) expect((await store.claim(claim('acct_a', `k${i}`))).kind).toBe('claimed');
    await expect(store.claim(claim('acct_a', 'k2'))).rejects.toThrow(
      'memory store is full for this scope (2 records per scope)',
    );
    expect((await store.claim(claim('acct_b', 'k0'))).kind).toBe('claimed');
    // A key the full scope already holds still answers, and freeing one makes room again.
    expect((await store.claim({ ...claim('acct_a', 'k0'), token: 'other' })).kind).toBe('existing');
    expect(await store.release({ pk: recordPk('acct_a', 'k0'), token: 't-acct_a-k0' })).toEqual({ ok: true });
    expect((await store.claim(claim('acct_a', 'k2'))).kind).toBe('claimed');
  });

  it('maxRecordsPerScope caps each scope; maxRecords still caps them all; sweep frees both', async () => {
    const store = memoryStore({ maxRecords: 5, maxRecordsPerScope: 3 });
    for (let i = 0; i < 3; i++) await store.claim(claim('acct_a', `k${i}`));
    await expect(store.claim(claim('acct_a', 'k3'))).rejects.toThrow(
      'memory store is full for this scope (3 records per scope)',
    );
    for (let i = 0; i < 2; i++) expect((await store.claim(claim('acct_b', `k${i}`))).kind).toBe('claimed');
    await expect(store.claim(claim('acct_c', 'k0'))).rejects.toThrow('memory store is full (5 records)');
    expect(await store.sweep({ now: 100 })).toBe(5);
    expect((await store.claim(claim('acct_c', 'k0'))).kind).toBe('claimed');
    for (let i = 0; i < 2; i++) expect((await store.claim(claim('acct_a', `k${i + 3}`))).kind).toBe('claimed');
  });

  it('validates its caps, naming the option', () => {
    expect(() => memoryStore({ maxRecords: 0 })).toThrow('Expected `maxRecords` to be a positive integer, got 0.');
    expect(() => memoryStore({ maxRecords: 10, maxRecordsPerScope: 11 })).toThrow(
      'Expected `maxRecordsPerScope` to be a positive integer no larger than maxRecords (10), got 11.',
    );
  });
});
