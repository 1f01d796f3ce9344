/**
 * @module What a takeover did under the lab's takeover policy and processor switches, in sentences drawn from the
 * server's history: the claim and answer it reports, the `reconcile` hook's finding, and the ledger rows read back
 * for the payment. A double charge is counted from the ledger, never assumed.
 */
import { outcome, type Attempt } from './attempt.js';
import { abbreviate, dollars, plural } from './format.js';
import type { Payment } from './history.js';

const row = (id: string): string => abbreviate(id, 7, 4);
const recordOf = (a: Attempt): string => abbreviate(a.entry?.recordId ?? '', 8, 4);

/** The ledger's rows for the payment, as read back: how many, how much, and a double charge named as the defect. */
export function ledgerLine(payment: Payment | undefined): string {
  if (!payment) return '';
  const { charges, charged, intended } = payment;
  const over = charged > intended ? ` for ${dollars(intended)} meant: a double charge` : '';
  return `The ledger holds ${plural(charges.length, 'charge')} for this payment (${dollars(charged)}${over}).`;
}

/** The crashed attempt's charge, as the server read it back: under the processor's key, or by one that takes none. */
export function crashCharge(a: Attempt): string {
  const e = a.entry;
  const id = e?.charge?.status === 'succeeded' ? e.charge.id : null;
  if (id === null) return 'Its charge was to commit with the record, so nothing reached the ledger.';
  if (e?.charge?.found)
    return `The processor already had a charge under that record id (${row(id)}), made by another attempt, and returned it: this one charged nothing.`;
  return e?.takeover?.keyless
    ? `The processor, which takes no keys, had charged ${dollars(a.amount)} (${row(id)}).`
    : `The processor had charged ${dollars(a.amount)} under that record id (${row(id)}).`;
}

/** What a takeover that ran the charge did (`'rerun'`, or `'reconcile'` when the ledger held nothing for the record). */
function ranAgain(a: Attempt, id: string): string {
  const e = a.entry;
  if (e?.charge?.found) return `the processor returned the charge it had for that id (${row(id)}): no second charge.`;
  const asked = e?.reconciled === 'not_done' ? `'reconcile' found no charge for it, so ` : '';
  return e?.takeover?.keyless
    ? `${asked}the processor, which takes no keys, charged ${dollars(a.amount)} again (${row(id)}).`
    : `${asked}it charged ${dollars(a.amount)} (${row(id)}).`;
}

/** A takeover that ran the charge, told alone. */
export function takenOver(a: Attempt, payment: Payment | undefined, id: string): string {
  return `The lease had lapsed with the record in progress, so this retry took the key over (record ${recordOf(a)}): ${ranAgain(a, id)} ${ledgerLine(payment)}`;
}

/** A takeover the `reconcile` hook answered from the ledger. */
export function reconciledText(a: Attempt, payment: Payment | undefined): string {
  const e = a.entry;
  const found = e?.charge ? ` (${row(e.charge.id)})` : '';
  return `The lease had lapsed with the record in progress, so this retry took the key over; 'reconcile' found the charge for record ${recordOf(a)} in the ledger${found} and sent it back (${e?.answer?.status ?? ''}): nothing ran again. ${ledgerLine(payment)}`;
}

/** A takeover refused under `'quarantine'`. */
export function quarantinedText(a: Attempt, payment: Payment | undefined): string {
  return `The lease had lapsed with the record in progress; 'quarantine' never re-runs a takeover, so the server answered 409 operation_state "unknown" and ran nothing. ${ledgerLine(payment)} An operator resolves the key with \`idem records resolve\`.`;
}

/**
 * The crash run's story under a policy other than the default (`'rerun'` with a processor keyed on the record id),
 * or null when the server's account does not match it (each request is then told as it was).
 */
export function crashStory(sent: readonly Attempt[], payment: Payment | undefined): string | null {
  const [first, early] = sent;
  const last = sent.at(-1);
  if (!first || !early || !last || outcome(first) !== 'crashed' || outcome(early) !== 'in-flight') return null;
  const e = last.entry;
  if (e?.recordId && e.recordId !== first.entry?.recordId) return null;
  const t = e?.takeover ?? first.takeover;
  const made = first.entry?.charge?.status === 'succeeded' && !first.entry.charge.found ? first.entry.charge.id : null;
  const opening = `${t?.keyless ? 'Processor without keys' : 'Processor keyed on the record id'}, takeover '${t?.takeover ?? 'rerun'}': the first attempt ${made ? `charged ${dollars(first.amount)} (${row(made)}) and ` : ''}crashed before completing; an early retry got 409. Once the lease lapsed,`;
  const o = outcome(last);
  if (o === 'charged' && e?.claim === 'taken-over' && e.charge)
    return `${opening} a retry took the key over (record ${recordOf(last)}): ${ranAgain(last, e.charge.id)} ${ledgerLine(payment)}`;
  if (o === 'reconciled')
    return `${opening} a retry took the key over; 'reconcile' found ${e?.charge ? `${row(e.charge.id)} ` : 'a charge '}in the ledger under record ${recordOf(last)} and sent it back (${e?.answer?.status ?? ''}): nothing ran again. ${ledgerLine(payment)}`;
  if (o === 'quarantined')
    return `${opening} a retry got 409 operation_state "unknown" and ran nothing ('quarantine' never re-runs a takeover). ${ledgerLine(payment)} An operator resolves the key with \`idem records resolve\`.`;
  return null;
}
