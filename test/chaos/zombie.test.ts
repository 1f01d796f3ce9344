/**
 * Zombie fencing (issue 6, item 2): a first attempt stalls past its lease, a second attempt takes the key over
 * and completes, then the first wakes and tries to complete. Its write must be refused, the record must keep
 * the new owner's outcome, and — where the work's writes share the records' database — its ledger write must
 * roll back, so the money moves once.
 *
 * 1. The engine directly, on real SQLite and real PostgreSQL, with one manual clock per "process": the zombie's
 *    clock stands still (a GC pause, a frozen VM — its renewal timers never fire) while the other's is past the
 *    lease. Then again with the zombie's renewals firing after the takeover: the renewal is refused and the
 *    work's signal is aborted, and its completion is refused all the same.
 * 2. The Web layer: a handler that honours `context.signal` (and so throws when the lease is lost) is answered
 *    409 `idempotency-lease-lost`, not 500.
 * 3. Two real server processes on one PostgreSQL schema, one of them behind the fault proxy: a slow charge on
 *    the proxied server, the proxy stalled so its lease renewals cannot reach the database, the other server
 *    takes the key over and charges; the proxy restored, the zombie's transaction (charge INSERT + fenced
 *    UPDATE) rolls back. One charge in the ledger, and every later retry gets the new owner's answer.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createEngine,
  isIdempotencyError,
  manualClock,
  type IdempotencyEvent,
  type IdempotencyStore,
  type StoredResponse,
  type WorkContext,
} from 'idem';
import { idempotency } from 'idem/http';
import { memoryStore } from 'idem/stores/memory';
import { postgresStore, type PostgresQueryable } from 'idem/stores/postgres';
import { sqliteStore, type SqliteDatabase } from 'idem/stores/sqlite';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startFaultProxy } from '../fault-proxy.js';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { POSTGRES } from '../stores/backings.js';
import { dropSchema } from '../stores/cleanup.js';
import { chargeRequest, held } from '../stores/scenarios.js';

const LEASE_MS = 1_000;
const T0 = Date.parse('2026-06-01T12:00:00Z');
const suffix = () => randomBytes(5).toString('hex');
const response = (who: string): StoredResponse => ({
  status: 201,
  headers: [['content-type', 'application/json']],
  body: new TextEncoder().encode(JSON.stringify({ charge: who })),
});

/** A database that holds the records and a ledger, as the engine sees it: a store plus ledger writes and reads. */
interface Shared<Tx> {
  readonly store: IdempotencyStore<Tx>;
  /** The work's write, run inside the completion's transaction. */
  insert(tx: Tx, recordId: string, writer: string): unknown;
  ledger(): Promise<Array<{ record_id: string; writer: string }>>;
  close(): Promise<void>;
}

async function sqliteShared(path: string): Promise<Shared<SqliteDatabase>> {
  const database = new Database(path);
  const store = sqliteStore({ database });
  await store.migrate();
  database.exec('CREATE TABLE zombie_ledger (record_id TEXT NOT NULL, writer TEXT NOT NULL)');
  return {
    store,
    insert: (tx, recordId, writer) =>
      tx.prepare('INSERT INTO zombie_ledger (record_id, writer) VALUES (?, ?)').run(recordId, writer),
    ledger: async () =>
      database.prepare('SELECT record_id, writer FROM zombie_ledger ORDER BY rowid').all() as Array<{
        record_id: string;
        writer: string;
      }>,
    close: async () => {
      await store.close();
      database.close();
    },
  };
}

