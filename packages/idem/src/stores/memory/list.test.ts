/**
 * The memory store's `list` (issue 30, item 6): the newest `limit` records of one scope, newest first, ties in the
 * scope's order — the same answer a stable sort of the whole scope gives, without sorting it.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyRecord } from '../contract.js';
import { memoryStore } from './index.js';

const claim = (store: ReturnType<typeof memoryStore>, key: string, now: number) =>
  store.claim({
    pk: `s\u0000${key}`,
    scope: 's',
    key,
    fingerprint: 'f',
    token: `t-${key}`,
    id: `id-${key}`,
    now,
    leaseMs: 1_000,
    ttlMs: 60_000,
  });

describe('memory store list', () => {
  it('answers as a stable sort of the scope by claimedAt, newest first, cut at limit', async () => {
    const store = memoryStore();
    // Times out of order, with ties: 30 records over 7 distinct times.
    const times = Array.from({ length: 30 }, (_, i) => 1_000 + ((i * 7) % 11) * 10 - (i % 3 === 0 ? 0 : 10));
    for (const [i, now] of times.entries()) await claim(store, `k${i}`, now);
    const keys = (list: IdempotencyRecord[]) => list.map((r) => r.key);
    const sorted = times
      .map((now, i) => ({ key: `k${i}`, now }))
      .sort((a, b) => b.now - a.now)
      .map((r) => r.key);
    for (const limit of [0, 1, 2, 5, 29, 30, 100])
      expect(keys(await store.list({ scope: 's', limit }))).toEqual(sorted.slice(0, limit));
    expect(await store.list({ scope: 'other', limit: 10 })).toEqual([]);
  });
});
