import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from 'idem/stores/memory';
import { sqliteStore } from 'idem/stores/sqlite';
import { POSTGRES_URL, serviceAvailable } from '../../../../test/services.js';
import { manualClock } from './clock.js';
import { createEngine, type Engine, type IdempotencyEvent, type RunRequest } from './engine.js';
import { IdempotencyError } from './errors.js';
import { recordPk } from './key.js';
import { runLocal, type LocalContext, type LocalWorkResult } from './local.js';
import type { IdempotencyStore, StoredResponse } from './record.js';
import { waitFor } from '../testing/fixtures.js';
import { postgresLedger } from '../testing/postgres-ledger.test-kit.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 86_400_000;
const scope = 'acct_local';
const pgAvailable = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const dir = mkdtempSync(join(tmpdir(), 'idem-local-'));
const pools: pg.Pool[] = [];
const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops) await drop();
  for (const pool of pools) await pool.end();
  rmSync(dir, { recursive: true, force: true });
});

const encoder = new TextEncoder();
const json = (status: number, body: unknown): StoredResponse => ({
  status,
  headers: [
    ['content-type', 'application/json'],
    ['location', '/v1/charges/x'],
  ],
  body: encoder.encode(JSON.stringify(body)),
});
const request = (key = randomUUID(), fingerprint = 'a'.repeat(64)): RunRequest => ({ scope, key, fingerprint });

/**
 * One store with a `ledger` table in the records' own database. `insert` writes a ledger row on the work's `tx`
 * (synchronously on SQLite, as a promise on PostgreSQL); `then` runs the rest of the work after it, either way.
 */
interface Backend {
  readonly name: 'sqlite' | 'postgres';
  readonly store: IdempotencyStore<unknown>;
  insert(tx: unknown, ref: string, amount: number): unknown;
  ledger(): Promise<Array<{ ref: string; amount: number }>>;
}

const then = <T>(value: unknown, next: () => T): T | Promise<T> =>
  value instanceof Promise ? value.then(next) : next();

async function sqliteBackend(): Promise<Backend> {
  const database = new Database(join(dir, `${randomUUID()}.db`));
  const store = sqliteStore({ database, closeDatabase: true });
  await store.migrate();
  database.exec('CREATE TABLE ledger (ref TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
  return {
    name: 'sqlite',
    store: store as unknown as IdempotencyStore<unknown>,
    insert: (tx, ref, amount) =>
      void (tx as Database.Database).prepare('INSERT INTO ledger (ref, amount) VALUES (?, ?)').run(ref, amount),
    ledger: async () =>
      database.prepare('SELECT ref, amount FROM ledger ORDER BY ref').all() as Array<{ ref: string; amount: number }>,
  };
}

async function postgresBackend(): Promise<Backend> {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 12 });
  pools.push(pool);
  const { store, insert, ledger } = await postgresLedger(pool, 'idem_local', drops);
  return {
    name: 'postgres',
    store: store as unknown as IdempotencyStore<unknown>,
    insert: (tx, ref, amount) => insert(tx as pg.PoolClient, ref, amount),
    ledger,
  };
}

const backends: Array<[string, () => Promise<Backend>, boolean]> = [
  ['sqlite', sqliteBackend, true],
  ['postgres', postgresBackend, pgAvailable],
];

