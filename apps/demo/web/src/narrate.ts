/**
 * @module What just happened, in plain sentences, each one a reading: it says only what the server's history, its
 * records and its ledger report for the requests a control sent, and each sentence carries its claims (charged,
 * not charged, replayed, refused, in progress, unknown) for the tests to check against the ledger and the records.
 */
import type { Attempt } from './attempt.js';
import { describeOutcome, outcome } from './attempt.js';
import { abbreviate, clock, dollars, plural } from './format.js';
import { state, type Payment } from './history.js';
import { crashCharge, quarantinedText, reconciledText, takenOver } from './takeover-text.js';

/**
 * One claim a sentence makes about one request: `charged` — it left ledger row `charge`; `not-charged` — it moved no
 * money; `replayed` — it got the stored answer and ran nothing; `refused` — it was refused and ran nothing;
 * `in-progress` — the key's record was in_progress; `unknown` — the page does not know.
 */
export interface Claim {
  readonly request: string;
  readonly kind: 'charged' | 'not-charged' | 'replayed' | 'refused' | 'in-progress' | 'unknown';
  readonly key: string | null;
  readonly charge: string | null;
}

/** Sentences and the claims they make. */
export interface Told {
  readonly text: string;
  readonly claims: readonly Claim[];
}

const row = (id: string): string => abbreviate(id, 7, 4);
const claim = (a: Attempt, kind: Claim['kind'], charge: string | null = null): Claim => ({
  request: a.request,
  kind,
  key: a.key,
  charge,
});

function charged(a: Attempt, payment: Payment | undefined): Told {
  const e = a.entry;
  const amount = dollars(a.amount);
  const id = e?.charge?.status === 'succeeded' ? e.charge.id : null;
  if (id === null) {
    return {
      text: `The server answered ${e?.status ?? ''}, but the ledger read back has no charge from it: nothing was charged.`,
      claims: [claim(a, 'not-charged')],
    };
  }
  if (e?.claim === 'taken-over' && (e.takeover?.keyless || e.reconciled)) {
    const same = e.charge?.found === true;
    return { text: takenOver(a, payment, id), claims: [claim(a, same ? 'not-charged' : 'charged', id)] };
  }
  if (e?.claim === 'taken-over') {
    const same = e.charge?.found === true;
    return {
      text: `The first attempt's lease had lapsed with its record still in progress, so this retry took the key over under the same record id (${abbreviate(e.recordId ?? '', 8, 4)}) and passed it to the processor as its key. ${
        same
          ? `The processor already had a charge for that id and returned it (${row(id)}): no second charge.`
          : `It charged ${amount} (${row(id)}): the crashed attempt had committed nothing, so this is the one charge.`
      }`,
      claims: [claim(a, same ? 'not-charged' : 'charged', id)],
    };
  }
  const count = payment?.charges.length ?? 1;
  let text: string;
  if (a.key === null && count > 1 && payment)
    text = `Without a key the server cannot tell a retry from a new payment, so it charged ${amount} again (${row(id)}): ${dollars(payment.charged)} charged for the ${dollars(payment.intended)} you meant.`;
  else if (a.key === null)
    text = `The server charged ${amount} (${row(id)}) and answered ${e?.status ?? 201}. No key was sent, so nothing stops a retry from charging again.`;
  else if (e?.claim === 'reclaimed')
    text = `The key's last attempt had failed and was marked retryable, so this retry reclaimed the key under the same record id and charged ${amount} (${row(id)}).`;
  else
    text = `The server claimed the key, charged ${amount} (${row(id)}) and stored the ${e?.status ?? 201} with it. A retry with the same key gets this answer back, with no second charge.`;
  return { text, claims: [claim(a, 'charged', id)] };
}

function cut(a: Attempt, crashed: boolean): Told {
  const e = a.entry;
  const id = e?.charge?.status === 'succeeded' ? e.charge.id : null;
  const found = e?.charge?.found === true;
  const money: Claim = claim(a, id && !found ? 'charged' : 'not-charged', id && !found ? id : null);
  if (!crashed) {
    const what = id ? `The server charged ${dollars(a.amount)} (${row(id)})` : 'The server charged nothing';
    const after = a.key === null ? 'Without a key, a retry will be a second charge.' : retryWill(a);
    return { text: `${what}, then the connection was cut before the answer reached you. ${after}`, claims: [money] };
  }
  if (a.key === null) {
    const what = id ? `It had charged ${dollars(a.amount)} (${row(id)}).` : 'It had charged nothing.';
    return {
      text: `The attempt called the processor and crashed before answering. ${what} Without a key no record was kept: a retry runs the charge again.`,
      claims: [money],
    };
  }
  const lease =
    e?.record?.status === 'in_progress' ? ` until its lease lapses at ${clock(e.record.leaseExpiresAt)}` : '';
  return {
    text: `The attempt claimed the key (record ${abbreviate(e?.recordId ?? '', 8, 4)}), called the processor and crashed before completing: no answer, no renewal. ${crashCharge(a)} The record stays in_progress${lease}; a retry before then gets 409.`,
    claims: [money, ...(e?.record?.status === 'in_progress' ? [claim(a, 'in-progress')] : [])],
  };
}

