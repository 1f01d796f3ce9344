/** The table: its name's rule and the DDL (`sqliteSchema`, `schema.sql`, `migrate()`). */
import { configError } from '../../core/errors.js';
import { sqliteRecordsDdl } from '../shared/sqlite-ddl.js';

export const DEFAULT_TABLE = 'idem_records';

/**
 * The DDL `migrate()` runs: the records table plus an index on `expires_at` (the sweep) and one on
 * `(scope, claimed_at)` (`list`). The build prints it for the default name into `idem/stores/sqlite/schema.sql`.
 *
 * @example
 * database.exec(sqliteSchema('idem_records'))
 */
export function sqliteSchema(table = DEFAULT_TABLE): string {
  checkTable(table);
  return sqliteRecordsDdl(table);
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