for (const [name, open, available] of backends) {
  describe.skipIf(!available)(`runLocal on ${name}`, () => {
    const setup = async (events: IdempotencyEvent[] = []) => {
      const backend = await open();
      const clock = manualClock(T0);
      const onEvent = (event: IdempotencyEvent) => events.push(event);
      const engine = createEngine({ store: backend.store, clock, leaseMs: LEASE, ttlMs: TTL, onEvent });
      let calls = 0;
      /** A charge: one ledger row under the record's id, then the given answer. */
      const charge =
        (status = 201, outcome?: LocalWorkResult['outcome']) =>
        (tx: unknown, { id }: LocalContext): LocalWorkResult | Promise<LocalWorkResult> => {
          calls++;
          return then(backend.insert(tx, id, 500), () => ({
            response: json(status, { id, amount: 500 }),
            resultId: id,
            ...(outcome === undefined ? {} : { outcome }),
          }));
        };
      const run = (req: RunRequest, work: Parameters<typeof runLocal<unknown>>[2], e: Engine<unknown> = engine) =>
        runLocal(e, req, work);
      return { backend, clock, engine, charge, run, calls: () => calls };
    };

    it('a new key runs once and commits with its ledger row; a retry replays the answer byte for byte', async () => {
      const { backend, charge, run, calls } = await setup();
      const req = request();
      const first = await run(req, charge());
      const id = first.record?.id as string;
      expect([first.replayed, first.response.status, first.record?.status, first.record?.resultId]).toEqual([
        false,
        201,
        'succeeded',
        id,
      ]);
      const retry = await run(req, charge());
      expect(retry.replayed).toBe(true);
      expect(retry.response.status).toBe(201);
      expect(retry.response.headers).toEqual(first.response.headers);
      expect(Buffer.from(retry.response.body).equals(Buffer.from(first.response.body))).toBe(true);
      expect(calls()).toBe(1);
      expect(await backend.ledger()).toEqual([{ ref: id, amount: 500 }]);
      const stored = await backend.store.get(recordPk(scope, req.key));
      expect([stored?.status, stored?.id, stored?.resultId, stored?.response?.status]).toEqual([
        'succeeded',
        id,
        id,
        201,
      ]);
      await backend.store.close();
    });

    it('the same key with another payload: FINGERPRINT_MISMATCH, and the work does not run', async () => {
      const { backend, charge, run, calls } = await setup();
      const req = request();
      await run(req, charge());
      await expect(run({ ...req, fingerprint: 'b'.repeat(64) }, charge())).rejects.toMatchObject({
        code: 'FINGERPRINT_MISMATCH',
      });
      expect(calls()).toBe(1);
      expect((await backend.ledger()).length).toBe(1);
      await backend.store.close();
    });

    it('a work that throws after writing rolls back its write and the claim: the key is free, and the next call runs', async () => {
      const { backend, charge, run, calls } = await setup();
      const req = request();
      const boom = new Error('the work failed after its INSERT');
      const failing = (tx: unknown, context: LocalContext) =>
        then(backend.insert(tx, context.id, 500), () => {
          throw boom;
        });
      await expect(run(req, failing)).rejects.toBe(boom);
      expect(await backend.store.get(recordPk(scope, req.key))).toBe(null);
      expect(await backend.ledger()).toEqual([]);
      const next = await run(req, charge());
      expect([next.replayed, next.response.status, calls()]).toEqual([false, 201, 1]);
      expect(await backend.ledger()).toEqual([{ ref: next.record?.id as string, amount: 500 }]);
      await backend.store.close();
    });

    it('a retryable outcome (503) rolls everything back and answers once; the retry runs the work again and commits', async () => {
      const { backend, charge, run, calls } = await setup();
      const req = request();
      const unavailable = await run(req, charge(503));
      expect([unavailable.replayed, unavailable.response.status, unavailable.record]).toEqual([false, 503, null]);
      expect(await backend.store.get(recordPk(scope, req.key))).toBe(null);
      expect(await backend.ledger()).toEqual([]);
      const released = await run(req, charge(201, 'release'));
      expect([released.response.status, released.record]).toEqual([201, null]);
      expect(await backend.ledger()).toEqual([]);
      const retry = await run(req, charge());
      expect([retry.replayed, retry.response.status, retry.record?.status, calls()]).toEqual([
        false,
        201,
        'succeeded',
        3,
      ]);
      expect((await backend.ledger()).length).toBe(1);
      await backend.store.close();
    });

    it('a final 4xx commits: the declined charge and its record land together, and a retry replays the 402', async () => {
      const { backend, charge, run, calls } = await setup();
      const req = request();
      const declined = await run(req, charge(402));
      expect([declined.record?.status, declined.record?.retryable]).toEqual(['failed', false]);
      const retry = await run(req, charge(402));
      expect([retry.replayed, retry.response.status, calls()]).toEqual([true, 402, 1]);
      expect(Buffer.from(retry.response.body).toString()).toBe(Buffer.from(declined.response.body).toString());
      expect(await backend.ledger()).toEqual([{ ref: declined.record?.id as string, amount: 500 }]);
      await backend.store.close();
    });

    it('meets a lease-mode attempt on the same key: IN_FLIGHT while its lease lives; after it lapses, a takeover with its id', async () => {
      const events: IdempotencyEvent[] = [];
      const { backend, charge, run, clock } = await setup(events);
      const req = request();
      const pk = recordPk(scope, req.key);
      // A lease-mode attempt claims the key, then its process dies: no renewal, no completion.
      const { key, fingerprint } = req;
      const dead = {
        pk,
        scope,
        key,
        fingerprint,
        token: 'dead-token',
        id: 'dead-id',
        now: T0,
        leaseMs: LEASE,
        ttlMs: TTL,
      };
      expect((await backend.store.claim(dead)).kind).toBe('claimed');
      await expect(run(req, charge())).rejects.toMatchObject({ code: 'IN_FLIGHT', retryAfterMs: LEASE });
      clock.advance(LEASE);
      const seen: LocalContext[] = [];
      const taken = await run(req, (tx, context) => (seen.push(context), charge()(tx, context)));
      expect([taken.replayed, seen[0]?.reclaimed, seen[0]?.id, taken.record?.id]).toEqual([
        false,
        true,
        'dead-id',
        'dead-id',
      ]);
      // The dead attempt's late completion is fenced out by its token.
      const outcome = { status: 'succeeded', retryable: false, resultId: null, response: json(201, {}) } as const;
      const late = await backend.store.complete({ pk, token: 'dead-token', now: T0 + LEASE, outcome });
      expect(late.ok).toBe(false);
      expect(await backend.ledger()).toEqual([{ ref: 'dead-id', amount: 500 }]);
      expect(events.map((e) => [e.type, 'id' in e ? e.id : undefined])).toEqual([
        ['in_flight', 'dead-id'],
        ['takeover', 'dead-id'],
        ['executed', 'dead-id'],
      ]);
      await backend.store.close();
    });

    it('reports executed, replayed and mismatch to onEvent', async () => {
      const events: IdempotencyEvent[] = [];
      const { backend, charge, run } = await setup(events);
      const req = request();
      await run(req, charge());
      await run(req, charge());
      await run({ ...req, fingerprint: 'c'.repeat(64) }, charge()).catch(() => undefined);
      expect(events.map((e) => [e.type, 'outcome' in e ? e.outcome : undefined])).toEqual([
        ['executed', 'succeeded'],
        ['replayed', undefined],
        ['mismatch', undefined],
      ]);
      await backend.store.close();
    });

    it('a store that fails: STORE_UNAVAILABLE, and the work does not run', async () => {
      const { backend, charge, run, calls } = await setup();
      await backend.store.close();
      const failed = await run(request(), charge()).catch((error: unknown) => error);
      expect([failed instanceof IdempotencyError && failed.code, calls()]).toEqual(['STORE_UNAVAILABLE', 0]);
    });
  });
}

