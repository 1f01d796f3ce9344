/**
 * An outcome the engine does not know is never made a retryable failure under `takeover: 'reconcile'` or
 * `'quarantine'` (docs/DESIGN.md: Takeover policy): work cut off at `maxHoldMs`, and work that threw once its
 * lease's signal was aborted (a holder stalled past its lease), leave the record in progress; the next claim is a
 * takeover, so the policy answers, and the work's effect happened once. On memory, SQLite, PostgreSQL and Redis stores,
 * through `idempotent()` and through the Web layer.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { idempotent, manualClock, type IdempotencyStore, type TakeoverPolicy } from '../../packages/idem/src/index.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { available as redisUp, ioredis, isolated } from '../fixtures/redis.js';
import { tempDir } from '../harness.js';
import { typeOf, webTakeover } from './web-kit.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 1_000;
const MAX_HOLD = 300;
const dir = tempDir('idem-unknown-');
afterAll(() => dir.remove());
const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);

interface Opened {
  readonly store: IdempotencyStore<never>;
  readonly close: () => Promise<void>;
}
const backings: ReadonlyArray<readonly [string, boolean, () => Promise<Opened>]> = [
  ['memory', true, async () => ({ store: memoryStore(), close: async () => undefined })],
  [
    'sqlite',
    true,
    async () => {
      const store = sqliteStore({ database: new Database(join(dir.path, `${randomUUID()}.db`)), closeDatabase: true });
      await store.migrate();
      return { store, close: () => store.close() };
    },
  ],
  [
    'postgres',
    postgres,
    async () => {
      const schema = `idem_unknown_${randomBytes(6).toString('hex')}`;
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
      const store = postgresStore({ pool, schema });
      await store.migrate();
      return {
        store,
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await pool.end();
        },
      };
    },
  ],
  [
    'redis',
    redisUp,
    async () => {
      const store = await isolated(ioredis);
      return { store, close: () => store.close() };
    },
  ],
];

type Stop = 'maxHoldMs' | 'signal';

/**
 * Instance A makes the effect, then is stopped on its own clock (`maxHoldMs`, or its lease's local deadline with
 * the work throwing `signal.reason`); instance B, its clock long past A's lease, calls with the same key. Returns
 * what each call got, the effects per record id, and how often B's hook was asked.
 */
async function stoppedThenRetried(store: IdempotencyStore<never>, policy: TakeoverPolicy, stop: Stop) {
  const effects: string[] = [];
  let asked = 0;
  const base = { store, scope: 'single-tenant', key: (i: { k: string }) => i.k, leaseMs: LEASE, ttlMs: 86_400_000 };
  const policyOptions = {
    takeover: policy,
    ...(policy === 'reconcile'
      ? { reconcile: ({ id }: { id: string }) => (asked++, { state: 'succeeded' as const, response: { from: id } }) }
      : {}),
  };
  const clockA = manualClock(T0);
  const a = idempotent(
    async (_i: { k: string }, { id, signal }) => {
      effects.push(id);
      await new Promise((aborted) => signal.addEventListener('abort', aborted, { once: true }));
      if (stop === 'signal') signal.throwIfAborted();
      return { from: 'A, late' };
    },
    { ...base, ...policyOptions, clock: clockA, ...(stop === 'maxHoldMs' ? { maxHoldMs: MAX_HOLD } : {}) },
  );
  const first = a({ k: 'k1' }).then(
    (value) => ({ value }),
    (error: { code?: string }) => ({ error: error.code }),
  );
  await waitFor('A made its effect', () => effects.length === 1);
  clockA.advance(stop === 'maxHoldMs' ? MAX_HOLD : LEASE);
  const firstGot = await first;
  const b = idempotent(
    async (_i: { k: string }, { id }) => {
      effects.push(id);
      return { from: 'B' };
    },
    { ...base, ...policyOptions, clock: manualClock(T0 + 10 * LEASE) },
  );
  const second = await b({ k: 'k1' }).then(
    (value) => ({ value }),
    (error: { code?: string }) => ({ error: error.code }),
  );
  const byId = new Map<string, number>();
  for (const id of effects) byId.set(id, (byId.get(id) ?? 0) + 1);
  return { first: firstGot, second, effects: [...byId.values()], asked, id: effects[0] };
}

