/** The table: identifiers, the DDL (`postgresSchemaSql`, `schema.sql`), and `migrate()`. */
import { checkIdentifier as checkSqlIdentifier } from '../shared/identifier.js';
import type { PostgresPoolClient, PostgresStoreOptions } from './postgres-options.js';
import type { Query } from './statements.js';

export const DEFAULT_SCHEMA = 'public';
export const DEFAULT_TABLE = 'idempotency_records';
/** 48, not 63: the index names append up to 15 characters, and Postgres would truncate them into one name. */
const MAX_IDENTIFIER = 48;

/** The DDL for a schema and table, in the order `migrate()` runs it. */
function ddl(schema: string, table: string): { createSchema: string; rest: string[] } {
  const t = `${quote(schema)}.${quote(table)}`;
  return {
    createSchema: `CREATE SCHEMA IF NOT EXISTS ${quote(schema)};`,
    rest: [
      `CREATE TABLE IF NOT EXISTS ${t} (
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
);`,
      `CREATE INDEX IF NOT EXISTS ${quote(`${table}_expires_at_idx`)} ON ${t} (expires_at);`,
      `CREATE INDEX IF NOT EXISTS ${quote(`${table}_scope_claimed_at_idx`)} ON ${t} (scope, claimed_at DESC);`,
    ],
  };
}

/**
 * The DDL `migrate()` runs, as one SQL script for your own migration tool. Times are epoch milliseconds in
 * `bigint` columns. `CREATE SCHEMA` is left out for `public`, which every database has.
 *
 * @example
 * await writeFile('migrations/0001_idem.sql', postgresSchemaSql({ schema: 'payments' }))
 */
export function postgresSchemaSql({
  schema = DEFAULT_SCHEMA,
  table = DEFAULT_TABLE,
}: Pick<PostgresStoreOptions, 'schema' | 'table'> = {}): string {
  checkIdentifier('schema', schema);
  checkIdentifier('table', table);
  const { createSchema, rest } = ddl(schema, table);
  return [...(schema === DEFAULT_SCHEMA ? [] : [createSchema]), ...rest].join('\n\n') + '\n';
}

/**
 * Creates the schema, table and indexes if missing, in one transaction under an advisory lock (see
 * `PostgresStore.migrate`). `transaction` runs its body between BEGIN and COMMIT on one connection.
 */
export async function migrate(
  query: Query,
  transaction: (op: 'migrate', body: (client: PostgresPoolClient) => Promise<boolean>) => Promise<boolean>,
  schema: string,
  table: string,
): Promise<void> {
  const { createSchema, rest } = ddl(schema, table);
  await transaction('migrate', async (client) => {
    // Concurrent CREATE ... IF NOT EXISTS of the same object can still fail on a catalog unique index; the
    // lock makes a second migrator wait for the first to commit, then find everything in place.
    const lock = `idem:migrate:${schema}.${table}`;
    await query('migrate', client, 'SELECT pg_advisory_xact_lock(hashtext($1))', [lock]);
    // Checked first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the database even when the
    // schema exists, and many application roles lack it.
    const found = await query('migrate', client, 'SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (found.rows.length === 0) await query('migrate', client, createSchema);
    for (const statement of rest) await query('migrate', client, statement);
    return true;
  });
}

export function checkIdentifier(name: string, value: unknown): void {
  checkSqlIdentifier(name, value, MAX_IDENTIFIER);
}

export function quote(identifier: string): string {
  return `"${identifier}"`;
}
