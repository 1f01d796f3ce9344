/**
 * @module The conformance cases of housekeeping: `sweep` removes only expired records; `list` returns one
 * scope’s records, newest claim first.
 */
import { expect, it } from 'vitest';
import { T0, TTL } from '../fixtures.js';
import type { StoreKit } from './kit.js';

export function sweepListCases<Tx>(kit: StoreKit<Tx>): void {
  const { scope, request, claimed } = kit;
  it('sweep removes only expired records', async () => {
    const expired = [request(), request(), request()];
    const live = [request({ now: T0 + TTL }), request({ now: T0 + TTL })];
    for (const r of [...expired, ...live]) await claimed(r);
    expect(await kit.store.sweep({ now: T0 + TTL, batchSize: 2 })).toBe(3);
    for (const r of expired) expect(await kit.store.get(r.pk)).toBeNull();
    for (const r of live) expect((await kit.store.get(r.pk))?.token).toBe(r.token);
    expect(await kit.store.sweep({ now: T0 + TTL })).toBe(0);
  });

  it('list returns one scope’s records, newest claim first', async () => {
    const a = request({ now: T0 });
    const b = request({ now: T0 + 1 });
    const other = request({ scope: 'acct_other' });
    for (const r of [a, b]) await claimed(r);
    await claimed({ ...other, scope: 'acct_other' });
    const listed = await kit.store.list({ scope, limit: 10 });
    expect(listed.map((r) => r.key)).toEqual([b.key, a.key]);
    expect((await kit.store.list({ scope, limit: 1 })).map((r) => r.key)).toEqual([b.key]);
  });
}
