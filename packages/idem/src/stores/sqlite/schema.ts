/** The table: its name's rule and the DDL (`sqliteSchema`, `schema.sql`, `migrate()`). */
import { configError } from '../../core/errors.js';

export const DEFAULT_TABLE = 'idem_records';

/**
 * The DDL `migrate()` runs: the records table plus an index on `expires_at` (the sweep) and one on
 * `(scope, claimed_at)` (`list`). `schema.sql`, beside this file, is the same DDL for the default table name.
 *
 * @example
 * database.exec(sqliteSchema('idem_records'))
 */
export function sqliteSchema(table = DEFAULT_TABLE): string {
  checkTable(table);
  const t = `"${table}"`;
  return `CREATE TABLE IF NOT EXISTS ${t} (
  "pk" TEXT NOT NULL PRIMARY KEY,
  "scope" TEXT NOT NULL,
  "key" TEXT NOT NULL,
  "status" TEXT NOT NULL CHECK ("status" IN ('in_progress', 'succeeded', 'failed')),
  "fingerprint" TEXT NOT NULL,
  "id" TEXT NOT NULL,
  "token" TEXT NOT NULL,
  "claimed_at" INTEGER NOT NULL,
  "lease_expires_at" INTEGER NOT NULL,
  "expires_at" INTEGER NOT NULL,
  "retryable" INTEGER NOT NULL CHECK ("retryable" IN (0, 1)),
  "result_id" TEXT,
  "response_status" INTEGER,
  "response_headers" TEXT,
  "response_body" BLOB
);
CREATE INDEX IF NOT EXISTS "${table}_expires_at" ON ${t} ("expires_at");
CREATE INDEX IF NOT EXISTS "${table}_scope_claimed_at" ON ${t} ("scope", "claimed_at");
`;
}

export function checkTable(table: unknown): asserts table is string {
  if (typeof table !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table) || /^sqlite_/i.test(table)) {
    throw configError(
      'table',
      'an SQL identifier (letters, digits and _, not starting with a digit or sqlite_)',
      table,
    );
  }
}
