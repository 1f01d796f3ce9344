/**
 * `idem records resolve SCOPE KEY` (docs/DESIGN.md: Takeover policy) against a real SQLite file and a real
 * PostgreSQL schema: each form settles a record left in progress by a dead holder, and the quarantining engine
 * then replays what was recorded, or (after --rerun) runs the work under the same id; a live lease is refused.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { idempotent, recordPk, type IdempotencyStore } from '../../packages/idem/src/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { inProcess } from './helpers.js';

const SCOPE = 'acct_resolve';
const LEASE = 1_000;
const dir = tempDir('idem-resolve-');
afterAll(() => dir.remove());
const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);

interface Backing {
  readonly url: string;
  readonly store: IdempotencyStore<never>;
  close(): Promise<void>;
}

async function sqlite(): Promise<Backing> {
  const file = join(dir.path, `${randomUUID()}.db`);
  const store = sqliteStore({ database: new Database(file), closeDatabase: true });
  await store.migrate();
  return { url: `sqlite:${file}`, store: store, close: () => store.close() };
}

async function postgresql(): Promise<Backing> {
  const schema = `idem_resolve_${randomBytes(6).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  const store = postgresStore({ pool, schema });
  await store.migrate();
  return {
    url: `${POSTGRES_URL}?schema=${schema}`,
    store: store,
    close: async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/** `idem records resolve SCOPE KEY --store URL …flags`, in this process. */
const resolve = (backing: Backing, key: string, ...flags: string[]) =>
  inProcess(['records', 'resolve', SCOPE, key, '--store', backing.url, ...flags]);

/** The payment function every case calls: quarantine on takeover; `runs` counts the work's runs. */
function payments(store: IdempotencyStore<never>) {
  const ran: string[] = [];
  const pay = idempotent(
    async (_input: { key: string }, { id }) => {
      ran.push(id);
      return { charged: id };
    },
    { store, scope: SCOPE, key: (i) => i.key, leaseMs: LEASE, ttlMs: 86_400_000, takeover: 'quarantine' },
  );
  return { pay, ran };
}

/** A record left in progress by a dead holder, quarantined by the next attempt; its id. */
async function quarantined(store: IdempotencyStore<never>, key: string, leaseMs = LEASE): Promise<string> {
  const { pay } = payments(store);
  // The dead holder: its claim, as its process wrote it, two leases ago (or live, with `leaseMs` long).
  const claim = await store.claim({
    pk: recordPk(SCOPE, key),
    scope: SCOPE,
    key,
    fingerprint: await fingerprintOf(store, key),
    token: randomUUID(),
    id: randomUUID(),
    now: Date.now() - 2 * LEASE,
    leaseMs,
    ttlMs: 86_400_000,
  });
  if (claim.kind !== 'claimed') throw new Error('seed claim refused');
  if (leaseMs === LEASE) await expect(pay({ key })).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
  // The quarantining attempt's own lease lapses unrenewed: wait for it, as an operator would.
  await expect
    .poll(async () => ((await store.get(recordPk(SCOPE, key)))?.leaseExpiresAt ?? 0) <= Date.now())
    .toBe(leaseMs === LEASE);
  return claim.record.id;
}

/** The fingerprint `idempotent()` gives `{ key }`: read from the record a throwaway key's call leaves. */
async function fingerprintOf(store: IdempotencyStore<never>, key: string): Promise<string> {
  const probe = idempotent(async () => null, { store, scope: `${SCOPE}_probe`, key: () => key, ttlMs: 86_400_000 });
  await probe({ key });
  return (await store.get(recordPk(`${SCOPE}_probe`, key)))?.fingerprint as string;
}

for (const [name, open, available] of [
  ['SQLite', sqlite, true],
  ['PostgreSQL', postgresql, postgres],
] as const) {
  describe.skipIf(!available)(`idem records resolve on ${name}`, () => {
    /** A case on a fresh backing of its own, with a fresh key; the backing is dropped after it. */
    const on = (test: (backing: Backing, key: string) => Promise<void>) => async () => {
      const backing = await open();
      try {
        await test(backing, randomUUID());
      } finally {
        await backing.close();
      }
    };
    it(
      '--succeeded --status 201 --body: recorded, and every retry replays it; the work never runs',
      on(async (backing, key) => {
        const id = await quarantined(backing.store, key);
        const body = JSON.stringify({ charged: id });
        const out = await resolve(backing, key, '--succeeded', '--status', '201', '--body', body);
        expect([out.code, out.stderr, out.stdout]).toEqual([
          0,
          '',
          `Resolved key "${key}" in scope ${SCOPE} (id ${id}): succeeded, 201; every retry now replays it.\n`,
        ]);
        const record = await backing.store.get(recordPk(SCOPE, key));
        expect([
          record?.status,
          record?.id,
          record?.response?.status,
          new TextDecoder().decode(record?.response?.body),
        ]).toEqual(['succeeded', id, 201, body]);
        const { pay, ran } = payments(backing.store);
        expect(await pay({ key })).toEqual({ charged: id });
        expect(ran).toEqual([]);
      }),
    );

    it(
      '--failed --status 402: a final failure every retry gets',
      on(async (backing, key) => {
        await quarantined(backing.store, key);
        const body = JSON.stringify({ name: 'Declined', message: 'card declined' });
        const out = await resolve(backing, key, '--failed', '--status', '422', '--body', body);
        expect([out.code, out.stderr]).toEqual([0, '']);
        const record = await backing.store.get(recordPk(SCOPE, key));
        expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', false, 422]);
        const { pay, ran } = payments(backing.store);
        await expect(pay({ key })).rejects.toMatchObject({
          name: 'IdempotentFailure',
          originalName: 'Declined',
          message: 'card declined',
        });
        expect(ran).toEqual([]);
      }),
    );

    it(
      '--rerun: the next attempt runs the work once, under the same id (a retryable failure is no takeover)',
      on(async (backing, key) => {
        const id = await quarantined(backing.store, key);
        const out = await resolve(backing, key, '--rerun');
        expect([out.code, out.stderr, out.stdout]).toEqual([
          0,
          '',
          `Resolved key "${key}" in scope ${SCOPE} (id ${id}): the next attempt runs the work again, under this id.\n`,
        ]);
        const { pay, ran } = payments(backing.store);
        expect(await pay({ key })).toEqual({ charged: id });
        expect(await pay({ key })).toEqual({ charged: id });
        expect(ran).toEqual([id]);
      }),
    );

    it(
      'a live lease is refused with one line, and the record is left as it was',
      on(async (backing, key) => {
        await quarantined(backing.store, key, 120_000);
        const before = await backing.store.get(recordPk(SCOPE, key));
        const out = await resolve(backing, key, '--rerun');
        expect(out.code).toBe(1);
        expect(out.stdout).toBe('');
        expect(out.stderr).toMatch(
          new RegExp(
            `^idem records: the lease on key "${key}" in scope ${SCOPE} is live for 11[89] s more: its holder may still be running; resolve it once the lease has lapsed\\.\\n$`,
          ),
        );
        expect(await backing.store.get(recordPk(SCOPE, key))).toEqual(before);
      }),
    );
  });
}
