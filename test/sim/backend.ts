/**
 * @module The real stores the simulator runs against: one memory store shared by every process, or one
 * SQLite in-memory database with a store instance per process incarnation. Also the shared ledger, which lives
 * in the store's own database and commits with the completion (docs/DESIGN.md: The work's own writes).
 */
import Database from 'better-sqlite3';
import type { IdempotencyRecord, IdempotencyStore } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { sqliteStore } from 'idem/stores/sqlite';
import { defectiveMemoryStore } from './defects.js';
import { MEMORY_DEFECTS, type BackendName, type DefectName } from './scenario.js';

/** A ledger row: which record's attempt wrote it. */
export interface LedgerRow {
  readonly recordId: string;
  readonly pk: string;
  readonly chargeId: string;
  readonly amount: number;
}

/** The store type the simulator handles; `Tx` is the store's transaction handle (SQLite) or nothing (memory). */
export type AnyStore = IdempotencyStore<unknown>;

export interface Backend {
  readonly name: BackendName;
  /** The real store a process incarnation talks to: its own instance where the backend allows one. */
  storeFor(): AnyStore;
  /** Reads a record straight from the backend, outside every wrapper (for invariant checks). */
  observe(pk: string): Promise<IdempotencyRecord | null>;
  /** `effects` for a completion: insert the row in the shared ledger, inside the completion's transaction. */
  ledgerEffect(row: LedgerRow): (tx: unknown) => void;
  /** Shared-ledger rows committed since the last call. */
  newLedgerRows(): LedgerRow[];
  /** The SQLite database, for the planted defects (which are written in its SQL). */
  readonly database: Database.Database | undefined;
  readonly table: string;
  close(): void;
}

/**
 * Opens a fresh backend for one seed.
 *
 * @example
 * const backend = await openBackend('sqlite')
 */
export async function openBackend(name: BackendName, defect?: DefectName): Promise<Backend> {
  return name === 'memory' ? memoryBackend(defect) : sqliteBackend();
}

function memoryBackend(defect: DefectName | undefined): Backend {
  const planted = (MEMORY_DEFECTS as readonly string[]).includes(defect as string);
  const store = (planted ? defectiveMemoryStore(defect) : memoryStore()) as AnyStore;
  let pending: LedgerRow[] = [];
  return {
    name: 'memory',
    storeFor: () => store,
    observe: (pk) => store.get(pk),
    // The memory store runs effects only when the token still holds, just before it writes the outcome.
    ledgerEffect: (row) => () => {
      pending.push(row);
    },
    newLedgerRows: () => {
      const rows = pending;
      pending = [];
      return rows;
    },
    database: undefined,
    table: '',
    close: () => {},
  };
}

/** One database per worker, emptied between seeds: opening one and preparing statements costs more than a seed. */
let idle: { database: Database.Database; store: AnyStore; lastSeq: () => number } | undefined;

async function sqliteBackend(): Promise<Backend> {
  const table = 'idem_records';
  let reused = idle;
  idle = undefined;
  if (reused) {
    reused.database.exec(`DELETE FROM "${table}"; DELETE FROM sim_ledger`);
  } else {
    const database = new Database(':memory:');
    const store = sqliteStore({ database, table });
    await store.migrate();
    database.exec(`CREATE TABLE sim_ledger (
      "seq" INTEGER PRIMARY KEY AUTOINCREMENT,
      "record_id" TEXT NOT NULL, "pk" TEXT NOT NULL, "charge_id" TEXT NOT NULL, "amount" INTEGER NOT NULL
    )`);
    const max = database.prepare('SELECT coalesce(max("seq"), 0) AS "seq" FROM sim_ledger');
    reused = { database, store: store, lastSeq: () => (max.get() as { seq: number }).seq };
  }
  const { database, store } = reused;
  const insert = prepared(
    database,
    'INSERT INTO sim_ledger ("record_id", "pk", "charge_id", "amount") VALUES (@recordId, @pk, @chargeId, @amount)',
  );
  const since = prepared(database, 'SELECT * FROM sim_ledger WHERE "seq" > ? ORDER BY "seq"');
  let lastSeq = reused.lastSeq();
  const own = reused;
  return {
    name: 'sqlite',
    // One store instance on the one database: better-sqlite3 is synchronous, so separate instances per process
    // would add prepared-statement caches, not interleavings (every call is atomic at the scheduler anyway).
    storeFor: () => store,
    observe: (pk) => store.get(pk),
    // No unique constraint on purpose: only the fenced, transactional completion keeps this at one row.
    ledgerEffect: (row) => (tx) => {
      if (tx !== database) throw new Error('sim: the shared ledger expected the store database as its transaction');
      insert.run(row);
    },
    newLedgerRows: () => {
      const rows = since.all(lastSeq) as Array<{
        seq: number;
        record_id: string;
        pk: string;
        charge_id: string;
        amount: number;
      }>;
      const last = rows.at(-1);
      if (last) lastSeq = last.seq;
      return rows.map((r) => ({ recordId: r.record_id, pk: r.pk, chargeId: r.charge_id, amount: r.amount }));
    },
    database,
    table,
    close: () => {
      if (idle) own.database.close();
      else idle = own;
    },
  };
}

const statements = new WeakMap<Database.Database, Map<string, Database.Statement>>();

/**
 * A statement prepared once per database.
 *
 * @example
 * prepared(database, 'SELECT 1').get()
 */
export function prepared(database: Database.Database, sql: string): Database.Statement {
  let cache = statements.get(database);
  if (!cache) statements.set(database, (cache = new Map<string, Database.Statement>()));
  let statement = cache.get(sql);
  if (!statement) cache.set(sql, (statement = database.prepare(sql)));
  return statement;
}
