/**
 * The records table as SQLite holds it, shared by the stores on SQLite: the SQLite store's own file and each
 * Durable Object's database. Times are INTEGER epoch milliseconds, `retryable` 0/1, the body the exact bytes.
 */

/** The table `table` (unquoted, already checked) and its indexes: `expires_at` (expiry) and `(scope, claimed_at)` (`list`). */
export function sqliteRecordsDdl(table: string): string {
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