/** A request the server stopped under: no answer was sent; its record and its ledger row as read since. */
function interrupted(a: Attempt): Told {
  const e = a.entry;
  const id = e?.charge?.status === 'succeeded' ? e.charge.id : null;
  const found = e?.charge?.found === true;
  const money = id
    ? found
      ? `The ledger's charge under its key's record (${row(id)}) was made by an earlier attempt: this one charged nothing.`
      : `The ledger holds its charge of ${dollars(e?.charge?.amount ?? a.amount)} (${row(id)}).`
    : a.key === null
      ? 'The ledger holds no charge from it.'
      : "The ledger holds no charge under its key's record.";
  return {
    text: `The server stopped while this request ran, so no answer was sent. ${money} ${a.key === null ? 'Without a key no record was kept.' : retryWill(a)}`,
    claims: [
      claim(a, id && !found ? 'charged' : 'not-charged', id && !found ? id : null),
      ...(e?.record?.status === 'in_progress' ? [claim(a, 'in-progress')] : []),
    ],
  };
}

/** What a retry with the key will meet, from the record read back after the request. */
function retryWill(a: Attempt): string {
  const r = a.entry?.record;
  if (!r) return 'The key has no record: a retry with it runs as new.';
  const said = `The key's record says ${r.status}${r.responseStatus ? ` ${r.responseStatus}` : ''}`;
  if (r.status === 'succeeded') return `${said}: a retry with the same key gets that answer back.`;
  if (r.status === 'in_progress' && r.leaseExpiresAt <= Date.now())
    return `${said}, but its lease lapsed at ${clock(r.leaseExpiresAt)}: a retry takes the key over under the same record id.`;
  if (r.status === 'in_progress') return `${said}: a retry gets 409 until it is settled.`;
  return r.retryable
    ? `${said}, retryable: a retry with the same key runs the charge again.`
    : `${said}, final: a retry with the same key gets the same answer back.`;
}

/**
 * One request, told from the server's account of it.
 *
 * @example
 * tellOne(attempt, paymentOf(attempt)).text
 */
export function tellOne(a: Attempt, payment?: Payment): Told {
  const e = a.entry;
  const amount = dollars(a.amount);
  switch (outcome(a)) {
    case 'pending':
    case 'running':
      return state.unreachable === null
        ? { text: 'Still running on the server…', claims: [] }
        : {
            text: 'No answer yet, and the server cannot be reached to read back what happened. This page does not know whether it ran or charged, and claims nothing.',
            claims: [claim(a, 'unknown')],
          };
    case 'interrupted':
      return interrupted(a);
    case 'refused':
      return {
        text:
          a.seen?.problem === 'urn:idem:problem:lab-history-full'
            ? `This sandbox account has sent as many requests as the lab keeps, so the server refused this one with ${a.seen.status ?? 409} before running it: nothing was charged. Reset starts a fresh account.`
            : a.seen?.problem === 'urn:idem:problem:lab-busy'
              ? `A Reset of this account was running, so the server refused this request with ${a.seen.status ?? 409} before running it: nothing was charged.`
              : `The server could not record this request in the lab's history, so it refused it with ${a.seen?.status ?? 503} before running it: nothing was charged.`,
        claims: [claim(a, 'refused')],
      };
    case 'charged':
      return charged(a, payment);
    case 'dropped':
      return cut(a, false);
    case 'crashed':
      return cut(a, true);
    case 'replayed':
      return {
        text:
          e?.answer?.status === 402
            ? "The key's record holds a final failure, so the server sent the stored 402 again, marked as a replay, and ran nothing: the card is not retried and nothing is charged."
            : `The key was already completed, so the server sent the stored ${e?.answer?.status ?? 201} again, marked as a replay, and ran nothing: no new charge.`,
        claims: [claim(a, 'replayed')],
      };
    case 'reconciled':
      return { text: reconciledText(a, payment), claims: [claim(a, 'replayed')] };
    case 'quarantined':
      return {
        text: quarantinedText(a, payment),
        claims: [claim(a, 'refused'), ...(e?.record?.status === 'in_progress' ? [claim(a, 'in-progress')] : [])],
      };
    case 'in-flight':
      return {
        text: `The key's record was in_progress (another attempt held it), so the server answered 409${e?.answer?.retryAfter ? ` with Retry-After ${e.answer.retryAfter} s` : ''} and ran nothing.`,
        claims: [claim(a, 'refused')],
      };
    case 'mismatch':
      return {
        text: `Same key, different body (${amount}): the request's hash did not match the one stored with the key, so the server refused with ${e?.answer?.status ?? 400} and ran nothing.`,
        claims: [claim(a, 'refused')],
      };
    case 'processor-failed':
      return {
        text:
          a.key === null
            ? 'The processor failed and the server answered 503: nothing was charged, and without a key no record was kept.'
            : 'The processor failed: the server answered 503 and marked the key failed but retryable. Nothing was charged; a retry with the same key runs the charge again.',
        claims: [claim(a, 'not-charged')],
      };
    case 'declined':
      return {
        text: `The card was declined: the server answered 402 and stored it with the key as a final failure. The ledger keeps a failed row${e?.charge ? ` (${row(e.charge.id)})` : ''}; no money moved.`,
        claims: [claim(a, 'not-charged')],
      };
    case 'error':
      return {
        text: `The server answered ${e?.status ?? 'an error'} and the ledger shows ${e?.charge ? `row ${row(e.charge.id)}` : 'no charge'} from it.`,
        claims: [claim(a, e?.charge?.status === 'succeeded' ? 'charged' : 'not-charged', e?.charge?.id ?? null)],
      };
    case 'unknown':
      return {
        text: a.seen?.answered
          ? `The server answered ${a.seen.status ?? ''}, but its history, records and ledger could not be read back, so this page claims nothing about what was charged.`
          : 'No answer, and the server could not be reached to read back what happened. This page does not know whether anything was charged, and claims nothing.',
        claims: [claim(a, 'unknown')],
      };
  }
}