/** `unique`: the ledger is unique on the record id, as the demo's is (docs/DESIGN.md: The work's own writes): the zombie's INSERT then fails. */
async function postgresShared(schema: string, unique = false): Promise<Shared<PostgresQueryable>> {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  const store = postgresStore<pg.PoolClient>({ pool, schema });
  await store.migrate();
  // Without the unique constraint, a failed fence would show as a second row.
  await pool.query(
    `CREATE TABLE "${schema}".zombie_ledger (seq serial PRIMARY KEY, record_id text NOT NULL ${unique ? 'UNIQUE' : ''}, writer text NOT NULL)`,
  );
  return {
    store,
    insert: (tx, recordId, writer) =>
      tx.query(`INSERT INTO "${schema}".zombie_ledger (record_id, writer) VALUES ($1, $2)`, [recordId, writer]),
    ledger: async () =>
      (await pool.query(`SELECT record_id, writer FROM "${schema}".zombie_ledger ORDER BY seq`)).rows as Array<{
        record_id: string;
        writer: string;
      }>,
    close: async () => {
      await store.close();
      await pool.end();
      await dropSchema(schema);
    },
  };
}

/**
 * The scenario, on any shared store. `renewAfterTakeover`: the zombie's clock moves on after the takeover, so
 * its renewal timer fires and is refused (the work is told through its signal) before it tries to complete.
 */
async function zombie<Tx>(shared: Shared<Tx>, renewAfterTakeover: boolean) {
  const zombieClock = manualClock(T0);
  const ownerClock = manualClock(T0 + LEASE_MS + 1);
  const events: IdempotencyEvent[] = [];
  const zombieEngine = createEngine({
    store: shared.store,
    clock: zombieClock,
    leaseMs: LEASE_MS,
    ttlMs: 600_000,
    onEvent: (e) => events.push(e),
  });
  const ownerEngine = createEngine({ store: shared.store, clock: ownerClock, leaseMs: LEASE_MS, ttlMs: 600_000 });
  const request = { scope: 'acct_zombie', key: randomUUID(), fingerprint: 'f'.repeat(64) };

  let zombieContext!: WorkContext;
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  let wake!: () => void;
  const woken = new Promise<void>((resolve) => (wake = resolve));
  let zombieEffectsRan = false;
  const first = zombieEngine
    .run(request, async (context) => {
      zombieContext = context;
      started();
      await woken; // stalled: no renewals, no progress
      return {
        response: response('zombie'),
        resultId: 'ch_zombie',
        effects: (tx: Tx) => {
          zombieEffectsRan = true;
          return shared.insert(tx, context.id, 'zombie');
        },
      };
    })
    .catch((error: unknown) => error);
  await running;

  // The lease has lapsed on the owner's clock: the owner takes over and completes, with the same record id.
  let ownerContext!: WorkContext;
  const second = await ownerEngine.run(request, async (context) => {
    ownerContext = context;
    return {
      response: response('owner'),
      resultId: 'ch_owner',
      effects: (tx: Tx) => shared.insert(tx, context.id, 'owner'),
    };
  });
  const owned = await shared.store.get(`IDEMPOTENCY#${request.scope}#${request.key}`);

  if (renewAfterTakeover) {
    zombieClock.advance(LEASE_MS); // its renewal timer fires now: renew is conditional on the old token
    await waitFor("the zombie's refused renewal to abort its work", () => zombieContext.signal.aborted, {
      timeoutMs: 5_000,
    });
  }
  const abortedBeforeComplete = zombieContext.signal.aborted;
  wake(); // the zombie ignores its signal and tries to complete anyway
  const zombieError = await first;
  const after = await shared.store.get(`IDEMPOTENCY#${request.scope}#${request.key}`);
  const retry = await zombieEngine.run(request, async () => {
    throw new Error('a retry after the owner completed must replay, not run');
  });
  return {
    request,
    second,
    owned,
    zombieContext,
    ownerContext,
    zombieError,
    after,
    retry,
    events,
    zombieEffectsRan,
    abortedBeforeComplete,
    ledger: await shared.ledger(),
  };
}