describe('runLocal: what it refuses', () => {
  it('a store without runLocal (memory): CONFIG_INVALID, nothing runs', async () => {
    const engine = createEngine({ store: memoryStore() });
    let ran = false;
    await expect(runLocal(engine, request(), () => ((ran = true), { response: json(201, {}) }))).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message:
        'Expected `store` to be a store with runLocal (SQLite or PostgreSQL) for database-local work, got "memory".',
    });
    expect(ran).toBe(false);
  });

  it('a key with a lone surrogate: KEY_INVALID, as begin refuses it, and nothing runs', async () => {
    const backend = await sqliteBackend();
    const engine = createEngine({ store: backend.store, leaseMs: LEASE, ttlMs: TTL });
    let ran = 0;
    const trips = backend.store.roundTrips;
    const failed = runLocal(engine, { ...request(), key: 'k\uD800' }, () => (ran++, { response: json(201, {}) }));
    await expect(failed).rejects.toMatchObject({ code: 'KEY_INVALID' });
    expect([ran, backend.store.roundTrips - trips]).toEqual([0, 0]);
    await backend.store.close();
  });

  it("with the engine's cacheSize, a committed record replays from the cache: no store round trip", async () => {
    const backend = await sqliteBackend();
    const engine = createEngine({ store: backend.store, leaseMs: LEASE, ttlMs: TTL, cacheSize: 8 });
    const req = request();
    const first = await runLocal(engine, req, () => ({ response: json(201, { n: 1 }) }));
    const trips = backend.store.roundTrips;
    const again = await runLocal(engine, req, () => ({ response: json(201, { n: 2 }) }));
    expect([first.replayed, again.replayed, again.record?.id, backend.store.roundTrips - trips]).toEqual([
      false,
      true,
      first.record?.id,
      0,
    ]);
    expect(Buffer.from(again.response.body).toString()).toBe('{"n":1}');
    await backend.store.close();
  });

  it('asynchronous work on SQLite: CONFIG_INVALID, its write rolled back, the key free', async () => {
    const backend = await sqliteBackend();
    const engine = createEngine({ store: backend.store, clock: manualClock(T0), leaseMs: LEASE, ttlMs: TTL });
    const req = request();
    const failed = runLocal(engine, req, async (tx, { id }) => {
      backend.insert(tx, id, 500); // runs synchronously, inside the transaction, before the first await
      return { response: json(201, {}) };
    });
    await expect(failed).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: 'Expected `work` to be a synchronous function: SQLite transactions here are synchronous.',
    });
    expect(await backend.ledger()).toEqual([]);
    expect(await backend.store.get(recordPk(scope, req.key))).toBe(null);
    await backend.store.close();
  });
});

