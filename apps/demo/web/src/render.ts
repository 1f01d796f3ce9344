/**
 * @module Draws what the lab page has read back: the payments (each one's Intended beside its Charged), the flag
 * line, the totals, the records and ledger tables, the request log and the timeline. Nothing here decides what
 * happened: it shows `history.ts`'s state.
 */
import type { Charge } from './api.js';
import { describeOutcome, latencyOf, outcome, type Attempt } from './attempt.js';
import { byId, h } from './dom.js';
import { abbreviate, clock, dollars, plural, relative } from './format.js';
import { payments, state, type Payment } from './history.js';
import { drawRaceStrip, drawTimeline, type Numbering } from './timeline.js';

const ui = {
  intended: byId('intended', HTMLElement),
  charged: byId('charged', HTMLElement),
  chargeCount: byId('charge-count', HTMLElement),
  rows: byId('rows', HTMLElement),
  attemptsCount: byId('attempts-count', HTMLElement),
  attemptsDetail: byId('attempts-detail', HTMLElement),
  callout: byId('charge-callout', HTMLElement),
  paymentsBody: byId('payments-body', HTMLTableSectionElement),
  paymentsEmpty: byId('payments-empty', HTMLElement),
  recordsBody: byId('records-body', HTMLTableSectionElement),
  recordsEmpty: byId('records-empty', HTMLElement),
  ledgerBody: byId('ledger-body', HTMLTableSectionElement),
  ledgerEmpty: byId('ledger-empty', HTMLElement),
  logBody: byId('log-body', HTMLTableSectionElement),
  logEmpty: byId('log-empty', HTMLElement),
  logScroll: byId('log-scroll', HTMLElement),
  timeline: byId('timeline', HTMLElement),
  raceStrip: byId('race-strip', HTMLElement),
  labOff: byId('lab-off', HTMLElement),
};

/** Each request's number: its place in the history (the order the server received them). */
export const numbering = (): Numbering => {
  const index = new Map(state.attempts.map((a, i) => [a, i + 1]));
  return (a) => index.get(a) ?? 0;
};

const VERDICT: Record<Payment['verdict'], string> = {
  over: 'double charge',
  once: 'charged once',
  declined: 'declined, final',
  'in-progress': 'in progress',
  unknown: 'unknown',
  unpaid: 'not charged yet',
};

const names = (list: readonly Payment[]): string =>
  list.length === 1 ? `Payment ${list[0]?.n}` : `Payments ${list.map((p) => p.n).join(', ')}`;

/** Whether a retry with `key` runs the charge: its record is absent, or failed and retryable (else it replays). */
const retryRuns = (key: string): boolean => {
  const r = state.records.find((x) => x.key === key);
  return r === undefined || (r.status === 'failed' && r.retryable === true);
};

/**
 * The flag line: the payments whose Charged is not what was meant, by name; the line keeps its place when there
 * are none. `data-flag` says which verdict it reports.
 */
function callout(list: readonly Payment[]): void {
  const over = list.filter((p) => p.verdict === 'over');
  const of = (verdict: Payment['verdict']) => list.filter((p) => p.verdict === verdict);
  let flag = 'ok';
  let text = 'Every payment so far is charged once, as the ledger reads.';
  if (list.length === 0) {
    flag = 'none';
    text = 'No payments yet. Each one’s Intended and Charged will be compared here, as the ledger reads them.';
  } else if (over.length > 0) {
    flag = 'over';
    const first = over[0] as Payment;
    text =
      over.length === 1
        ? `Payment ${first.n} was charged ${dollars(first.charged)} (${plural(first.charges.length, 'charge')}) for the ${dollars(first.intended)} you meant: a double charge.`
        : `${names(over)} were each charged more than you meant: double charges.`;
  } else if (of('unknown').length > 0) {
    flag = 'unknown';
    text = `${names(of('unknown'))}: unknown whether charged. No answer reached this page, and the server's history does not say.`;
  } else if (of('unpaid').length > 0) {
    flag = 'unpaid';
    // Advice only where it holds: a keyless payment has no key to retry, a mismatched body meets 400 again, a
    // refused request was never run, and a record holding an answer replays it.
    const retryable = of('unpaid').every(
      (p) =>
        p.key !== null && p.attempts.every((a) => !['mismatch', 'refused'].includes(outcome(a))) && retryRuns(p.key),
    );
    text = `${names(of('unpaid'))}: meant, but nothing charged yet.${retryable ? ' Retry with the same key to charge once.' : ''}`;
  } else if (of('in-progress').length > 0) {
    flag = 'in-progress';
    text = `${names(of('in-progress'))}: still in progress on the server.`;
  } else if (of('declined').length > 0) {
    flag = 'declined';
    text = `${names(of('declined'))}: declined for good. Nothing charged, and a retry gets the same 402.`;
  }
  if (state.unreachable !== null && list.length > 0) {
    flag = 'unknown';
    text = 'The server cannot be reached: the figures below are from the last read, and nothing newer is claimed.';
  }
  ui.callout.dataset.flag = flag;
  ui.callout.textContent = text;
}

