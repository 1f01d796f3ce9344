-- Idem's SQLite schema for the default table name, `idem_records`. `sqliteStore(...).migrate()` runs the same
-- DDL (for any `table` name) and is idempotent; apply this file instead if you manage migrations yourself.
-- Times are INTEGER epoch milliseconds; `retryable` is 0/1; the response body is the exact bytes, as a BLOB.
CREATE TABLE IF NOT EXISTS "idem_records" (
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
-- The sweep deletes by expiry.
CREATE INDEX IF NOT EXISTS "idem_records_expires_at" ON "idem_records" ("expires_at");
-- `list` reads one scope, newest claim first.
CREATE INDEX IF NOT EXISTS "idem_records_scope_claimed_at" ON "idem_records" ("scope", "claimed_at");