function expectFenced(
  result: Awaited<ReturnType<typeof zombie>>,
  { effectsRan, renewed }: { effectsRan: boolean; renewed: boolean },
) {
  const { second, owned, zombieContext, ownerContext, zombieError, after, retry, events, ledger } = result;
  // The takeover: same stable id, a new token, and the owner ran as a reclaim.
  expect([ownerContext.reclaimed, ownerContext.id]).toEqual([true, zombieContext.id]);
  expect([second.replayed, Buffer.from(second.response.body).toString()]).toEqual([false, '{"charge":"owner"}']);
  // The zombie's completion is refused ...
  expect(isIdempotencyError(zombieError) && zombieError.code).toBe('LEASE_LOST');
  expect(events.filter((e) => e.type === 'stale_write_refused' || e.type === 'lease_lost').map((e) => e.type)).toEqual(
    renewed ? ['lease_lost', 'stale_write_refused'] : ['stale_write_refused'],
  );
  expect(result.abortedBeforeComplete).toBe(renewed);
  // ... the record keeps the owner's outcome, token and all ...
  expect([
    after?.status,
    after?.resultId,
    after?.token,
    after?.id,
    Buffer.from(after?.response?.body ?? []).toString(),
  ]).toEqual(['succeeded', 'ch_owner', owned?.token, zombieContext.id, '{"charge":"owner"}']);
  // ... its ledger write is rolled back (or, on SQLite, never runs: the fenced UPDATE comes first) ...
  expect(result.zombieEffectsRan).toBe(effectsRan);
  expect(ledger).toEqual([{ record_id: zombieContext.id, writer: 'owner' }]);
  // ... and the client's retry gets the owner's answer.
  expect([retry.replayed, Buffer.from(retry.response.body).toString()]).toEqual([true, '{"charge":"owner"}']);
}

describe('zombie fencing, engine on real SQLite (one file, records and ledger)', () => {
  const dir = tempDir('idem-zombie-');
  afterAll(() => dir.remove());

  for (const renewed of [false, true]) {
    it(`a stalled first attempt ${renewed ? 'whose renewal is refused after the takeover' : 'that never renews'} cannot complete; one ledger row, the owner's`, async () => {
      const shared = await sqliteShared(join(dir.path, `zombie-${renewed}.db`));
      try {
        expectFenced(await zombie(shared, renewed), { effectsRan: false, renewed });
      } finally {
        await shared.close();
      }
    });
  }
});

describe.skipIf(!(await serviceAvailable('PostgreSQL', POSTGRES_URL)))(
  'zombie fencing, engine on real PostgreSQL (records and ledger in one schema)',
  () => {
    for (const renewed of [false, true]) {
      it(`a stalled first attempt ${renewed ? 'whose renewal is refused after the takeover' : 'that never renews'}: its INSERT runs, then rolls back with the refused UPDATE`, async () => {
        const shared = await postgresShared(`idem_zombie_${suffix()}`);
        try {
          expectFenced(await zombie(shared, renewed), { effectsRan: true, renewed });
        } finally {
          await shared.close();
        }
      });
    }

    it("with the ledger unique on the record id (as the demo's): the zombie's INSERT fails on the owner's row first — still a lost lease (409), not a store failure (503)", async () => {
      const shared = await postgresShared(`idem_zombie_${suffix()}`, true);
      try {
        expectFenced(await zombie(shared, false), { effectsRan: true, renewed: false });
      } finally {
        await shared.close();
      }
    });
  },
);

describe('zombie fencing in the Web layer (in-process, memory store)', () => {
  it('a handler that honours its signal and throws when the lease is lost is answered 409 lease-lost, not 500', async () => {
    const store = memoryStore();
    const zombieClock = manualClock(T0);
    const errors: unknown[] = [];
    const zombieHandle = idempotency({
      store,
      scope: () => 'global',
      clock: zombieClock,
      leaseMs: LEASE_MS,
      ttlMs: 600_000,
      onError: (e) => errors.push(e),
    })(async (_request, { signal }) => {
      await sleep(60_000, undefined, { signal }); // a slow downstream call that gives up when told to
      return new Response('{"charge":"zombie"}', { status: 201 });
    });
    const ownerHandle = idempotency({
      store,
      scope: () => 'global',
      clock: manualClock(T0 + LEASE_MS + 1),
      leaseMs: LEASE_MS,
      ttlMs: 600_000,
    })(async () => new Response('{"charge":"owner"}', { status: 201 }));
    const request = () =>
      new Request('http://x/v1/charges', { method: 'POST', headers: { 'idempotency-key': 'k' }, body: '{}' });
    const zombieAnswer = zombieHandle(request());
    await waitFor("the zombie's claim", async () => (await store.get('IDEMPOTENCY#global#k')) !== null, { everyMs: 5 });
    const owner = await ownerHandle(request());
    zombieClock.advance(LEASE_MS); // the zombie's renewal fires, is refused, and aborts its handler
    const answer = await zombieAnswer;
    expect([owner.status, await owner.text()]).toEqual([201, '{"charge":"owner"}']);
    expect([answer.status, ((await answer.json()) as { type: string }).type]).toEqual([
      409,
      'urn:idem:problem:idempotency-lease-lost',
    ]);
    expect(errors).toEqual([]);
    const retry = await zombieHandle(request());
    expect([retry.headers.get('idempotent-replayed'), await retry.text()]).toEqual(['true', '{"charge":"owner"}']);
  });
});

