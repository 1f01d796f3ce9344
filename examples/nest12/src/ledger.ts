// #region ledger
// ledger.ts — your ledger: one row per charge, in the SQLite file the idempotency records use.
import { Injectable } from '@nestjs/common';
import Database from 'better-sqlite3';

@Injectable()
export class Ledger {
  readonly database: Database.Database = new Database(process.env.DATABASE_PATH ?? 'idem.db');

  constructor() {
    this.database.exec(
      'CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, account TEXT NOT NULL, amount INTEGER, currency TEXT)',
    );
  }

  /** Once per id: a takeover after a crash finds the charge instead of writing a second one. */
  record(charge: { id: string; account: string; amount: number; currency: string }): void {
    const insert = 'INSERT OR IGNORE INTO charges VALUES (@id, @account, @amount, @currency)';
    this.database.prepare(insert).run(charge);
  }

  count(account: string): number {
    const row = this.database.prepare('SELECT count(*) AS n FROM charges WHERE account = ?').get(account);
    return (row as { n: number }).n;
  }
}
// #endregion ledger
