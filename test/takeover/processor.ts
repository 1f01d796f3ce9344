/**
 * What the kill -9 takeover test (./kill.test.ts) and its worker process (./worker.ts) share: the Idem store and a
 * processor that does NOT deduplicate — a table that gains one row per effect, with no unique constraint on the
 * record id — on SQLite (one database file) or PostgreSQL (one schema of its own).
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import {
  idempotent,
  type IdempotentFunction,
  type IdempotentOptions,
  type TakeoverPolicy,
} from '../../packages/idem/src/index.js';
import { sqliteStore } from '../../packages/idem/src/stores/sqlite/index.js';
import { postgresStore } from '../../packages/idem/src/stores/postgres/index.js';
import type { IdempotencyStore } from '../../packages/idem/src/core/record.js';
import { POSTGRES_URL } from '../services.js';

export const LEASE_MS = 400;
export const SCOPE = 'acct_takeover';
export type Backing = 'sqlite' | 'postgres';

export interface Payment {
  readonly key: string;
  readonly amount: number;
}

/** The store, and the processor's two calls: make one effect for `id`, and count the effects made for it. */
export interface Opened {
  readonly store: IdempotencyStore<unknown>;
  effect(id: string): Promise<void>;
  effects(id: string): Promise<number>;
  close(): Promise<void>;
}

/** Opens `where` (a SQLite file, or a PostgreSQL schema); `create`: migrate the store and make the processor's table. */
export async function open(backing: Backing, where: string, create = false): Promise<Opened> {
  if (backing === 'sqlite') {
    const database = new Database(where);
    const store = sqliteStore({ database });
    if (create) {
      await store.migrate();
      database.exec('CREATE TABLE processor_effects (id TEXT NOT NULL, at INTEGER NOT NULL)');
    }
    const insert = database.prepare('INSERT INTO processor_effects (id, at) VALUES (?, ?)');
    const count = database.prepare('SELECT count(*) AS n FROM processor_effects WHERE id = ?');
    return {
      store: store,
      effect: async (id) => void insert.run(id, Date.now()),
      effects: async (id) => (count.get(id) as { n: number }).n,
      close: async () => {
        await store.close();
        database.close();
      },
    };
  }
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  const store = postgresStore({ pool, schema: where });
  if (create) {
    await store.migrate();
    await pool.query(`CREATE TABLE "${where}".processor_effects (id text NOT NULL, at bigint NOT NULL)`);
  }
  return {
    store: store,
    effect: async (id) =>
      void (await pool.query(`INSERT INTO "${where}".processor_effects VALUES ($1, $2)`, [id, Date.now()])),
    effects: async (id) =>
      (
        await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${where}".processor_effects WHERE id = $1`, [
          id,
        ])
      ).rows[0]?.n ?? 0,
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}

/**
 * The payment as the application protects it: `charge` runs under `idempotent()` with the given policy; the
 * reconcile hook asks the processor whether an effect exists for the record's id.
 */
export function payment(
  opened: Opened,
  takeover: TakeoverPolicy,
  charge: (id: string) => Promise<{ charged: string }>,
): IdempotentFunction<Payment, { charged: string }> {
  const options: IdempotentOptions<Payment, never, { charged: string }> = {
    store: opened.store,
    scope: SCOPE,
    key: (p) => p.key,
    leaseMs: LEASE_MS,
    ttlMs: 86_400_000,
    takeover,
    reconcile: async ({ id }) =>
      (await opened.effects(id)) > 0 ? { state: 'succeeded', response: { charged: id } } : { state: 'not_done' },
  };
  return idempotent(async (_payment: Payment, { id }) => charge(id), options);
}
