/** What `declare()` refuses before the handler returns, so the work's outcome is never lost to a late refusal. */
import { configError } from '../core/errors.js';
import type { IdempotencyStore } from '../core/record.js';
import type { Declaration } from './options.js';

/**
 * The declaration itself, or a `CONFIG_INVALID` error thrown at once when it declares `effects` on a store that
 * cannot run them (`acceptsEffects: false`): thrown in the handler, not after it, when `complete` would refuse them
 * with the work already done and the key left to be run again.
 */
export function admitDeclaration<Tx>(store: IdempotencyStore<never>, declaration: Declaration<Tx>): Declaration<Tx> {
  if (declaration.effects !== undefined && store.acceptsEffects === false) {
    throw configError(
      'effects',
      `absent with the ${store.name} store: it has no transaction to commit them with the record (key the work’s own write on the record id instead)`,
    );
  }
  return declaration;
}
