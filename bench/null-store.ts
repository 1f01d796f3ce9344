/**
 * @module The bench's null store: Idem's own cost, with no store client's (bench/instructions-run.ts,
 * bench/allocation.ts).
 */
import { claimedRecord, type IdempotencyRecord, type IdempotencyStore } from '../packages/idem/src/core/record.js';

/**
 * A store that does no work of its own: it keeps the one record last written in a variable, with no copies, no
 * limits and no clock checks, so what remains of a request's cost is Idem's (and the Web objects').
 *
 * @example
 * const guard = idempotency({ store: nullStore(), scope: 'single-tenant' })
 */
export function nullStore(): IdempotencyStore {
  let kept: IdempotencyRecord | undefined;
  return {
    name: 'null',
    roundTrips: 0,
    claim: async (request) => {
      if (kept?.pk === request.pk) return { kind: 'existing', record: kept };
      kept = claimedRecord(null, request);
      return { kind: 'claimed', record: kept };
    },
    complete: async ({ outcome }) => {
      if (kept) kept = { ...kept, ...outcome };
      return { ok: true };
    },
    renew: async () => ({ ok: true }),
    release: async () => ({ ok: true }),
    get: async () => kept ?? null,
    sweep: async () => 0,
    list: async () => [],
    close: async () => {},
  };
}
