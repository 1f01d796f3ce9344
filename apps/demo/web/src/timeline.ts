/**
 * @module The lab's timeline: each request as a card of steps across three lanes (client, server, store), grouped by
 * payment so a charge and its retries stay together. Cards wrap: side by side on a wide screen, one under another on
 * a phone. Every server and store step is the server's own account of the request (`GET /v1/lab/history`): how the
 * key was claimed, what the work did, the ledger row and the record read back once it was done.
 */
import { describeOutcome, latencyOf, OUTCOME_UNKNOWN, outcome, type Attempt } from './attempt.js';
import { abbreviate, clock, dollars } from './format.js';
import { h, s } from './dom.js';
import type { Payment } from './history.js';

/** About how many attempts are drawn: the newest payments, whole, up to this many attempts (the log keeps all). */
export const TIMELINE_MAX = 20;
/** One request's row in the race's time strip. */
const STRIP_ROW = 20;

type Lane = 'client' | 'server' | 'store';
interface Step {
  readonly lane: Lane;
  readonly text: string;
  readonly tone?: 'good' | 'bad' | 'warn' | 'info' | 'violet' | 'muted';
  readonly testid?: string;
}

/** How the store met the claim, as the server's history reports it. */
function claimStep(a: Attempt): Step {
  const e = a.entry;
  if (a.key === null) return { lane: 'store', text: 'no key: nothing is checked', tone: 'muted' };
  if (e?.state === 'interrupted') return { lane: 'store', text: 'claim: not told (the server stopped)', tone: 'muted' };
  switch (e?.state === 'done' ? e.claim : null) {
    case 'fresh':
      return { lane: 'store', text: 'claim: inserted in_progress' };
    case 'reclaimed':
      return { lane: 'store', text: 'claim: reclaimed the failed key, same id' };
    case 'taken-over':
      return { lane: 'store', text: 'claim: took over the lapsed lease, same id', tone: 'warn' };
    case 'replayed':
      return { lane: 'store', text: `claim refused: key ${e?.before?.status ?? 'completed'}`, tone: 'info' };
    case 'in-flight':
      return { lane: 'store', text: 'claim refused: key in_progress', tone: 'warn' };
    case 'reconciled':
      return { lane: 'store', text: 'claim: took over the lapsed lease; reconcile asked the ledger', tone: 'info' };
    case 'mismatch':
      return { lane: 'store', text: 'claim refused: hash differs', tone: 'violet' };
    case 'refused':
      return e?.answer?.problem === OUTCOME_UNKNOWN
        ? { lane: 'store', text: 'claim: took over the lapsed lease; quarantine runs nothing', tone: 'bad' }
        : { lane: 'store', text: `refused: ${e?.status ?? ''}`, tone: 'bad' };
    default:
      return { lane: 'store', text: 'claim…', tone: 'muted' };
  }
}

/**
 * What the work did, and what the ledger holds from it (read back). A row the work `found` was already there (a
 * takeover whose processor returned the crashed attempt's charge): no new row.
 */
function workSteps(a: Attempt): Step[] {
  const e = a.entry;
  if (e?.state === 'interrupted') {
    const text = e.charge
      ? `ledger: ${abbreviate(e.charge.id, 7, 4)} ${e.charge.found ? 'made earlier, none by it' : e.charge.status}`
      : 'ledger: no row';
    return [{ lane: 'store', text: `${text} (read after the restart)`, tone: e.charge ? 'good' : 'muted' }];
  }
  if (e?.claim === 'reconciled' && e.charge)
    return [
      {
        lane: 'store',
        text: `ledger: ${abbreviate(e.charge.id, 7, 4)} found under the record id, no new row`,
        tone: 'info',
      },
    ];
  if (!e?.work) return [];
  const asked: Step[] =
    e.reconciled === 'not_done'
      ? [{ lane: 'store', text: 'reconcile: no charge under the record id, so it runs', tone: 'info' }]
      : [];
  const delay = a.faults.delayMs > 0 ? ` (${a.faults.delayMs} ms)` : '';
  // A processor without keys is sent the record id as a note only: it does not deduplicate on it.
  const ref = e.recordId ? `, ${e.takeover?.keyless ? 'no key, note' : 'ref'} ${abbreviate(e.recordId, 8, 4)}` : '';
  const work: Record<NonNullable<typeof e.work>, Step> = {
    charged: { lane: 'server', text: `charges ${dollars(a.amount)}${delay}${ref}`, tone: 'good' },
    declined: { lane: 'server', text: `card declined${delay}`, tone: 'bad' },
    'processor-failed': { lane: 'server', text: `processor fails 503${delay}`, tone: 'bad' },
    crashed: { lane: 'server', text: `calls the processor${ref}, then crashes`, tone: 'bad' },
  };
  const row = e.charge && abbreviate(e.charge.id, 7, 4);
  const ledger: Step = !e.charge
    ? { lane: 'store', text: 'ledger: no row', tone: 'muted' }
    : e.charge.found
      ? { lane: 'store', text: `ledger: ${row} already there, no new row`, tone: 'info' }
      : {
          lane: 'store',
          text: `ledger: ${row} ${e.charge.status}`,
          tone: e.charge.status === 'succeeded' ? 'good' : 'muted',
        };
  return [...asked, work[e.work], ledger];
}

