/**
 * The payment processor the documented consumers call (`bank.transfer` in `payouts.ts`), made of the test's books
 * (`ledger.ts`). Like a real processor it is idempotent on `idempotencyKey` (the idempotency record's id): a
 * second transfer under the same key returns the first. It refuses amounts over {@link LIMIT} for good.
 *
 * What the tests steer, by environment (besides `kit.ts`'s): LEDGER (the books' spec) and FLAKY (comma-separated
 * payout ids whose first run throws a retryable error before anything is paid). What they read: a `worked` event
 * per payout made, and a hold in the work (HOLD_IN_WORK) on a record's first run.
 */
import type { Payout } from './payouts.js';
import { LIMIT, openLedger } from './ledger.js';
import { env, holdPoint, holdsFor, NAME, ranHere, say } from './kit.js';

const ledger = await openLedger(env('LEDGER'));
const flaky = new Set((process.env.FLAKY ?? '').split(',').filter(Boolean));

export interface Transfer {
  readonly id: string;
  readonly status: 'paid' | 'rejected';
  readonly reason: string;
}

export const bank = {
  async transfer({ idempotencyKey, ...payout }: Payout & { idempotencyKey: string }): Promise<Transfer> {
    const { payoutId } = payout;
    const { rerun } = await ledger.noteRun({ payoutId, recordId: idempotencyKey, consumer: NAME });
    ranHere.add(payoutId);
    if (payout.amount > LIMIT)
      return { id: '', status: 'rejected', reason: `amount ${payout.amount} is over the limit` };
    if (flaky.has(payoutId) && !rerun) throw new Error('bank: connection reset by peer');
    const entry = await ledger.post(idempotencyKey, payout, NAME);
    say({ event: 'worked', payoutId, recordId: idempotencyKey, rerun });
    if (!rerun && holdsFor('in-work', payoutId)) await holdPoint('in-work', payoutId);
    return { id: entry.entryId, status: 'paid', reason: '' };
  },
};