describe.skipIf(!(await serviceAvailable('PostgreSQL', POSTGRES_URL)))(
  'zombie fencing across two server processes on PostgreSQL (renewals stalled by the fault proxy)',
  () => {
    it("the stalled server loses the key; its charge transaction rolls back; one charge; every retry gets the new owner's bytes", async () => {
      const proxy = await startFaultProxy('127.0.0.1', Number(new URL(POSTGRES_URL).port || 5432));
      const store = await POSTGRES.open((url) => proxy.via(url));
      const env = { IDEM_LEASE_MS: '2000' };
      let zombieServer: DemoProcess | undefined;
      let owner: DemoProcess | undefined;
      try {
        // Start one, then the other: both migrate the same schema (advisory-locked), so the order does not matter.
        zombieServer = await startDemo({ ...env, ...store.env });
        owner = await startDemo({ ...env, ...store.direct });
        const key = randomUUID();
        const amount = 4_000 + Math.floor(Math.random() * 999);
        const charge = (server: DemoProcess, headers: Record<string, string> = {}) =>
          fetch(chargeRequest(server.url, key, { amount }, headers), { signal: AbortSignal.timeout(30_000) }).then(
            async (r) => ({
              status: r.status,
              replayed: r.headers.get('idempotent-replayed'),
              body: await r.text(),
            }),
          );

        // The slow first attempt, on the proxied server; stall its database link once the claim is visible.
        const slow = charge(zombieServer, { 'idem-lab-delay-ms': '6000' });
        expect((await held(store, key)).status).toBe('in_progress');
        proxy.stall();

        // The other server: 409 while the lease lives, then (no renewal got through) a takeover that charges.
        const seen: number[] = [];
        const taken = await waitFor(
          'the other server to take the key over',
          async () => {
            const attempt = await charge(owner as DemoProcess);
            seen.push(attempt.status);
            return attempt.status === 201 && attempt;
          },
          { everyMs: 150 },
        );
        expect(taken.replayed).toBeNull();
        expect(new Set(seen)).toEqual(new Set([409, 201]));
        proxy.restore();

        // The zombie wakes: its completion (INSERT charge + fenced UPDATE) is refused and rolled back — answered 409,
        // or 503 when its stalled link gave up first (3 runs in 17 here): never a success. What it charged is
        // checked below either way.
        const zombieAnswer = await slow;
        expect([
          [409, 'urn:idem:problem:idempotency-lease-lost'],
          [503, 'urn:idem:problem:idempotency-store-unavailable'],
        ]).toContainEqual([zombieAnswer.status, (JSON.parse(zombieAnswer.body) as { type: string }).type]);
        const retries = [await charge(zombieServer), await charge(owner)];
        expect(retries.map((r) => [r.status, r.replayed, r.body])).toEqual([
          [201, 'true', taken?.body],
          [201, 'true', taken?.body],
        ]);
        // The schema is this test's own: its only charge is the new owner's (the zombie's rolled back).
        expect(await store.charges()).toEqual([(JSON.parse(taken?.body ?? '{}') as { id: string }).id]);
      } finally {
        await Promise.all([zombieServer?.stop(), owner?.stop()]);
        await proxy.close();
        await store.cleanup();
      }
    }, 60_000);
  },
);
