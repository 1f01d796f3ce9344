/** What the SQL stores share: the rule for a schema or table name they quote as given. */
import { configError } from '../../core/errors.js';

/**
 * Throws a configuration error naming the option `name` unless `value` is letters, digits and `_`, not starting
 * with a digit, of at most `max` characters (each store's `max` leaves room for the index names it derives).
 */
export function checkIdentifier(name: string, value: unknown, max: number): void {
  if (typeof value !== 'string' || !new RegExp(`^[A-Za-z_][A-Za-z0-9_]{0,${max - 1}}$`).test(value)) {
    throw configError(
      name,
      `an identifier of letters, digits and _ (not starting with a digit, at most ${max} characters)`,
      value,
    );
  }
}
