/**
 * @module The lab's timeline: each observed attempt as a card of steps across three lanes (client, server, store),
 * grouped by payment so a charge and its retries stay together. Cards wrap: side by side on a wide screen, one under
 * another on a phone. The client's times are measured in the browser; the server's and the store's steps follow from
 * each answer (its status and `Idempotent-Replayed`) and, for a dropped connection, from the record read back.
 */
import { describeOutcome, type Attempt } from './attempt.js';
import { abbreviate, dollars } from './format.js';
import { h, s } from './dom.js';

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

/** What the store did on the attempt's claim. */
function claimStep(a: Attempt): Step {
  if (a.key === null) return { lane: 'store', text: 'no key: nothing is checked', tone: 'muted' };
  switch (a.outcome) {
    case 'executed':
    case 'processor-failed':
    case 'declined':
    case 'dropped':
      return { lane: 'store', text: a.reclaim ? 'claim: reclaimed the failed key' : 'claim: inserted in_progress' };
    case 'replayed':
      return { lane: 'store', text: 'claim refused: key completed' };
    case 'in-flight':
      return { lane: 'store', text: 'claim refused: key in_progress', tone: 'warn' };
    case 'mismatch':
      return { lane: 'store', text: 'claim refused: hash differs', tone: 'violet' };
    case 'pending':
      return { lane: 'store', text: 'claim…', tone: 'muted' };
    case 'error':
      return { lane: 'store', text: 'claim: unknown', tone: 'muted' };
  }
}

/** Did the work (the charge) run on this attempt? */
const worked = (a: Attempt): boolean =>
  a.outcome === 'executed' ||
  a.outcome === 'dropped' ||
  a.outcome === 'processor-failed' ||
  a.outcome === 'declined' ||
  (a.outcome === 'pending' && a.key === null);

function steps(a: Attempt): Step[] {
  const out: Step[] = [
    { lane: 'client', text: `sends POST ${dollars(a.amount)}${a.key === null ? ', no key' : ''}` },
    claimStep(a),
  ];
  if (worked(a)) {
    const work = a.faults.delayMs > 0 ? ` (${a.faults.delayMs} ms)` : '';
    if (a.outcome === 'processor-failed') out.push({ lane: 'server', text: `processor fails${work}`, tone: 'bad' });
    else if (a.outcome === 'pending') out.push({ lane: 'server', text: `charging${work}…` });
    else out.push({ lane: 'server', text: `charges ${dollars(a.amount)}${work}`, tone: 'good' });
    if (a.outcome !== 'pending') {
      const commit =
        a.key === null
          ? a.outcome === 'processor-failed'
            ? 'ledger: no charge'
            : 'ledger: +1 charge'
          : a.outcome === 'processor-failed'
            ? 'commit: failed, retryable'
            : a.outcome === 'declined'
              ? 'commit: failed, final'
              : 'commit: succeeded';
      out.push({ lane: 'store', text: commit });
    }
  }
  switch (a.outcome) {
    case 'pending':
      out.push({ lane: 'client', text: 'waiting…', tone: 'muted' });
      break;
    case 'dropped':
      out.push({ lane: 'client', text: '✕ no answer: the connection died', tone: 'bad' });
      if (a.readBack) {
        out.push({
          lane: 'store',
          text: `read back: ${a.readBack.status}${a.readBack.responseStatus ? ` ${a.readBack.responseStatus}` : ''}`,
          tone: 'good',
          testid: 'read-back',
        });
      }
      break;
    case 'executed':
      out.push({ lane: 'client', text: `← ${a.status ?? ''} charged`, tone: 'good' });
      break;
    case 'replayed':
      out.push({ lane: 'client', text: `← ${a.status ?? ''} replayed, not charged`, tone: 'info' });
      break;
    case 'in-flight':
      out.push({
        lane: 'client',
        text: `← 409 in flight${a.retryAfter ? `, Retry-After ${a.retryAfter} s` : ''}`,
        tone: 'warn',
      });
      break;
    case 'mismatch':
      out.push({ lane: 'client', text: `← ${a.status ?? 400} mismatch`, tone: 'violet' });
      break;
    case 'processor-failed':
      out.push({ lane: 'client', text: `← ${a.status ?? 503} retryable`, tone: 'bad' });
      break;
    case 'declined':
      out.push({ lane: 'client', text: `← ${a.status ?? 402} declined`, tone: 'bad' });
      break;
    case 'error':
      out.push({ lane: 'client', text: `← error ${a.status ?? ''}`, tone: 'bad' });
      break;
  }
  return out;
}