/**
 * A control's requests, told as one event: one request; a request and the client's automatic retries; or a race.
 *
 * @example
 * tell(sent, paymentOf)
 */
export function tell(sent: readonly Attempt[], paymentOf: (a: Attempt) => Payment | undefined): Told {
  const last = sent.at(-1);
  if (last === undefined) return { text: 'Nothing was sent.', claims: [] };
  const claims = sent.flatMap((a) => tellOne(a, paymentOf(a)).claims);
  if (sent.length === 1) return tellOne(last, paymentOf(last));
  if (sent.some((a) => a.group !== null)) return { text: raceText(sent, paymentOf(last)), claims };
  // The client's retries: the steps (a run of one outcome counted once), the attempt that moved money if it was
  // not the last, then the last.
  const runs: Array<[string, number]> = [];
  for (const a of sent) {
    const what = describeOutcome(a);
    const run = runs.at(-1);
    if (run && run[0] === what) run[1]++;
    else runs.push([what, 1]);
  }
  const steps = runs.map(([what, n]) => (n === 1 ? what : `${what} ×${n}`));
  const moved = sent.find((a) => a !== last && a.entry?.charge?.status === 'succeeded');
  const middle = moved
    ? ` ${moved === sent[0] ? 'The first attempt' : 'A retry'} charged ${dollars(moved.amount)} (${row(moved.entry?.charge?.id ?? '')})${outcome(moved) === 'dropped' ? ', but its answer was lost' : ''}.`
    : '';
  return {
    text: `Auto-retry sent ${plural(sent.length, 'attempt')} (${steps.join(' → ')}).${middle} Last: ${tellOne(last, paymentOf(last)).text}`,
    claims,
  };
}

function raceText(race: readonly Attempt[], payment: Payment | undefined): string {
  const count = (o: ReturnType<typeof outcome>) => race.filter((a) => outcome(a) === o).length;
  const rows = race.flatMap((a) => (a.entry?.charge?.status === 'succeeded' ? [row(a.entry.charge.id)] : []));
  const ran = rows.length;
  const firsts = race.filter((a) => a.control !== 'Auto-retry').length;
  const money = payment
    ? `The ledger holds ${plural(payment.charges.length, 'charge')} for this payment: ${dollars(payment.charged)}.`
    : '';
  if (race[0]?.key === null)
    return `${firsts} identical requests without a key left together: each one ran, so ${plural(ran, 'request')} charged (${rows.join(', ')}). ${money}`;
  const parts = [
    ran ? `${ran} ran the charge (${rows.join(', ')})` : '',
    count('in-flight') ? `${count('in-flight')} got 409 while it held the key` : '',
    count('replayed') ? `${count('replayed')} got the stored answer back` : '',
  ].filter(Boolean);
  return `${firsts} identical requests with one key left together${race.length > firsts ? ` (${race.length} with the client's retries)` : ''}: ${parts.join(', ')}. ${money}`;
}
