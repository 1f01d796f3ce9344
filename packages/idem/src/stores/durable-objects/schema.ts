/**
 * The object's table and the statements it runs on `ctx.storage.sql`: the SQLite store's columns (times in epoch
 * milliseconds, the body as a BLOB), one table per object, created by the object itself on start.
 */
import { sqliteRecordsDdl } from '../shared/sqlite-ddl.js';

/** The records table in each object's own SQLite database. */
export const TABLE = 'idem_records';

/** Run by every object as it starts (idempotent): the SQLite store's table, and its indexes (expiry, `list`). */
export const SCHEMA = sqliteRecordsDdl(TABLE);

/** The columns a record is read from, named as the record's fields where they map one to one. */
const COLUMNS = `"pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at" AS "claimedAt",
  "lease_expires_at" AS "leaseExpiresAt", "expires_at" AS "expiresAt", "retryable", "result_id" AS "resultId",
  "response_status", "response_headers", "response_body"`;

const t = `"${TABLE}"`;
const FENCED = `"pk" = ? AND "token" = ? AND "status" = 'in_progress'`;

/** Each statement's `?` in the order its caller binds them. */
export const SQL = {
  get: `SELECT ${COLUMNS} FROM ${t} WHERE "pk" = ?`,
  /** The claim's write: the whole record, over whatever the claim condition let it replace (claim in the object). */
  put: `INSERT OR REPLACE INTO ${t} ("pk", "scope", "key", "status", "fingerprint", "id", "token", "claimed_at",
      "lease_expires_at", "expires_at", "retryable", "result_id", "response_status", "response_headers", "response_body")
    VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?, ?, ?, 0, NULL, NULL, NULL, NULL)`,
  complete: `UPDATE ${t} SET "status" = ?, "retryable" = ?, "result_id" = ?, "response_status" = ?,
      "response_headers" = ?, "response_body" = ? WHERE ${FENCED} RETURNING "pk"`,
  // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max.
  renew: `UPDATE ${t} SET "lease_expires_at" = max("lease_expires_at", ?), "expires_at" = max("expires_at", ?)
    WHERE ${FENCED} RETURNING "pk"`,
  release: `DELETE FROM ${t} WHERE ${FENCED} RETURNING "pk"`,
  sweep: `DELETE FROM ${t} WHERE "pk" IN (SELECT "pk" FROM ${t} WHERE "expires_at" <= ? ORDER BY "expires_at" LIMIT ?)
    RETURNING "pk"`,
  list: `SELECT ${COLUMNS} FROM ${t} WHERE "scope" = ? ORDER BY "claimed_at" DESC, rowid DESC LIMIT ?`,
  earliest: `SELECT min("expires_at") AS "at" FROM ${t}`,
} as const;
