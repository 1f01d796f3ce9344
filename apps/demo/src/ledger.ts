/**
 * @module The demo's ledger: a real `charges` table in SQLite. One row per charge, and a unique
 * `idempotency_ref` (the record's stable id) so a takeover after a crash can never write a second charge.
 */
import { randomBytes } from 'node:crypto';
import type Database from 'better-sqlite3';

export type ChargeStatus = 'succeeded' | 'failed';

/** A Stripe-like charge object, serialised in this key order. */
export interface Charge {
  readonly id: string;
  readonly object: 'charge';
  readonly amount: number;
  readonly currency: string;
  readonly status: ChargeStatus;
  readonly created: number;
  readonly failure_code: string | null;
}

export interface NewCharge {
  readonly account: string;
  readonly amount: number;
  readonly currency: string;
  readonly source: string;
  readonly status: ChargeStatus;
  readonly failureCode: string | null;
  /** The idempotency record's stable id, or null for a keyless request. */
  readonly ref: string | null;
}

/** A charges row as either database returns it (PostgreSQL's BIGINT `created` comes back as text). */
export interface Row {
  id: string;
  amount: number;
  currency: string;
  status: ChargeStatus;
  created: string | number;
  failure_code: string | null;
}

/** The columns a charge is written to, in the order of {@link chargeValues}. */
export const INSERT_COLUMNS = '(id, account, amount, currency, status, failure_code, source, created, idempotency_ref)';

/** A charge's values for {@link INSERT_COLUMNS}. */
export const chargeValues = (charge: Charge, input: NewCharge): unknown[] => [
  charge.id,
  input.account,
  charge.amount,
  charge.currency,
  charge.status,
  charge.failure_code,
  input.source,
  charge.created,
  input.ref,
];

const SCHEMA = `
CREATE TABLE IF NOT EXISTS charges (
  id TEXT PRIMARY KEY,
  account TEXT NOT NULL,
  amount INTEGER NOT NULL CHECK (amount > 0),
  currency TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code TEXT,
  source TEXT NOT NULL,
  created INTEGER NOT NULL,
  idempotency_ref TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS charges_account_created ON charges (account, created);
CREATE TABLE IF NOT EXISTS lab_requests (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  account TEXT NOT NULL,
  entry TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS lab_requests_account ON lab_requests (account, seq);
`;

export const toCharge = (row: Row): Charge => ({
  id: row.id,
  object: 'charge',
  amount: Number(row.amount),
  currency: row.currency,
  status: row.status,
  created: Number(row.created),
  failure_code: row.failure_code,
});

/**
 * Where charges are written. Implementations: {@link SqliteLedger} here; a Postgres one when the store is
 * Postgres. Methods may be synchronous where the database is embedded.
 */
export interface Ledger {
  /** Writes the charge inside a store transaction's handle (`effects`): the charge commits with the record. */
  insertIn(tx: unknown, charge: Charge, input: NewCharge): unknown;
  /** Writes the charge on the ledger's own connection (keyless requests). */
  insert(charge: Charge, input: NewCharge): Promise<void>;
  /**
   * Writes the charge unless one with the same `ref` exists, and returns whichever is stored: a takeover after
   * a crash finds the dead attempt's charge and answers with it instead of charging again.
   */
  insertOnce(charge: Charge, input: NewCharge & { readonly ref: string }): Promise<Charge>;
  list(account: string, limit: number): Promise<Charge[]>;
  get(account: string, id: string): Promise<Charge | undefined>;
  /** The account's charge written under `ref` (a record's id, or a keyless lab request's own ref), if any. */
  byRef(account: string, ref: string): Promise<Charge | undefined>;
  /**
   * The account's first charge made for record `id`: under `id` itself (a processor keyed on it), or under
   * `<id>/<attempt>` (a processor without keys, which keeps the id as a reference but charges every attempt).
   */
  byRecord(account: string, id: string): Promise<Charge | undefined>;
  balance(account: string): Promise<{ charged: number; count: number }>;
  /** Deletes an account's charges and its lab history (the lab's Reset). Returns how many charges. */
  clear(account: string): Promise<number>;
  /**
   * Lab only: stores one request's history entry (JSON text) for the account: over row `seq`, or as a new row when
   * `seq` is null — unless the account already holds `limit` rows (checked and written atomically, so concurrent
   * requests never pass it). Returns the row's seq, or null when the account's history is full.
   * The lab page rebuilds its past from these (GET /v1/lab/history).
   */
  journal(account: string, seq: number | null, entry: string, limit: number): Promise<number | null>;
  /** Lab only: the account's first `limit` history entries, oldest first. */
  history(account: string, limit: number): Promise<Array<{ seq: number; entry: string }>>;
  /** Lab only: every account's entries still marked running (read at start-up: a stopped process left them). */
  unfinished(): Promise<Array<{ seq: number; account: string; entry: string }>>;
}