/** A row for ledger charges no request in the history names (the history is whole, so this row is rare). */
const strayRow = (stray: readonly Charge[]) =>
  h(
    'tr',
    {
      'data-payment': 'stray',
      'data-charged': stray.reduce((sum, c) => sum + c.amount, 0),
      'data-charges': stray.map((c) => c.id).join(' '),
    },
    h('th', { scope: 'row', class: 'c-n' }, 'Not in the history'),
    h('td', { class: 'c-key' }, '—'),
    h('td', { class: 'num c-intended' }, '—'),
    h('td', { class: 'num c-charged' }, dollars(stray.reduce((sum, c) => sum + c.amount, 0))),
    h('td', { class: 'c-verdict' }, 'named by no request here'),
    h('td', { class: 'c-requests' }, plural(stray.length, 'charge')),
  );

function renderPayments(list: readonly Payment[], stray: readonly Charge[]): void {
  ui.paymentsEmpty.hidden = list.length > 0 || stray.length > 0;
  ui.paymentsBody.replaceChildren(
    ...list.map((p) =>
      h(
        'tr',
        {
          'data-payment': p.n,
          'data-verdict': p.verdict,
          'data-intended': p.intended,
          'data-charged': p.charged,
          'data-charges': p.charges.map((c) => c.id).join(' '),
          class: `v-${p.verdict}`,
        },
        h('th', { scope: 'row', class: 'c-n' }, `Payment ${p.n}`),
        h(
          'td',
          { class: 'c-key' },
          p.key === null
            ? h('span', { class: 'muted' }, 'no key')
            : h('code', { title: p.key }, abbreviate(p.key, 8, 4)),
        ),
        h('td', { class: 'num c-intended' }, dollars(p.intended)),
        h('td', { class: 'num c-charged' }, dollars(p.charged)),
        h('td', { class: 'c-verdict' }, h('span', { class: `badge v-${p.verdict}` }, VERDICT[p.verdict])),
        h('td', { class: 'c-requests' }, plural(p.attempts.length, 'request')),
      ),
    ),
    ...(stray.length > 0 ? [strayRow(stray)] : []),
  );
}

function renderRecords(): void {
  ui.rows.textContent = String(state.records.length);
  ui.recordsEmpty.hidden = state.records.length > 0;
  const now = Date.now();
  ui.recordsBody.replaceChildren(
    ...state.records.map((r) =>
      h(
        'tr',
        { 'data-key': r.key, 'data-status': r.status },
        h('td', { class: 'c-key' }, h('code', { title: r.key }, abbreviate(r.key, 8, 4))),
        h('td', { class: 'c-fingerprint' }, h('code', { title: r.fingerprint }, abbreviate(r.fingerprint, 6, 4))),
        h(
          'td',
          { class: 'c-status' },
          h('span', { class: `badge s-${r.status}` }, r.status),
          r.status === 'failed' ? (r.retryable ? ' retryable' : ' final') : '',
        ),
        h('td', { class: 'c-response' }, r.responseStatus === null ? '—' : String(r.responseStatus)),
        h('td', { class: 'c-expires', title: new Date(r.expiresAt).toISOString() }, relative(r.expiresAt, now)),
      ),
    ),
  );
}