/** The key's record once the request was done (read back). */
function recordStep(a: Attempt): Step[] {
  const r = a.entry && a.entry.state !== 'running' ? a.entry.record : null;
  if (!r) return [];
  const text =
    r.status === 'in_progress'
      ? `record: in_progress, lease until ${clock(r.leaseExpiresAt)}`
      : `record: ${r.status}${r.retryable === null ? '' : r.retryable ? ' retryable' : ' final'} ${r.responseStatus ?? ''}`.trim();
  const tone = r.status === 'succeeded' ? 'good' : r.status === 'in_progress' || r.retryable ? 'warn' : 'bad';
  return [{ lane: 'store', text, tone, testid: 'read-back' }];
}

/** What reached the client. */
function answerStep(a: Attempt): Step {
  const o = outcome(a);
  const status = a.entry?.answer?.status ?? a.seen?.status ?? '';
  const retryAfter = a.entry?.answer?.retryAfter;
  switch (o) {
    case 'pending':
    case 'running':
      return { lane: 'client', text: 'waiting…', tone: 'muted' };
    case 'dropped':
    case 'crashed':
      return { lane: 'client', text: '✕ no answer: the connection was cut', tone: 'bad' };
    case 'unknown':
      return { lane: 'client', text: '✕ no answer, nothing read back: unknown', tone: 'muted' };
    case 'interrupted':
      return { lane: 'client', text: '✕ no answer: the server stopped', tone: 'bad' };
    case 'refused':
      return { lane: 'client', text: `← ${status} not run: the lab's history`, tone: 'bad' };
    case 'charged':
      return { lane: 'client', text: `← ${status} charged`, tone: 'good' };
    case 'replayed':
      return { lane: 'client', text: `← ${status} replayed, not charged`, tone: 'info' };
    case 'reconciled':
      return { lane: 'client', text: `← ${status} the reconciled charge, not charged again`, tone: 'info' };
    case 'quarantined':
      return { lane: 'client', text: '← 409 operation_state "unknown", not run', tone: 'bad' };
    case 'in-flight':
      return {
        lane: 'client',
        text: `← 409 in flight${retryAfter ? `, Retry-After ${retryAfter} s` : ''}`,
        tone: 'warn',
      };
    case 'mismatch':
      return { lane: 'client', text: `← ${status} mismatch`, tone: 'violet' };
    case 'processor-failed':
      return { lane: 'client', text: `← ${status} retryable`, tone: 'bad' };
    case 'declined':
      return { lane: 'client', text: `← ${status} declined, final`, tone: 'bad' };
    case 'error':
      return { lane: 'client', text: `← error ${status}`, tone: 'bad' };
  }
}

function steps(a: Attempt): Step[] {
  const faults = [a.faults.drop ? 'flaky' : '', a.faults.crash ? 'crash' : ''].filter(Boolean).join(', ');
  return [
    {
      lane: 'client',
      text: `sends POST ${dollars(a.amount)}${a.key === null ? ', no key' : ''}${faults ? ` (${faults})` : ''}`,
    },
    claimStep(a),
    ...workSteps(a),
    ...recordStep(a),
    answerStep(a),
  ];
}

/** Each request's number in the request log (1-based, in the order the server received them). */
export type Numbering = (a: Attempt) => number;

function card(a: Attempt, n: Numbering): HTMLElement {
  const o = outcome(a);
  const latency = latencyOf(a);
  return h(
    'li',
    { class: `attempt o-${o}`, 'data-n': n(a), 'data-outcome': o },
    h(
      'p',
      { class: 'attempt-head' },
      h('strong', {}, `#${n(a)} ${a.control}`),
      h('span', { class: 'attempt-latency' }, latency === null ? 'in flight' : `${latency} ms`),
    ),
    h(
      'ol',
      { class: 'steps', 'aria-label': `#${n(a)} ${a.control}: ${describeOutcome(a)}` },
      ...steps(a).map((step) =>
        h(
          'li',
          {
            class: `step lane-${step.lane}${step.tone ? ` t-${step.tone}` : ''}`,
            ...(step.testid ? { 'data-testid': step.testid } : {}),
          },
          h('span', { class: 'lane' }, step.lane),
          h('span', { class: 'step-text' }, step.text),
        ),
      ),
    ),
  );
}

