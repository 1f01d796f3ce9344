/**
 * The shared store and the ledger the broker consumers write to, on PostgreSQL (`postgres://…?schema=NAME`) or an
 * SQLite file (`sqlite:/path/to/file.db`). The same spec opens it in the test and in every consumer process.
 *
 * Two tables beside the idempotency records:
 * - `ledger`: the work's effect, one row per posted payment, keyed by the record id (PRIMARY KEY). The record id
 *   survives a takeover, so a takeover that runs the work again finds the first row instead of posting twice.
 *   `payment_id` is deliberately NOT unique: the test counts rows per payment, and only the idempotency layer
 *   (one record, one id per key) keeps that count at one.
 * - `runs`: every time the work function started, for the test to tell "replayed" from "ran again".
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import type { IdempotencyStore } from 'idem';
import { postgresStore } from 'idem/stores/postgres';
import { sqliteStore } from 'idem/stores/sqlite';

/** Amounts over this are declined for good by the consumers' work (the tests' way to make work fail finally). */
export const LIMIT = 1_000_000;

export interface Payment {
  readonly paymentId: string;
  readonly amount: number;
  readonly currency: string;
}

/** A posted payment, as the work returns it (and every repeat gets back). */
export interface LedgerEntry {
  /** The idempotency record's id: the same for the first attempt and any takeover. */
  readonly entryId: string;
  readonly paymentId: string;
  readonly amount: number;
  /** The consumer process that wrote the row. */
  readonly postedBy: string;
}

export interface Run {
  readonly paymentId: string;
  readonly recordId: string;
  readonly consumer: string;
  readonly reclaimed: boolean;
}

export interface Ledger {
  readonly store: IdempotencyStore<unknown>;
  /** Posts the payment under `recordId` once: a second call with the same id returns the first row. */
  post(recordId: string, payment: Payment, consumer: string): Promise<LedgerEntry>;
  /** Notes that the work started. */
  noteRun(run: Run): Promise<void>;
  /** Rows for one payment, oldest first. */
  entries(paymentId: string): Promise<LedgerEntry[]>;
  runs(paymentId: string): Promise<Run[]>;
  /** Ledger rows per payment id, for the final count. */
  entryCounts(): Promise<Record<string, number>>;
  close(): Promise<void>;
}

const TABLES = (prefix: string, serial: string) => [
  `CREATE TABLE IF NOT EXISTS ${prefix}ledger (record_id text PRIMARY KEY, payment_id text NOT NULL, amount integer NOT NULL, posted_by text NOT NULL)`,
  `CREATE TABLE IF NOT EXISTS ${prefix}runs (n ${serial}, payment_id text NOT NULL, record_id text NOT NULL, consumer text NOT NULL, reclaimed integer NOT NULL)`,
];

interface Row {
  readonly record_id: string;
  readonly payment_id: string;
  readonly amount: number;
  readonly posted_by: string;
}
interface RunRow {
  readonly payment_id: string;
  readonly record_id: string;
  readonly consumer: string;
  readonly reclaimed: number;
}
const entry = (row: Row): LedgerEntry => ({
  entryId: row.record_id,
  paymentId: row.payment_id,
  amount: row.amount,
  postedBy: row.posted_by,
});
const run = (row: RunRow): Run => ({
  paymentId: row.payment_id,
  recordId: row.record_id,
  consumer: row.consumer,
  reclaimed: row.reclaimed === 1,
});

/**
 * Opens the store and the ledger named by `spec`; with `create`, migrates the store and creates the tables first
 * (the test does this once, before any consumer starts).
 */
export async function openLedger(spec: string, { create = false } = {}): Promise<Ledger> {
  return spec.startsWith('sqlite:') ? openSqlite(spec.slice('sqlite:'.length), create) : openPostgres(spec, create);
}