function renderLedger(): void {
  ui.ledgerEmpty.hidden = state.charges.length > 0;
  ui.ledgerBody.replaceChildren(
    ...state.charges.map((c) =>
      h(
        'tr',
        { 'data-charge': c.id },
        h('td', {}, h('code', { title: c.id }, abbreviate(c.id, 7, 4))),
        h('td', { class: 'num' }, dollars(c.amount)),
        h('td', {}, c.status),
      ),
    ),
  );
}

function requestText(a: Attempt): string {
  const f = a.faults;
  const parts = [
    `POST ${dollars(a.amount).replace('.00', '')}`,
    a.source === 'tok_chargeDeclined' ? 'declined card' : '',
    f.drop ? 'flaky' : '',
    f.crash ? 'crash' : '',
    f.fail ? 'fail 503' : '',
    f.delayMs ? `slow ${f.delayMs} ms` : '',
  ];
  return parts.filter(Boolean).join(' · ');
}

function renderLog(n: Numbering): void {
  ui.logEmpty.hidden = state.attempts.length > 0;
  ui.logBody.replaceChildren(
    ...state.attempts.map((a) => {
      const o = outcome(a);
      const status = a.entry?.answer?.status ?? (a.entry?.state === 'done' ? null : (a.seen?.status ?? null));
      const latency = latencyOf(a);
      return h(
        'tr',
        { 'data-outcome': o, 'data-n': n(a), class: `o-${o}` },
        h('td', { class: 'num c-n' }, String(n(a))),
        h('td', { class: 'c-control' }, a.control),
        h(
          'td',
          { class: 'c-key' },
          a.key === null
            ? h('span', { class: 'muted' }, 'no key')
            : h('code', { title: a.key }, abbreviate(a.key, 8, 4)),
        ),
        h('td', { class: 'c-request' }, requestText(a)),
        h(
          'td',
          { class: 'c-outcome' },
          h('span', { class: `badge o-${o}` }, describeOutcome(a)),
          a.entry?.answer?.retryAfter ? ` · Retry-After ${a.entry.answer.retryAfter} s` : '',
        ),
        h('td', { class: 'num c-status' }, status === null ? '—' : String(status)),
        h('td', { class: 'num c-latency', title: `sent ${clock(a.sentAt)}` }, latency === null ? '…' : `${latency} ms`),
      );
    }),
  );
  ui.logScroll.scrollTop = ui.logScroll.scrollHeight;
}

/** Redraws the race strip alone (on resize). */
export function renderStrip(): void {
  const strip = drawRaceStrip(state.attempts, ui.raceStrip.clientWidth || 600, numbering());
  ui.raceStrip.replaceChildren(...(strip ? [strip] : []));
}

/**
 * Redraws everything from the state as last read.
 *
 * @example
 * await refresh(); render()
 */
export function render(): void {
  const { list, stray } = payments();
  const n = numbering();
  ui.labOff.hidden = !state.labOff;
  ui.intended.textContent = dollars(list.reduce((sum, p) => sum + p.intended, 0));
  ui.charged.textContent = dollars(state.balance?.charged ?? 0);
  ui.chargeCount.textContent = `${plural(state.balance?.count ?? 0, 'succeeded charge')} in the ledger`;
  ui.attemptsCount.textContent = String(state.attempts.length);
  const counts = new Map<string, number>();
  for (const a of state.attempts) counts.set(describeOutcome(a), (counts.get(describeOutcome(a)) ?? 0) + 1);
  // The outcome first, then its count: "409 in flight: 4", never "4 409 in flight".
  ui.attemptsDetail.textContent =
    counts.size === 0 ? 'none yet' : [...counts].map(([what, count]) => `${what}: ${count}`).join(' · ');
  callout(list);
  renderPayments(list, stray);
  renderRecords();
  renderLedger();
  renderLog(n);
  ui.timeline.replaceChildren(drawTimeline(list, n));
  renderStrip();
}