describe('runLocal: concurrent duplicates of one key', () => {
  it('sqlite, 8 calls at once in one process: one runs; the transaction is synchronous, so the others find its commit and replay', async () => {
    const backend = await sqliteBackend();
    const engine = createEngine({ store: backend.store, leaseMs: LEASE, ttlMs: TTL });
    const req = request();
    let runs = 0;
    const results = await Promise.all(
      Array.from({ length: 8 }, () =>
        runLocal(engine, req, (tx, { id }) => {
          runs++;
          backend.insert(tx, id, 500);
          return { response: json(201, { id }) };
        }),
      ),
    );
    const fresh = results.filter((r) => !r.replayed);
    expect([runs, fresh.length, results.filter((r) => r.replayed).length]).toEqual([1, 1, 7]);
    const body = Buffer.from((fresh[0] as (typeof results)[number]).response.body);
    for (const r of results) expect(Buffer.from(r.response.body).equals(body)).toBe(true);
    expect((await backend.ledger()).length).toBe(1);
    await backend.store.close();
  });

  it.skipIf(!pgAvailable)(
    'postgres, 8 calls at once: one runs and holds its transaction until the 7 others wait on its row; they replay',
    async () => {
      const backend = await postgresBackend();
      const pool = pools.at(-1) as pg.Pool;
      const engine = createEngine({ store: backend.store, leaseMs: LEASE, ttlMs: TTL });
      const req = request();
      const N = 8;
      let runs = 0;
      let waitersSeen = -1;
      const results = await Promise.all(
        Array.from({ length: N }, () =>
          runLocal(engine, req, async (tx, { id }) => {
            runs++;
            const client = tx as pg.PoolClient;
            const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
            // The signal: every other call is blocked by this transaction (its INSERT waits on our row). Polled on
            // another connection, since pg_stat_activity is a snapshot per transaction.
            await waitFor(
              () => `${N - 1} duplicates to wait, ${waitersSeen} did`,
              async () => {
                const { rows } = await pool.query<{ n: number }>(
                  'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))',
                  [pid],
                );
                waitersSeen = rows[0]?.n ?? 0;
                return waitersSeen === N - 1;
              },
              { everyMs: 5 },
            );
            await backend.insert(tx, id, 500);
            return { response: json(201, { id }) };
          }),
        ),
      );
      expect([runs, waitersSeen]).toEqual([1, N - 1]);
      const fresh = results.filter((r) => !r.replayed);
      expect([fresh.length, results.filter((r) => r.replayed).length]).toEqual([1, N - 1]);
      const body = Buffer.from((fresh[0] as (typeof results)[number]).response.body);
      for (const r of results) expect(Buffer.from(r.response.body).equals(body)).toBe(true);
      expect((await backend.ledger()).length).toBe(1);
      await backend.store.close();
    },
  );
});
