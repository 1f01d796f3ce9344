-- Idem: PostgreSQL store schema for the default names (schema "public", table "idempotency_records").
-- The same DDL `postgresStore({ pool }).migrate()` runs; `postgresSchemaSql({ schema, table })` prints it for
-- other names (and adds CREATE SCHEMA IF NOT EXISTS for a schema other than public). Idempotent.
-- Times are epoch milliseconds in bigint columns. Run: psql "$DATABASE_URL" -f schema.sql
-- expires_at index: the batched sweep. (scope, claimed_at DESC) index: list, newest claim first.

CREATE TABLE IF NOT EXISTS "public"."idempotency_records" (
  pk               text    PRIMARY KEY,
  scope            text    NOT NULL,
  key              text    NOT NULL,
  status           text    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')),
  fingerprint      text    NOT NULL,
  id               text    NOT NULL,
  token            text    NOT NULL,
  claimed_at       bigint  NOT NULL,
  lease_expires_at bigint  NOT NULL,
  expires_at       bigint  NOT NULL,
  retryable        boolean NOT NULL DEFAULT false,
  result_id        text,
  response_status  integer,
  response_headers jsonb,
  response_body    bytea
);

CREATE INDEX IF NOT EXISTS "idempotency_records_expires_at_idx" ON "public"."idempotency_records" (expires_at);

CREATE INDEX IF NOT EXISTS "idempotency_records_scope_claimed_at_idx" ON "public"."idempotency_records" (scope, claimed_at DESC);
