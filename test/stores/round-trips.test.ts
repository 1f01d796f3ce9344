/**
 * Round trips per request kind, measured through the demo itself (`openBackend` + `createApp`, in-process) on
 * each store: the store's own `roundTrips` counter, and the operations its `onRoundTrip` observer saw.
 * docs/DESIGN.md, Round-trip budget: new key 2 (claim, complete); replay, conflict, mismatch 1.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp, type App } from '../../apps/demo/src/app.js';
import { loadConfig } from '../../apps/demo/src/config.js';
import { openBackend, type Backend } from '../../apps/demo/src/stores.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { deleteRedisPrefix, dropSchema } from './cleanup.js';

const suffix = () => randomBytes(5).toString('hex');

interface Kind {
  readonly trips: number;
  readonly ops: string[];
}

const cases: Array<{
  name: string;
  available: boolean;
  open: () => { env: Record<string, string>; cleanup: () => Promise<void> };
  /** Expected trips: new key, replay, conflict, mismatch. */
  expected: Record<'newKey' | 'replay' | 'conflict' | 'mismatch', Kind>;
}> = [
  {
    name: 'SQLite (records and ledger in one transaction)',
    available: true,
    open: () => {
      const dir = tempDir();
      return { env: { IDEM_STORE: `sqlite:${dir.path}/idem.db` }, cleanup: async () => dir.remove() };
    },
    expected: {
      newKey: { trips: 2, ops: ['claim', 'complete'] },
      replay: { trips: 1, ops: ['claim'] },
      conflict: { trips: 1, ops: ['claim'] },
      mismatch: { trips: 1, ops: ['claim'] },
    },
  },
  {
    name: 'PostgreSQL (records and ledger in one transaction)',
    available: await serviceAvailable('PostgreSQL', POSTGRES_URL),
    open: () => {
      const schema = `idem_e2e_${suffix()}`;
      const url = new URL(POSTGRES_URL);
      url.searchParams.set('schema', schema);
      return { env: { IDEM_STORE: url.toString() }, cleanup: () => dropSchema(schema) };
    },
    // The completion with effects is a transaction: BEGIN, the fenced UPDATE, COMMIT (the INSERT of the charge
    // is the work's own statement, not the store's). One statement per claim otherwise.
    expected: {
      newKey: { trips: 4, ops: ['claim', 'complete', 'complete', 'complete'] },
      replay: { trips: 1, ops: ['claim'] },
      conflict: { trips: 1, ops: ['claim'] },
      mismatch: { trips: 1, ops: ['claim'] },
    },
  },
  {
    name: 'Redis (ledger in SQLite, unique on the record id)',
    available: await serviceAvailable('Redis', REDIS_URL),
    open: () => {
      const prefix = `idem_e2e_${suffix()}:`;
      const dir = tempDir();
      const url = new URL(REDIS_URL);
      url.searchParams.set('prefix', prefix);
      return {
        env: { IDEM_STORE: url.toString(), IDEM_LEDGER: `${dir.path}/ledger.db` },
        cleanup: async () => {
          await deleteRedisPrefix(prefix);
          dir.remove();
        },
      };
    },
    expected: {
      newKey: { trips: 2, ops: ['claim', 'complete'] },
      replay: { trips: 1, ops: ['claim'] },
      conflict: { trips: 1, ops: ['claim'] },
      mismatch: { trips: 1, ops: ['claim'] },
    },
  },
  {
    name: 'DynamoDB on dynalite (ledger in SQLite)',
    available: true,
    open: () => {
      const dir = tempDir();
      return {
        env: { IDEM_STORE: `dynamodb:local?table=idem_e2e_${suffix()}`, IDEM_LEDGER: `${dir.path}/ledger.db` },
        cleanup: async () => dir.remove(),
      };
    },
    // dynalite ignores ReturnValuesOnConditionCheckFailure: a refused claim costs a consistent GetItem more. On
    // DynamoDB itself the refused PutItem returns the item (ALL_OLD): 1 trip.
    expected: {
      newKey: { trips: 2, ops: ['claim', 'complete'] },
      replay: { trips: 2, ops: ['claim', 'claim'] },
      conflict: { trips: 2, ops: ['claim', 'claim'] },
      mismatch: { trips: 2, ops: ['claim', 'claim'] },
    },
  },
];

const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };

for (const c of cases) {
  describe.skipIf(!c.available)(`round trips through the demo on ${c.name}`, () => {
    let backend: Backend;
    let app: App;
    let cleanup: () => Promise<void>;
    const seen: string[] = [];

    beforeAll(async () => {
      const opened = c.open();
      cleanup = opened.cleanup;
      const config = loadConfig({ ...opened.env, IDEM_LAB: '1' });
      backend = await openBackend(config, { onRoundTrip: (trip) => seen.push(trip.op) });
      app = createApp({ ...config, ...backend });
    });

    afterAll(async () => {
      await backend?.close();
      await cleanup?.();
    });

    const charge = (key: string, body: unknown = $500, headers: Record<string, string> = {}) =>
      app(
        new Request('http://127.0.0.1/v1/charges', {
          method: 'POST',
          headers: {
            authorization: 'Bearer sk_test_alice',
            'content-type': 'application/json',
            'idempotency-key': key,
            ...headers,
          },
          body: JSON.stringify(body),
        }),
      );

    /** The store's round trips while `run` runs, and the operations the observer saw. */
    const measure = async (run: () => Promise<Response>): Promise<Kind & { status: number }> => {
      const [trips, ops] = [backend.store.roundTrips, seen.length];
      const response = await run();
      return { status: response.status, trips: backend.store.roundTrips - trips, ops: seen.slice(ops) };
    };

    it('no key, and /healthz: no round trip at all', async () => {
      const unkeyed = await measure(() =>
        app(
          new Request('http://127.0.0.1/v1/charges', {
            method: 'POST',
            headers: { authorization: 'Bearer sk_test_alice' },
            body: JSON.stringify($500),
          }),
        ),
      );
      const health = await measure(() => app(new Request('http://127.0.0.1/healthz')));
      expect({ unkeyed, health }).toEqual({
        unkeyed: { status: 201, trips: 0, ops: [] },
        health: { status: 200, trips: 0, ops: [] },
      });
    });

    it('new key, replay, conflict, mismatch', async () => {
      const key = randomUUID();
      const newKey = await measure(() => charge(key));
      const replay = await measure(() => charge(key));
      const mismatch = await measure(() => charge(key, { ...$500, amount: 1 }));

      // Conflict: a second request while the first holds the lease (its claim has landed, its work sleeps).
      const busy = randomUUID();
      const [before, reported] = [backend.store.roundTrips, seen.length];
      const first = charge(busy, $500, { 'idem-lab-delay-ms': '1500' });
      // Sent (the counter) and answered (the observer, which hears of a trip when its reply arrives).
      while (backend.store.roundTrips === before || seen.length === reported)
        await new Promise((r) => setTimeout(r, 5));
      const conflict = await measure(() => charge(busy));
      expect((await first).status).toBe(201);

      expect({ newKey, replay, conflict, mismatch }).toEqual({
        newKey: { status: 201, ...c.expected.newKey },
        replay: { status: 201, ...c.expected.replay },
        conflict: { status: 409, ...c.expected.conflict },
        mismatch: { status: 400, ...c.expected.mismatch },
      });
    });
  });
}

describe('round trips through the demo with IDEM_CACHE_SIZE (SQLite)', () => {
  it('a replay and a mismatch of a finished key cost 0 trips, and the replay is the same bytes', async () => {
    const dir = tempDir();
    const config = loadConfig({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_CACHE_SIZE: '100', IDEM_LAB: '1' });
    expect(config.cacheSize).toBe(100);
    const backend = await openBackend(config);
    const app = createApp({ ...config, ...backend });
    try {
      const charge = async (key: string, body: unknown = $500) => {
        const before = backend.store.roundTrips;
        const response = await app(
          new Request('http://127.0.0.1/v1/charges', {
            method: 'POST',
            headers: {
              authorization: 'Bearer sk_test_alice',
              'content-type': 'application/json',
              'idempotency-key': key,
            },
            body: JSON.stringify(body),
          }),
        );
        return { status: response.status, body: await response.text(), trips: backend.store.roundTrips - before };
      };
      const key = randomUUID();
      const first = await charge(key);
      const replay = await charge(key);
      const mismatch = await charge(key, { ...$500, amount: 1 });
      expect([first.status, first.trips, replay.status, replay.trips, mismatch.status, mismatch.trips]).toEqual([
        201, 2, 201, 0, 400, 0,
      ]);
      expect(replay.body).toBe(first.body);
    } finally {
      await backend.close();
      dir.remove();
    }
  });

  it('IDEM_CACHE_SIZE must be a non-negative integer', () => {
    expect(() => loadConfig({ IDEM_CACHE_SIZE: '-1' })).toThrow(
      'IDEM_CACHE_SIZE (--cache-size) must be an integer ≥ 0, got "-1".',
    );
  });
});