function card(a: Attempt): HTMLElement {
  return h(
    'li',
    { class: `attempt o-${a.outcome}`, 'data-n': a.n, 'data-outcome': a.outcome },
    h(
      'p',
      { class: 'attempt-head' },
      h('strong', {}, `#${a.n} ${a.source}`),
      h('span', { class: 'attempt-latency' }, a.latencyMs === null ? 'in flight' : `${a.latencyMs} ms`),
    ),
    h(
      'ol',
      { class: 'steps', 'aria-label': `#${a.n} ${a.source}: ${describeOutcome(a)}` },
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

/** Attempts of one payment, in order; a race's attempts as one block inside it. */
interface Thread {
  readonly intent: number;
  readonly key: string | null;
  readonly attempts: Attempt[];
}

/**
 * Draws the newest payments, one box each with all its attempts. Returns an element sized to its container (no
 * sideways scroll).
 *
 * @example
 * container.replaceChildren(drawTimeline(attempts))
 */
export function drawTimeline(all: readonly Attempt[]): HTMLElement {
  if (all.length === 0) return h('p', { class: 'empty' }, 'No attempts yet.');
  const every: Thread[] = [];
  for (const a of all) {
    const thread = every.find((t) => t.intent === a.intent);
    if (thread) thread.attempts.push(a);
    else every.push({ intent: a.intent, key: a.key, attempts: [a] });
  }
  // Whole payments only, newest first, so a charge is never shown without its retries (or a retry without its charge).
  const threads: Thread[] = [];
  let drawn = 0;
  for (const thread of [...every].sort((x, y) => (y.attempts.at(-1)?.n ?? 0) - (x.attempts.at(-1)?.n ?? 0))) {
    if (threads.length > 0 && drawn + thread.attempts.length > TIMELINE_MAX) break;
    threads.unshift(thread);
    drawn += thread.attempts.length;
  }
  threads.sort((x, y) => (x.attempts[0]?.n ?? 0) - (y.attempts[0]?.n ?? 0));
  const hidden = every.length - threads.length;
  const list = h(
    'ol',
    { class: 'threads' },
    ...threads.map((thread) => {
      const blocks: HTMLElement[] = [];
      for (let i = 0; i < thread.attempts.length;) {
        const a = thread.attempts[i] as Attempt;
        if (a.group === null) {
          blocks.push(card(a));
          i++;
          continue;
        }
        const race = thread.attempts
          .slice(i)
          .filter((x, j, rest) => x.group === a.group && rest.slice(0, j).every((y) => y.group === a.group));
        i += race.length;
        blocks.push(
          h(
            'li',
            { class: 'race-group', 'data-group': a.group },
            h('p', { class: 'group-label' }, `Race ×${race.length}: sent in one tick`),
            h('ol', { class: 'race-cards' }, ...race.map(card)),
          ),
        );
      }
      return h(
        'li',
        { class: 'thread', 'data-intent': thread.intent },
        h(
          'p',
          { class: 'thread-head' },
          `Payment ${thread.intent} · `,
          thread.key === null
            ? h('span', {}, 'no key')
            : h('code', { title: thread.key }, abbreviate(thread.key, 8, 4)),
        ),
        h('ol', { class: 'cards' }, ...blocks),
      );
    }),
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
 * The last race's requests on one time axis, as measured in the browser: when each was sent and when it was
 * answered. The timeline groups them; this shows that they overlapped. Null when there was no race.
 *
 * @example
 * const chart = drawRaceStrip(attempts, container.clientWidth)
 */
export function drawRaceStrip(all: readonly Attempt[], width: number): SVGSVGElement | null {
  const last = all.findLast((a) => a.group !== null)?.group;
  if (last === undefined || last === null) return null;
  const race = all.filter((a) => a.group === last);
  const now = Date.now();
  const start = Math.min(...race.map((a) => a.sentAt));
  const spread = Math.max(...race.map((a) => a.sentAt)) - start;
  const end = Math.max(...race.map((a) => a.sentAt + (a.latencyMs ?? now - a.sentAt)));
  const span = Math.max(end - start, 1);
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
    const length = Math.max(3, (a.latencyMs ?? now - a.sentAt) * scale);
    const label = a.latencyMs === null ? '…' : `${a.latencyMs} ms · ${describeOutcome(a)}`;
    svg.append(
      s('text', { x: 4, y: top + 13, class: 'foot' }, `#${a.n}`),
      s('rect', { x, y: top + 2, width: length, height: STRIP_ROW - 6, rx: 2, class: `bar o-${a.outcome}` }),
      s('text', { x: Math.min(x + length + 6, width - labelWidth + 6), y: top + 13, class: 'foot' }, label),
    );
  });
  return svg;
}
