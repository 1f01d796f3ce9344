/**
 * Round trips per request kind, measured through the demo itself (`openBackend` + `createApp`, in-process) on
 * every store the demo runs on (./backings.ts): the store's own `roundTrips` counter, and the operations its
 * `onRoundTrip` observer saw. docs/DESIGN.md, Round-trip budget: new key 2 (claim, complete); replay, conflict,
 * mismatch 1.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { createApp, type App } from '../../apps/demo/src/app.js';
import { loadConfig } from '../../apps/demo/src/config.js';
import { openBackend, type Backend } from '../../apps/demo/src/stores.js';
import { tempDir } from '../harness.js';
import { DYNAMODB, MYSQL, POSTGRES, REDIS, SQLITE, type Backing, type Opened } from './backings.js';
import { $500, chargeRequest } from './scenarios.js';

interface Kind {
  readonly trips: number;
  readonly ops: string[];
}
type Expected = Record<'newKey' | 'replay' | 'conflict' | 'mismatch', Kind>;

/** A claim and a completion for a new key; one claim for each refusal. */
const PLAIN: Expected = {
  newKey: { trips: 2, ops: ['claim', 'complete'] },
  replay: { trips: 1, ops: ['claim'] },
  conflict: { trips: 1, ops: ['claim'] },
  mismatch: { trips: 1, ops: ['claim'] },
};

const cases: Array<{ backing: Backing; label: string; expected: Expected }> = [
  { backing: SQLITE, label: 'SQLite (records and ledger in one transaction)', expected: PLAIN },
  {
    backing: POSTGRES,
    label: 'PostgreSQL (records and ledger in one transaction)',
    // The completion with effects is a transaction: BEGIN, the fenced UPDATE, COMMIT (the INSERT of the charge
    // is the work's own statement, not the store's). One statement per claim otherwise.
    expected: { ...PLAIN, newKey: { trips: 4, ops: ['claim', 'complete', 'complete', 'complete'] } },
  },
  { backing: REDIS, label: 'Redis (ledger in SQLite, unique on the record id)', expected: PLAIN },
  {
    backing: DYNAMODB,
    label: 'DynamoDB on dynalite (ledger in SQLite)',
    // dynalite ignores ReturnValuesOnConditionCheckFailure: a refused claim costs a consistent GetItem more. On
    // DynamoDB itself the refused PutItem returns the item (ALL_OLD): 1 trip.
    expected: {
      newKey: { trips: 2, ops: ['claim', 'complete'] },
      replay: { trips: 2, ops: ['claim', 'claim'] },
      conflict: { trips: 2, ops: ['claim', 'claim'] },
      mismatch: { trips: 2, ops: ['claim', 'claim'] },
    },
  },
  // The demo keeps charges in SQLite beside MySQL, so the completion carries no effects and is one statement.
  { backing: MYSQL, label: 'MySQL (ledger in SQLite)', expected: PLAIN },
];

for (const { backing, label, expected } of cases) {
  describe.skipIf(!backing.available)(`round trips through the demo on ${label}`, () => {
    let opened: Opened;
    let backend: Backend;
    let app: App;
    const seen: string[] = [];

    beforeAll(async () => {
      opened = await backing.open();
      const config = loadConfig({ ...opened.env, IDEM_LAB: '1' });
      backend = await openBackend(config, { onRoundTrip: (trip) => seen.push(trip.op) });
      app = createApp({ ...config, ...backend });
    });

    afterAll(async () => {
      await backend?.close();
      await opened?.cleanup();
    });

    const charge = (key: string, body: unknown = $500, headers: Record<string, string> = {}) =>
      app(chargeRequest('http://127.0.0.1', key, body, headers));

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
      await waitFor(
        'the first claim to be answered',
        () => backend.store.roundTrips > before && seen.length > reported,
        {
          everyMs: 5,
        },
      );
      const conflict = await measure(() => charge(busy));
      expect((await first).status).toBe(201);

      expect({ newKey, replay, conflict, mismatch }).toEqual({
        newKey: { status: 201, ...expected.newKey },
        replay: { status: 201, ...expected.replay },
        conflict: { status: 409, ...expected.conflict },
        mismatch: { status: 400, ...expected.mismatch },
      });
    }, 30_000);
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
        const response = await app(chargeRequest('http://127.0.0.1', key, body));
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