/** The Web layer: a handler held past `maxHoldMs` on gate A; gate B, long past A's lease, gets the same request. */
async function heldThenRetried(store: IdempotencyStore<never>, policy: 'quarantine' | 'reconcile') {
  const base = { store, scope: 'single-tenant', leaseMs: LEASE, ttlMs: 86_400_000, takeover: policy } as const;
  const options = {
    ...base,
    ...(policy === 'reconcile'
      ? {
          reconcile: () => ({
            state: 'succeeded' as const,
            response: new Response('from the ledger', { status: 201 }),
          }),
        }
      : {}),
  };
  const { a, b, effects } = await webTakeover(options, {
    t0: T0,
    stopAfterMs: MAX_HOLD,
    stopA: { maxHoldMs: MAX_HOLD },
    first: () => new Promise<Response>(() => {}),
  });
  return [
    (a as Response).status,
    await typeOf(a as Response),
    b.status,
    policy === 'quarantine' ? await typeOf(b) : await b.text(),
    effects,
  ];
}

describe.each(backings)('an unknown outcome under a policy that never reruns blindly (%s)', (_name, up, open) => {
  for (const stop of ['maxHoldMs', 'signal'] as const) {
    it.skipIf(!up)(`quarantine, stopped by ${stop}: the retry answers OUTCOME_UNKNOWN; one effect`, async () => {
      const { store, close } = await open();
      try {
        const t = await stoppedThenRetried(store, 'quarantine', stop);
        expect([t.first, t.second, t.effects]).toEqual([{ error: 'LEASE_LOST' }, { error: 'OUTCOME_UNKNOWN' }, [1]]);
      } finally {
        await close();
      }
    });

    it.skipIf(!up)(`reconcile, stopped by ${stop}: the retry asks the hook once; one effect`, async () => {
      const { store, close } = await open();
      try {
        const t = await stoppedThenRetried(store, 'reconcile', stop);
        expect([t.first, t.second, t.effects, t.asked]).toEqual([
          { error: 'LEASE_LOST' },
          { value: { from: t.id } },
          [1],
          1,
        ]);
      } finally {
        await close();
      }
    });
  }

  it.skipIf(!up).each([
    ['quarantine', 409, 'urn:idem:problem:idempotency-outcome-unknown'],
    ['reconcile', 201, 'from the ledger'],
  ] as const)(
    'the Web layer, %s, past maxHoldMs: A 409 lease-lost, B %i %s; one effect',
    async (policy, status, body) => {
      const { store, close } = await open();
      try {
        const expected = [409, 'urn:idem:problem:idempotency-lease-lost', status, body, 1];
        expect(await heldThenRetried(store, policy)).toEqual(expected);
      } finally {
        await close();
      }
    },
  );

  it.skipIf(!up)('rerun, stopped by maxHoldMs: unchanged, the retry runs the work again (two effects)', async () => {
    const { store, close } = await open();
    try {
      const t = await stoppedThenRetried(store, 'rerun', 'maxHoldMs');
      expect([t.first, t.second, t.effects]).toEqual([{ error: 'LEASE_LOST' }, { value: { from: 'B' } }, [2]]);
    } finally {
      await close();
    }
  });
});

describe('reconcileTimeoutMs against maxHoldMs', () => {
  const options = (more: object) => ({
    store: memoryStore(),
    scope: 's',
    key: () => 'k',
    takeover: 'reconcile' as const,
    reconcile: () => ({ state: 'not_done' as const }),
    ...more,
  });
  it('is refused at set-up when it is not less than maxHoldMs', () => {
    expect(() => idempotent(async () => 1, options({ maxHoldMs: 400, reconcileTimeoutMs: 400 }))).toThrow(
      'Expected `reconcileTimeoutMs` to be less than maxHoldMs (400), got 400.',
    );
  });
  it('defaults to half maxHoldMs when that is under 5 s', () => {
    expect(typeof idempotent(async () => 1, options({ maxHoldMs: 400 }))).toBe('function');
    expect(typeof idempotent(async () => 1, options({ maxHoldMs: 400, reconcileTimeoutMs: 399 }))).toBe('function');
  });
});
