/**
 * Store outage (issue 3, item 7): the demo server talks to its store (PostgreSQL, Redis, MySQL) through a fault
 * proxy that cuts, stalls and restores the link. While the store is unreachable every keyed request gets 503
 * problem+json, no record is written and no charge is made; after it returns, retries with the same keys
 * succeed, with exactly one charge per key.
 *
 * The record and the ledger are read directly (./backings.ts), not through the proxy, so they can be checked
 * while the store is down.
 *
 * The hard case is the store failing between the claim and the completion: the work ran, `complete` failed, the
 * client got 503 and the record stays `in_progress` until its lease lapses. Postgres (shared ledger): the charge
 * was written in the completion's transaction, which never committed, so the retry charges once. Redis and MySQL
 * (ledger elsewhere): the charge was written under the record's id; the retry takes over with the same id and
 * `insertOnce` finds it, so the retry answers with that charge instead of making a second one.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { api, startDemo, type DemoProcess } from '../harness.js';
import { MYSQL, POSTGRES, REDIS, type Opened } from './backings.js';
import { $500, answer, chargeId, held, settle, type Answer } from './scenarios.js';

const STORE_DOWN = [503, 'application/problem+json', 'urn:idem:problem:idempotency-store-unavailable'];
const downOf = (a: Answer) => [a.status, a.type, a.problem];
/**
 * The demo's lease here. The work of a "between" case takes 1 s and must end before the holder's own deadline (the
 * claim's instant + 90 % of the lease), or the holder stops it first, it charges nothing and the case tests
 * something else. A 1.5 s lease left too little on a loaded machine after a MySQL claim (a few statements).
 */
const LEASE_MS = 4_000;

for (const backing of [POSTGRES, REDIS, MYSQL]) {
  describe.skipIf(!backing.available)(`${backing.name} outage, through a fault proxy`, () => {
    let proxy: FaultProxy;
    let store: Opened;
    let server: DemoProcess;
    const alice = () => api(server.url);
    const charge = async (key: string, headers: Record<string, string> = {}) =>
      answer(await alice().charge($500, { 'idempotency-key': key, ...headers }));

    beforeAll(async () => {
      const { hostname, port } = new URL(backing.target as string);
      proxy = await startFaultProxy(hostname, Number(port));
      store = await backing.open((url) => proxy.via(url));
      server = await startDemo({ ...store.env, IDEM_LEASE_MS: String(LEASE_MS) });
    });

    afterEach(() => proxy.restore());

    afterAll(async () => {
      await server?.stop();
      await proxy?.close();
      await store?.cleanup();
    });

    /** After restore: every key settles on a 201, and the ledger gained exactly those charges, one per key. */
    const expectOneChargeEach = async (keys: string[], before: string[]): Promise<Answer[]> => {
      const finals: Answer[] = [];
      for (const key of keys) {
        const { final, statuses } = await settle(server, key);
        expect([final.status, statuses.filter((s) => ![409, 503, 201].includes(s))]).toEqual([201, []]);
        finals.push(final);
      }
      const after = await store.charges();
      expect(after.length).toBe(before.length + keys.length);
      expect(new Set(after.slice(before.length))).toEqual(new Set(finals.map(chargeId)));
      for (const [i, key] of keys.entries()) {
        const replay = await charge(key);
        expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', finals[i]?.body]);
      }
      return finals;
    };

    for (const fault of ['cut', 'stall'] as const) {
      it(`${fault}: every keyed request gets 503, no record is written and nothing is charged; after restore each key charges once`, async () => {
        const before = await store.charges();
        proxy[fault]();
        const keys = Array.from({ length: 5 }, () => randomUUID());
        const answers = await Promise.all(keys.map((key) => charge(key)));
        for (const a of answers) expect(downOf(a)).toEqual(STORE_DOWN);
        expect(await store.charges()).toEqual(before);
        for (const key of keys) expect(await store.record(key)).toBeNull();
        expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
        // Restore delivers what a stall held: claims the server gave up on may run now and hold their keys for
        // one lease (answered 409 meanwhile); then the retries take them over.
        proxy.restore();
        await expectOneChargeEach(keys, before);
      });
    }

    for (const fault of ['cut', 'stall'] as const) {
      it(`${fault} between the claim and the completion: 503; the retry after the lease takes over with the same id and charges once`, async () => {
        const before = await store.charges();
        const key = randomUUID();
        // The work takes 1 s: time to see the claim and fault the link on a loaded machine; then its completion
        // meets the fault (a stalled one answers at its timeout).
        const pending = charge(key, { 'idem-lab-delay-ms': '1000' });
        const first = await held(store, key);
        proxy[fault]();
        expect(downOf(await pending)).toEqual(STORE_DOWN);
        // The work ran. With the ledger in the store's transaction nothing committed; with the ledger elsewhere
        // the charge is written, under the record's id, and the retry must find it rather than charge again.
        const afterFailure = await store.charges();
        expect(afterFailure.length).toBe(before.length + (backing.sharedLedger ? 0 : 1));
        expect((await store.record(key))?.status).toBe('in_progress');
        proxy.restore();
        const [final] = await expectOneChargeEach([key], before);
        if (!backing.sharedLedger) expect(chargeId(final as Answer)).toBe(afterFailure.at(-1));
        const after = await store.record(key);
        expect([after?.status, after?.id]).toEqual(['succeeded', first.id]);
      });
    }
  });
}
