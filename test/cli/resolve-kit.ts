/**
 * What the `idem records resolve` tests share: a real SQLite file or PostgreSQL schema, the quarantining payment
 * function, and a record left in progress by a dead holder (quarantined by the next attempt).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, expect } from 'vitest';
import { idempotent, recordPk, type IdempotencyStore } from '../../packages/idem/src/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { inProcess } from './helpers.js';

export const SCOPE = 'acct_resolve';
export const LEASE = 1_000;
const dir = tempDir('idem-resolve-');
afterAll(() => dir.remove());
export const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);

export interface Backing {
  readonly url: string;
  readonly store: IdempotencyStore<never>;
  close(): Promise<void>;
}

export async function sqlite(): Promise<Backing> {
  const file = join(dir.path, `${randomUUID()}.db`);
  const store = sqliteStore({ database: new Database(file), closeDatabase: true });
  await store.migrate();
  return { url: `sqlite:${file}`, store: store, close: () => store.close() };
}

export async function postgresql(): Promise<Backing> {
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
export const resolve = (backing: Backing, key: string, ...flags: string[]) =>
  inProcess(['records', 'resolve', SCOPE, key, '--store', backing.url, ...flags]);

/** The payment function every case calls: quarantine on takeover; `runs` counts the work's runs. */
export function payments(store: IdempotencyStore<never>) {
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
export async function quarantined(store: IdempotencyStore<never>, key: string, leaseMs = LEASE): Promise<string> {
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
