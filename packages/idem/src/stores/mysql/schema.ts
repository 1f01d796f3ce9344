/** The table: identifiers, column widths, the DDL (`mysqlSchemaSql`, `schema.sql`), and `migrate()`. */
import { configError } from '../../core/errors.js';
import { checkIdentifier as checkSqlIdentifier } from '../shared/identifier.js';
import type { Row } from './codec.js';
import type { MysqlQueryable, MysqlStoreOptions } from './mysql-options.js';

export const DEFAULT_TABLE = 'idempotency_records';
/** 40, not 64: the index names append up to 24 characters, and MySQL refuses names over 64. */
const MAX_IDENTIFIER = 40;
/** Column widths, in bytes: a longer value is refused before it is sent, never truncated by a lax `sql_mode`. */
export const LIMITS = {
  pk: 1024,
  scope: 1024,
  key: 1024,
  fingerprint: 255,
  id: 255,
  token: 255,
  resultId: 1024,
} as const;

/**
 * The DDL `migrate()` runs, for your own migration tool. Every text column is `VARBINARY`: keys compare byte for
 * byte, whatever the connection's character set or the server's collation (no case folding, no trailing-space
 * padding). Times are epoch milliseconds in `BIGINT` columns.
 *
 * @example
 * await writeFile('migrations/0001_idem.sql', mysqlSchemaSql({ table: 'idem_records' }))
 */
export function mysqlSchemaSql({ table = DEFAULT_TABLE }: Pick<MysqlStoreOptions, 'table'> = {}): string {
  checkIdentifier('table', table);
  return `CREATE TABLE IF NOT EXISTS ${quote(table)} (
  pk               VARBINARY(${LIMITS.pk})  NOT NULL,
  scope            VARBINARY(${LIMITS.scope})  NOT NULL,
  \`key\`            VARBINARY(${LIMITS.key})  NOT NULL,
  status           ENUM('in_progress', 'succeeded', 'failed') NOT NULL,
  fingerprint      VARBINARY(${LIMITS.fingerprint})   NOT NULL,
  id               VARBINARY(${LIMITS.id})   NOT NULL,
  token            VARBINARY(${LIMITS.token})   NOT NULL,
  claimed_at       BIGINT           NOT NULL,
  lease_expires_at BIGINT           NOT NULL,
  expires_at       BIGINT           NOT NULL,
  retryable        BOOLEAN          NOT NULL DEFAULT FALSE,
  result_id        VARBINARY(${LIMITS.resultId}),
  response_status  INT,
  response_headers LONGBLOB,
  response_body    LONGBLOB,
  PRIMARY KEY (pk),
  KEY ${quote(`${table}_expires_at_idx`)} (expires_at),
  KEY ${quote(`${table}_scope_claimed_at_idx`)} (scope, claimed_at)
) ENGINE = InnoDB;
`;
}

/**
 * Creates the table if missing, then checks `max_allowed_packet` against `maxResponseBytes` (see
 * `MysqlStore.migrate`).
 */
export async function migrate(
  send: (op: 'migrate', on: MysqlQueryable, sql: string) => Promise<unknown>,
  pool: MysqlQueryable,
  table: string,
  maxResponseBytes: number,
): Promise<void> {
  // CREATE TABLE IF NOT EXISTS is atomic under InnoDB's metadata lock: a second migrator finds the table made.
  await send('migrate', pool, mysqlSchemaSql({ table: table }).trim());
  const rows = (await send('migrate', pool, 'SELECT @@max_allowed_packet AS max_allowed_packet')) as Row[];
  const packet = Number(rows[0]?.max_allowed_packet);
  const needed = requiredPacket(maxResponseBytes);
  if (!(packet >= needed)) {
    throw configError(
      'maxResponseBytes',
      `at most (max_allowed_packet − 1 MiB) / 2 = ${Math.floor((packet - 1024 * 1024) / 2)} bytes on this server ` +
        `(max_allowed_packet is ${packet}; raise it to ${needed} or more, or lower maxResponseBytes)`,
      maxResponseBytes,
    );
  }
}

/** The packet a completion of `maxResponseBytes` needs: hex doubles bytes in the text protocol; 1 MiB for the rest. */
function requiredPacket(maxResponseBytes: number): number {
  return 2 * maxResponseBytes + 1024 * 1024;
}

export function checkLengths(values: Partial<Record<keyof typeof LIMITS, string>>): void {
  for (const [name, value] of Object.entries(values) as Array<[keyof typeof LIMITS, string]>) {
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > LIMITS[name]) {
      throw new Error(`mysql store: ${name} is ${bytes} bytes, longer than its column (${LIMITS[name]} bytes)`);
    }
  }
}

export function checkIdentifier(name: string, value: unknown): void {
  checkSqlIdentifier(name, value, MAX_IDENTIFIER);
}

export function quote(identifier: string): string {
  return `\`${identifier}\``;
}