/** A new charge object, not yet written. */
export function draftCharge(input: NewCharge): Charge {
  return {
    id: `ch_${randomBytes(12).toString('hex')}`,
    object: 'charge',
    amount: input.amount,
    currency: input.currency,
    status: input.status,
    created: Math.floor(Date.now() / 1000),
    failure_code: input.failureCode,
  };
}

/**
 * The charges table on a better-sqlite3 database (the records' own database when the store is SQLite).
 *
 * @example
 * const ledger = new SqliteLedger(db)
 * await ledger.insert(draftCharge(input), input)
 */
export class SqliteLedger implements Ledger {
  readonly #db: Database.Database;

  constructor(db: Database.Database) {
    this.#db = db;
    db.exec(SCHEMA);
  }

  insertIn(tx: unknown, charge: Charge, input: NewCharge): void {
    this.#write(tx as Database.Database, charge, input);
  }

  async insert(charge: Charge, input: NewCharge): Promise<void> {
    this.#write(this.#db, charge, input);
  }

  #write(db: Pick<Database.Database, 'prepare'>, charge: Charge, input: NewCharge): void {
    db.prepare(`INSERT INTO charges ${INSERT_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
      ...chargeValues(charge, input),
    );
  }

  async insertOnce(charge: Charge, input: NewCharge & { readonly ref: string }): Promise<Charge> {
    return this.#db
      .transaction(() => {
        const existing = this.#db.prepare('SELECT * FROM charges WHERE idempotency_ref = ?').get(input.ref) as
          Row | undefined;
        if (existing) return toCharge(existing);
        this.#write(this.#db, charge, input);
        return charge;
      })
      .immediate();
  }

  async list(account: string, limit: number): Promise<Charge[]> {
    const rows = this.#db
      .prepare('SELECT * FROM charges WHERE account = ? ORDER BY created DESC, rowid DESC LIMIT ?')
      .all(account, limit) as Row[];
    return rows.map(toCharge);
  }

  async get(account: string, id: string): Promise<Charge | undefined> {
    const row = this.#db.prepare('SELECT * FROM charges WHERE account = ? AND id = ?').get(account, id) as
      Row | undefined;
    return row && toCharge(row);
  }

  async byRef(account: string, ref: string): Promise<Charge | undefined> {
    const row = this.#db
      .prepare('SELECT * FROM charges WHERE account = ? AND idempotency_ref = ?')
      .get(account, ref) as Row | undefined;
    return row && toCharge(row);
  }

  async byRecord(account: string, id: string): Promise<Charge | undefined> {
    const row = this.#db
      .prepare(
        `SELECT * FROM charges WHERE account = ? AND (idempotency_ref = ? OR substr(idempotency_ref, 1, ?) = ?)
         ORDER BY rowid LIMIT 1`,
      )
      .get(account, id, id.length + 1, `${id}/`) as Row | undefined;
    return row && toCharge(row);
  }

  async balance(account: string): Promise<{ charged: number; count: number }> {
    const row = this.#db
      .prepare(
        `SELECT COALESCE(SUM(amount), 0) AS charged, COUNT(*) AS count FROM charges WHERE account = ? AND status = 'succeeded'`,
      )
      .get(account) as { charged: number; count: number };
    return { charged: row.charged, count: row.count };
  }

  async clear(account: string): Promise<number> {
    this.#db.prepare('DELETE FROM lab_requests WHERE account = ?').run(account);
    return this.#db.prepare('DELETE FROM charges WHERE account = ?').run(account).changes;
  }

  async journal(account: string, seq: number | null, entry: string, limit: number): Promise<number | null> {
    if (seq !== null) {
      this.#db.prepare('UPDATE lab_requests SET entry = ? WHERE seq = ? AND account = ?').run(entry, seq, account);
      return seq;
    }
    // One statement, and SQLite runs one writer at a time: the count and the insert cannot interleave.
    const inserted = this.#db
      .prepare(
        `INSERT INTO lab_requests (account, entry)
         SELECT ?, ? WHERE (SELECT COUNT(*) FROM lab_requests WHERE account = ?) < ?`,
      )
      .run(account, entry, account, limit);
    return inserted.changes === 1 ? Number(inserted.lastInsertRowid) : null;
  }

  async unfinished(): Promise<Array<{ seq: number; account: string; entry: string }>> {
    return this.#db
      .prepare(`SELECT seq, account, entry FROM lab_requests WHERE entry LIKE '%"state":"running"%' ORDER BY seq`)
      .all() as Array<{ seq: number; account: string; entry: string }>;
  }

  async history(account: string, limit: number): Promise<Array<{ seq: number; entry: string }>> {
    return this.#db
      .prepare('SELECT seq, entry FROM lab_requests WHERE account = ? ORDER BY seq LIMIT ?')
      .all(account, limit) as Array<{ seq: number; entry: string }>;
  }
}
