/**
 * The test bank's books on PostgreSQL (`postgres://…?schema=NAME`), in the schema that also holds the idempotency
 * records. The same spec opens it in the test and in every consumer process (`bank.ts`).
 *
 * Two tables:
 * - `ledger`: the payout's effect, one row per payout made, keyed by the idempotency key the bank was given (the
 *   record id, PRIMARY KEY). The record id survives a takeover, so a takeover that runs the work again finds the
 *   first row instead of paying twice. `payout_id` is deliberately NOT unique: the test counts rows per payout,
 *   and only the idempotency layer (one record, one id per key) keeps that count at one.
 * - `runs`: every time the work called the bank, for the test to tell "replayed" from "ran again".
 */
import pg from 'pg';
import type { Payout } from './payouts.js';

/** Amounts over this are refused for good by the test bank (the tests' way to make work fail finally). */
export const LIMIT = 1_000_000;

/** A payout made, as the bank's books hold it. */
export interface LedgerEntry {
  /** The idempotency record's id: the same for the first attempt and any takeover. */
  readonly entryId: string;
  readonly payoutId: string;
  readonly amount: number;
  /** The consumer process that wrote the row. */
  readonly postedBy: string;
}

export interface Run {
  readonly payoutId: string;
  readonly recordId: string;
  readonly consumer: string;
  /** An earlier run had the same record id: a takeover, or a retry after a retryable error. */
  readonly rerun: boolean;
}

export interface Ledger {
  /** Makes the payout under `recordId` once: a second call with the same id returns the first row. */
  post(recordId: string, payout: Payout, consumer: string): Promise<LedgerEntry>;
  /** Notes that the work called the bank; says whether an earlier run had the same record id. */
  noteRun(run: Omit<Run, 'rerun'>): Promise<Run>;
  /** Rows for one payout. */
  entries(payoutId: string): Promise<LedgerEntry[]>;
  /** Runs for one payout, oldest first. */
  runs(payoutId: string): Promise<Run[]>;
  /** Ledger rows per payout id, for the final count. */
  entryCounts(): Promise<Record<string, number>>;
  close(): Promise<void>;
}

interface Row {
  readonly record_id: string;
  readonly payout_id: string;
  readonly amount: number;
  readonly posted_by: string;
}
interface RunRow {
  readonly payout_id: string;
  readonly record_id: string;
  readonly consumer: string;
  readonly rerun: boolean;
}
const entry = (row: Row): LedgerEntry => ({
  entryId: row.record_id,
  payoutId: row.payout_id,
  amount: row.amount,
  postedBy: row.posted_by,
});
const run = (row: RunRow): Run => ({
  payoutId: row.payout_id,
  recordId: row.record_id,
  consumer: row.consumer,
  rerun: row.rerun,
});

/** Opens the books named by `spec`; with `create`, makes the schema and the tables first (the test does, once). */
export async function openLedger(spec: string, { create = false } = {}): Promise<Ledger> {
  const url = new URL(spec);
  const schema = url.searchParams.get('schema');
  if (!schema || !/^[a-z_][a-z0-9_]*$/.test(schema))
    throw new Error(`ledger: ${spec} needs ?schema=<plain identifier>`);
  url.searchParams.delete('schema');
  const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  const s = `"${schema}".`;
  if (create) {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await pool.query(
      `CREATE TABLE ${s}ledger (record_id text PRIMARY KEY, payout_id text NOT NULL, amount integer NOT NULL, posted_by text NOT NULL)`,
    );
    await pool.query(
      `CREATE TABLE ${s}runs (n bigserial PRIMARY KEY, payout_id text NOT NULL, record_id text NOT NULL, consumer text NOT NULL, rerun boolean NOT NULL)`,
    );
  }
  const rows = async <R>(text: string, values: unknown[]): Promise<R[]> => (await pool.query(text, values)).rows as R[];
  return {
    post: async (recordId, payout, consumer) => {
      await pool.query(
        `INSERT INTO ${s}ledger (record_id, payout_id, amount, posted_by) VALUES ($1, $2, $3, $4) ON CONFLICT (record_id) DO NOTHING`,
        [recordId, payout.payoutId, payout.amount, consumer],
      );
      const [row] = await rows<Row>(`SELECT * FROM ${s}ledger WHERE record_id = $1`, [recordId]);
      return entry(row!);
    },
    noteRun: async (r) => {
      const [row] = await rows<RunRow>(
        `INSERT INTO ${s}runs (payout_id, record_id, consumer, rerun)
         VALUES ($1, $2, $3, EXISTS (SELECT 1 FROM ${s}runs WHERE record_id = $2)) RETURNING *`,
        [r.payoutId, r.recordId, r.consumer],
      );
      return run(row!);
    },
    entries: async (payoutId) =>
      (await rows<Row>(`SELECT * FROM ${s}ledger WHERE payout_id = $1 ORDER BY record_id`, [payoutId])).map(entry),
    runs: async (payoutId) =>
      (await rows<RunRow>(`SELECT * FROM ${s}runs WHERE payout_id = $1 ORDER BY n`, [payoutId])).map(run),
    entryCounts: async () =>
      Object.fromEntries(
        (
          await rows<{ payout_id: string; n: string }>(
            `SELECT payout_id, count(*) AS n FROM ${s}ledger GROUP BY payout_id`,
            [],
          )
        ).map((r) => [r.payout_id, Number(r.n)]),
      ),
    close: async () => {
      await pool.end();
    },
  };
}
