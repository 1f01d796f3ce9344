/**
 * Writes each SQL store's `schema.sql` into the build, for users who run migrations with their own tool
 * (`idem/stores/<store>/schema.sql`): a comment header and the DDL the store's `migrate()` runs for the default
 * names, printed by the built package's own function, so the file and the code cannot drift apart.
 */
import { writeFileSync } from 'node:fs';

const files = {
  postgres: {
    ddl: (m) => m.postgresSchemaSql(),
    header: `-- Idem: PostgreSQL store schema for the default names (schema "public", table "idempotency_records").
-- The same DDL \`postgresStore({ pool }).migrate()\` runs; \`postgresSchemaSql({ schema, table })\` prints it for
-- other names (and adds CREATE SCHEMA IF NOT EXISTS for a schema other than public). Idempotent.
-- Times are epoch milliseconds in bigint columns. Run: psql "$DATABASE_URL" -f schema.sql
-- expires_at index: the batched sweep. (scope, claimed_at DESC) index: list, newest claim first.`,
  },
  mysql: {
    ddl: (m) => m.mysqlSchemaSql(),
    header: `-- Idem: MySQL / MariaDB store schema for the default table name, \`idempotency_records\`, in the connection's
-- database. The same DDL \`mysqlStore({ pool }).migrate()\` runs; \`mysqlSchemaSql({ table })\` prints it for another
-- name. Idempotent. Run: mysql -h host -u user -p database < schema.sql
-- Text columns are VARBINARY: keys compare byte for byte, whatever the character set or collation. Times are
-- epoch milliseconds in BIGINT columns. expires_at index: the batched sweep. (scope, claimed_at) index: list.
-- migrate() also checks that max_allowed_packet holds a response of maxResponseBytes (docs/STORES.md).`,
  },
  sqlite: {
    ddl: (m) => m.sqliteSchema(),
    header: `-- Idem's SQLite schema for the default table name, \`idem_records\`. \`sqliteStore(...).migrate()\` runs the same
-- DDL (for any \`table\` name) and is idempotent; apply this file instead if you manage migrations yourself.
-- Times are INTEGER epoch milliseconds; \`retryable\` is 0/1; the response body is the exact bytes, as a BLOB.
-- expires_at index: the sweep, which deletes by expiry. (scope, claimed_at) index: list, one scope, newest first.`,
  },
};

for (const [store, { ddl, header }] of Object.entries(files)) {
  const dist = new URL(`../dist/stores/${store}/`, import.meta.url);
  const sql = ddl(await import(new URL('index.js', dist).href));
  writeFileSync(new URL('schema.sql', dist), `${header}\n\n${sql}`);
}