/** A payment's cards, a race's requests as one block inside it. */
function blocks(attempts: readonly Attempt[], n: Numbering): HTMLElement[] {
  const out: HTMLElement[] = [];
  const next = (a: Attempt): HTMLElement => card(a, n);
  for (let i = 0; i < attempts.length;) {
    const a = attempts[i] as Attempt;
    if (a.group === null) {
      out.push(next(a));
      i++;
      continue;
    }
    let j = i;
    while (j < attempts.length && attempts[j]?.group === a.group) j++;
    const race = attempts.slice(i, j);
    i = j;
    out.push(
      h(
        'li',
        { class: 'race-group', 'data-group': a.group },
        h(
          'p',
          { class: 'group-label' },
          `Race ×${race.filter((r) => r.control !== 'Auto-retry').length}: sent in one tick`,
        ),
        h('ol', { class: 'race-cards' }, ...race.map(next)),
      ),
    );
  }
  return out;
}

/**
 * Draws the newest payments, one box each with all its requests. Returns an element sized to its container (no
 * sideways scroll).
 *
 * @example
 * container.replaceChildren(drawTimeline(payments().list, numbering))
 */
export function drawTimeline(all: readonly Payment[], n: Numbering): HTMLElement {
  if (all.length === 0) return h('p', { class: 'empty' }, 'No attempts yet.');
  // Whole payments only, newest first, so a charge is never shown without its retries (or a retry without its charge).
  const shown: Payment[] = [];
  let drawn = 0;
  for (const payment of [...all].reverse()) {
    if (shown.length > 0 && drawn + payment.attempts.length > TIMELINE_MAX) break;
    shown.unshift(payment);
    drawn += payment.attempts.length;
  }
  const hidden = all.length - shown.length;
  const list = h(
    'ol',
    { class: 'threads' },
    ...shown.map((payment) =>
      h(
        'li',
        { class: 'thread', 'data-payment': payment.n },
        h(
          'p',
          { class: 'thread-head' },
          `Payment ${payment.n} · `,
          payment.key === null
            ? h('span', {}, 'no key')
            : h('code', { title: payment.key }, abbreviate(payment.key, 8, 4)),
        ),
        h('ol', { class: 'cards' }, ...blocks(payment.attempts, n)),
      ),
    ),
  );
  if (hidden === 0) return list;
  return h(
    'div',
    {},
    h('p', { class: 'small' }, `${hidden} older payment${hidden === 1 ? ' is' : 's are'} in the request log above.`),
    list,
  );
}

/**
 * The last race's requests on one time axis: when each was sent and how long it took. The timeline groups them;
 * this shows that they overlapped. Null when there was no race.
 *
 * @example
 * const chart = drawRaceStrip(attempts, container.clientWidth, numbering)
 */
export function drawRaceStrip(all: readonly Attempt[], width: number, n: Numbering): SVGSVGElement | null {
  const last = all.findLast((a) => a.group !== null)?.group;
  if (last === undefined || last === null) return null;
  const race = all.filter((a) => a.group === last);
  const now = Date.now();
  const took = (a: Attempt) => latencyOf(a) ?? now - a.sentAt;
  const start = Math.min(...race.map((a) => a.sentAt));
  const spread = Math.max(...race.map((a) => a.sentAt)) - start;
  const span = Math.max(Math.max(...race.map((a) => a.sentAt + took(a))) - start, 1);
  const left = 40;
  const labelWidth = 150;
  const scale = Math.max(width - left - labelWidth, 40) / span;
  const height = 30 + race.length * STRIP_ROW;
  const svg = s(
    'svg',
    {
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: 'img',
      'aria-label': `The last race in real time: ${race.length} requests sent within ${spread} ms of each other, ${span} ms in all`,
      class: 'timeline-svg',
    },
    s(
      'text',
      { x: 4, y: 17, class: 'group-label' },
      `Race ×${race.length}: sent within ${spread} ms, ${span} ms in all`,
    ),
  );
  race.forEach((a, i) => {
    const top = 26 + i * STRIP_ROW;
    const x = left + (a.sentAt - start) * scale;
    const length = Math.max(3, took(a) * scale);
    const latency = latencyOf(a);
    const label = latency === null ? '…' : `${latency} ms · ${describeOutcome(a)}`;
    svg.append(
      s('text', { x: 4, y: top + 13, class: 'foot' }, `#${n(a)}`),
      s('rect', { x, y: top + 2, width: length, height: STRIP_ROW - 6, rx: 2, class: `bar o-${outcome(a)}` }),
      s('text', { x: Math.min(x + length + 6, width - labelWidth + 6), y: top + 13, class: 'foot' }, label),
    );
  });
  return svg;
}
