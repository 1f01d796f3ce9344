import type { RoundTrip } from 'idem';
import { describeStoreConformance } from 'idem/testing';
import { describe, expect, it } from 'vitest';
import { memoryStore } from './index.js';

describeStoreConformance({ name: 'memory', create: async () => memoryStore() });

describe('memory store round trips', () => {
  it('reports each call with its request and answer, and a throwing observer changes nothing', async () => {
    const trips: RoundTrip[] = [];
    const store = memoryStore({ onRoundTrip: (trip) => trips.push(trip) });
    const request = { pk: 'IDEMPOTENCY#s#k', scope: 's', key: 'k', fingerprint: 'f', token: 't', id: 'i', now: 0, leaseMs: 10, ttlMs: 100 };
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
