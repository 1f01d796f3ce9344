/**
 * The payout work under `idempotent()` that both broker consumers share. The region below is docs/CONSUMERS.md's
 * `payouts.ts`, byte for byte (`docs.test.ts` checks it). In the tests `./bank.js` is the test bank, and the
 * environment gives each run its own schema (IDEM_SCHEMA), a store reached through a fault proxy (DATABASE_URL)
 * and a shorter lease (IDEM_LEASE_MS).
 */
// #region payouts
import pg from 'pg';
import { idempotent, type IdempotentContext } from 'idem';
import { postgresStore } from 'idem/stores/postgres';
import { bank } from './bank.js'; // your payment processor's client: idempotent on `idempotencyKey`
import { verdict, type Verdict } from './verdict.js';

export interface Payout {
  readonly payoutId: string;
  readonly merchantId: string;
  readonly amount: number;
  readonly currency: string;
}

/** The bank refused the payout for good: recorded once, and every copy of the message is dead-lettered. */
export class Declined extends Error {
  override readonly name = 'Declined';
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
// A pool emits 'error' when an idle connection drops (a database restart, a failover): without a listener that
// crashes the consumer in the middle of a store outage. The next query opens a new connection.
pool.on('error', (error) => console.error(`PostgreSQL: ${error.message}`));
const store = postgresStore({ pool, schema: process.env.IDEM_SCHEMA ?? 'public' });
await store.migrate();

async function payoutWork(payout: Payout, { id }: IdempotentContext): Promise<{ transferId: string }> {
  // `id` is the same after a takeover: the bank sees one payout even if this ran twice.
  const transfer = await bank.transfer({ ...payout, idempotencyKey: id });
  if (transfer.status === 'rejected') throw new Declined(transfer.reason);
  return { transferId: transfer.id };
}

const sendPayout = idempotent(payoutWork, {
  store,
  leaseMs: Number(process.env.IDEM_LEASE_MS ?? 10_000),
  scope: (payout) => payout.merchantId,
  key: (payout) => payout.payoutId, // the business key, not the message id
  payload: ({ payoutId, merchantId, amount, currency }) => ({ payoutId, merchantId, amount, currency }),
  isFinal: (error) => error instanceof Declined,
});

/** Makes the payout, or replays it if it was made, and says what to do with its message. */
export async function settle(payout: Payout): Promise<{ readonly action: 'ack' } | Verdict> {
  try {
    await sendPayout(payout);
    return { action: 'ack' };
  } catch (error) {
    return verdict(error);
  }
}
// #endregion payouts