async function openSqlite(file: string, create: boolean): Promise<Ledger> {
  const database = new Database(file);
  const store = sqliteStore({ database });
  if (create) {
    await store.migrate();
    for (const statement of TABLES('', 'INTEGER PRIMARY KEY AUTOINCREMENT')) database.exec(statement);
  }
  const insert = database.prepare(
    'INSERT INTO ledger (record_id, payment_id, amount, posted_by) VALUES (?, ?, ?, ?) ON CONFLICT (record_id) DO NOTHING',
  );
  const byRecord = database.prepare('SELECT * FROM ledger WHERE record_id = ?');
  const byPayment = database.prepare('SELECT * FROM ledger WHERE payment_id = ? ORDER BY rowid');
  const insertRun = database.prepare(
    'INSERT INTO runs (payment_id, record_id, consumer, reclaimed) VALUES (?, ?, ?, ?)',
  );
  const runsOf = database.prepare('SELECT * FROM runs WHERE payment_id = ? ORDER BY n');
  const counts = database.prepare('SELECT payment_id, count(*) AS n FROM ledger GROUP BY payment_id');
  return {
    store,
    post: async (recordId, payment, consumer) => {
      insert.run(recordId, payment.paymentId, payment.amount, consumer);
      return entry(byRecord.get(recordId) as Row);
    },
    noteRun: async (r) => void insertRun.run(r.paymentId, r.recordId, r.consumer, r.reclaimed ? 1 : 0),
    entries: async (paymentId) => (byPayment.all(paymentId) as Row[]).map(entry),
    runs: async (paymentId) => (runsOf.all(paymentId) as RunRow[]).map(run),
    entryCounts: async () =>
      Object.fromEntries((counts.all() as Array<{ payment_id: string; n: number }>).map((r) => [r.payment_id, r.n])),
    close: async () => {
      await store.close();
      database.close();
    },
  };
}

async function openPostgres(spec: string, create: boolean): Promise<Ledger> {
  const url = new URL(spec);
  const schema = url.searchParams.get('schema');
  if (!schema || !/^[a-z_][a-z0-9_]*$/.test(schema))
    throw new Error(`ledger: ${spec} needs ?schema=<plain identifier>`);
  url.searchParams.delete('schema');
  const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  const store = postgresStore({ pool, schema });
  const s = `"${schema}".`;
  if (create) {
    await store.migrate();
    for (const statement of TABLES(s, 'bigserial PRIMARY KEY')) await pool.query(statement);
  }
  const rows = async <R>(text: string, values: unknown[]): Promise<R[]> => (await pool.query(text, values)).rows as R[];
  return {
    store,
    post: async (recordId, payment, consumer) => {
      await pool.query(
        `INSERT INTO ${s}ledger (record_id, payment_id, amount, posted_by) VALUES ($1, $2, $3, $4) ON CONFLICT (record_id) DO NOTHING`,
        [recordId, payment.paymentId, payment.amount, consumer],
      );
      const [row] = await rows<Row>(`SELECT * FROM ${s}ledger WHERE record_id = $1`, [recordId]);
      return entry(row!);
    },
    noteRun: async (r) => {
      await pool.query(`INSERT INTO ${s}runs (payment_id, record_id, consumer, reclaimed) VALUES ($1, $2, $3, $4)`, [
        r.paymentId,
        r.recordId,
        r.consumer,
        r.reclaimed ? 1 : 0,
      ]);
    },
    entries: async (paymentId) =>
      (await rows<Row>(`SELECT * FROM ${s}ledger WHERE payment_id = $1 ORDER BY record_id`, [paymentId])).map(entry),
    runs: async (paymentId) =>
      (await rows<RunRow>(`SELECT * FROM ${s}runs WHERE payment_id = $1 ORDER BY n`, [paymentId])).map(run),
    entryCounts: async () =>
      Object.fromEntries(
        (
          await rows<{ payment_id: string; n: string }>(
            `SELECT payment_id, count(*) AS n FROM ${s}ledger GROUP BY payment_id`,
            [],
          )
        ).map((r) => [r.payment_id, Number(r.n)]),
      ),
    close: async () => {
      await pool.end();
    },
  };
}
