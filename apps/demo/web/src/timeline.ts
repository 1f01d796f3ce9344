/**
 * @module The lab's timeline: each observed attempt drawn across three lanes (client, server, store) as SVG.
 * The client's times are measured in the browser; the server's and the store's steps follow from each answer
 * (its status and `Idempotent-Replayed`) and, for a dropped connection, from the record read back afterwards.
 */
import { describeOutcome, type Attempt } from './attempt.js';
import { s } from './dom.js';

const GUTTER = 6;
const COLUMN = 176;
const LANE = { client: 50, server: 116, store: 182 } as const;
/** Text rows under the store lane: the claim's result, the completion's, what was read back. */
const ROW = { claim: 199, commit: 213, readBack: 227 } as const;
const HEIGHT = 262;
/** One request's row in the race's time strip. */
const STRIP_ROW = 14;
/** The newest attempts drawn; the request log keeps them all. */
export const TIMELINE_MAX = 12;

/** What the store did on the attempt's claim, in a few words. */
function claimText(a: Attempt): string {
  switch (a.outcome) {
    case 'executed':
    case 'processor-failed':
    case 'declined':
    case 'dropped':
      return a.reclaim ? 'claim: reclaimed' : 'claim: inserted';
    case 'replayed':
      return 'found: completed';
    case 'in-flight':
      return 'found: in_progress';
    case 'mismatch':
      return 'found: hash differs';
    case 'pending':
      return 'claim…';
    case 'error':
      return 'claim';
  }
}

/** Did the work run on this attempt? */
const worked = (a: Attempt): boolean =>
  a.outcome === 'executed' || a.outcome === 'dropped' || a.outcome === 'processor-failed' || a.outcome === 'declined' || (a.outcome === 'pending' && a.key === null);

/** What the completion wrote (keyed) or the work wrote (keyless). */
function commitText(a: Attempt): string {
  if (a.key === null) return a.outcome === 'processor-failed' ? 'no charge' : 'ledger: +1 charge';
  if (a.outcome === 'processor-failed') return 'commit: failed, retryable';
  if (a.outcome === 'declined') return 'commit: failed, final';
  return 'commit: succeeded';
}

function answerText(a: Attempt): string {
  if (a.outcome === 'replayed') return `${a.status ?? ''} replay`;
  return String(a.status ?? '');
}

/** The foot of a column: latency and a short outcome. */
function footText(a: Attempt): string {
  const short: Record<Attempt['outcome'], string> = {
    pending: 'in flight',
    executed: 'executed',
    replayed: 'replayed',
    'in-flight': '409 in flight',
    mismatch: `${a.status ?? 400} mismatch`,
    dropped: 'dropped',
    'processor-failed': '503 retryable',
    declined: '402 final',
    error: `error ${a.status ?? ''}`,
  };
  return a.latencyMs === null ? short.pending : `${a.latencyMs} ms · ${short[a.outcome]}`;
}

/**
 * The lanes' names, drawn apart from the chart so they stay in view while the chart scrolls sideways.
 *
 * @example
 * labels.replaceChildren(drawLanes())
 */
export function drawLanes(): SVGSVGElement {
  return s(
    'svg',
    { width: 56, height: HEIGHT, viewBox: `0 0 56 ${HEIGHT}`, 'aria-hidden': 'true', class: 'timeline-svg' },
    ...Object.entries(LANE).map(([name, y]) => s('text', { x: 4, y: y + 4, class: 'lane-label' }, name)),
  );
}

/**
 * Draws the newest attempts. Returns an `<svg>` sized to its content (the caller scrolls it on narrow screens).
 *
 * @example
 * container.replaceChildren(drawTimeline(attempts))
 */
export function drawTimeline(all: readonly Attempt[]): SVGSVGElement {
  const attempts = all.slice(-TIMELINE_MAX);
  const width = GUTTER + Math.max(attempts.length, 1) * COLUMN + 8;
  const summary = attempts.map((a) => `#${a.n} ${a.source}: ${describeOutcome(a)}`).join('; ');
  const groups = new Map<number, number[]>();
  attempts.forEach((a, i) => {
    if (a.group !== null) groups.set(a.group, [...(groups.get(a.group) ?? []), i]);
  });
  const height = HEIGHT;
  const svg = s(
    'svg',
    { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-labelledby': 'timeline-title timeline-desc', class: 'timeline-svg' },
    s('title', { id: 'timeline-title' }, 'Timeline of attempts across client, server and store'),
    s('desc', { id: 'timeline-desc' }, summary || 'No attempts yet.'),
    s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 8 8', refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, s('path', { d: 'M0,0 L8,4 L0,8 z', class: 'arrowhead' }))),
  );

  // Race groups first, so their shading sits behind the columns.
  for (const indexes of groups.values()) {
    const first = Math.min(...indexes);
    const last = Math.max(...indexes);
    const x = GUTTER + first * COLUMN + 2;
    svg.append(
      s('rect', { x, y: 4, width: (last - first + 1) * COLUMN - 4, height: height - 8, rx: 8, class: 'race-group' }),
      s('text', { x: x + 8, y: 16, class: 'group-label' }, `Race ×${indexes.length}: sent together`),
    );
  }

  for (const y of Object.values(LANE)) svg.append(s('line', { x1: 0, y1: y, x2: width, y2: y, class: 'lane' }));

  attempts.forEach((a, i) => {
    const x = GUTTER + i * COLUMN;
    const right = x + COLUMN - 10;
    const g = s('g', { class: `attempt o-${a.outcome}`, 'data-n': a.n });
    g.append(s('text', { x: x + 8, y: a.group === null ? 22 : 32, class: 'col-label' }, `#${a.n} ${a.source}${a.key === null ? ' · no key' : ''}`));

    const send = { x: x + 12, y: LANE.client };
    const arrive = { x: x + 34, y: LANE.server };
    g.append(s('circle', { cx: send.x, cy: send.y, r: 4, class: 'dot' }));
    g.append(edge(send.x, send.y, arrive.x, arrive.y));
    g.append(s('text', { x: send.x + 8, y: LANE.client + 18, class: 'step' }, 'POST'));

    let cursor = arrive.x;
    if (a.key !== null) {
      g.append(edge(arrive.x, LANE.server, arrive.x + 10, LANE.store));
      g.append(s('circle', { cx: arrive.x + 10, cy: LANE.store, r: 3.5, class: 'dot' }));
      g.append(s('text', { x: x + 8, y: ROW.claim, class: 'step' }, claimText(a)));
      cursor = arrive.x + 18;
    } else {
      g.append(s('text', { x: x + 8, y: ROW.claim, class: 'step muted' }, 'no key: no record'));
    }

    if (worked(a)) {
      const w1 = cursor + 4;
      const w2 = x + 112;
      g.append(s('rect', { x: w1, y: LANE.server - 7, width: w2 - w1, height: 14, rx: 3, class: 'work' }));
      g.append(s('text', { x: w1, y: LANE.server - 12, class: 'step' }, a.faults.delayMs > 0 ? `work ${a.faults.delayMs} ms` : 'work'));
      if (a.outcome !== 'pending') {
        if (a.key !== null) {
          g.append(edge(w2, LANE.server, w2 + 8, LANE.store));
          g.append(s('circle', { cx: w2 + 8, cy: LANE.store, r: 3.5, class: 'dot commit' }));
        }
        g.append(s('text', { x: right, y: ROW.commit, class: 'step', 'text-anchor': 'end' }, commitText(a)));
      }
      cursor = w2 + 10;
    }

    const from = { x: Math.max(cursor, x + 124), y: LANE.server };
    const to = { x: right, y: LANE.client };
    if (a.outcome === 'pending') {
      g.append(s('text', { x: from.x, y: LANE.server + 4, class: 'step' }, '…'));
    } else if (a.outcome === 'dropped') {
      const mid = { x: (from.x + to.x) / 2, y: (from.y + to.y) / 2 };
      g.append(s('line', { x1: from.x, y1: from.y, x2: mid.x, y2: mid.y, class: 'edge broken' }));
      g.append(s('path', { d: `M${mid.x - 6},${mid.y - 6} L${mid.x + 6},${mid.y + 6} M${mid.x + 6},${mid.y - 6} L${mid.x - 6},${mid.y + 6}`, class: 'cross' }));
      g.append(s('text', { x: right, y: LANE.client - 8, class: 'step strong', 'text-anchor': 'end' }, 'no answer'));
      if (a.readBack) {
        const text = `read back: ${a.readBack.status}${a.readBack.responseStatus ? ` ${a.readBack.responseStatus}` : ''}`;
        g.append(s('text', { x: right, y: ROW.readBack, class: 'step readback', 'text-anchor': 'end' }, text));
      }
    } else {
      g.append(edge(from.x, from.y, to.x, to.y));
      g.append(s('text', { x: right, y: LANE.client - 8, class: 'step strong', 'text-anchor': 'end' }, answerText(a)));
    }

    g.append(s('text', { x: x + 8, y: HEIGHT - 12, class: 'foot' }, footText(a)));
    g.append(s('title', {}, `#${a.n} ${a.source}: ${describeOutcome(a)}${a.key ? `, key ${a.key}` : ', no key'}`));
    svg.append(g);
  });

  if (attempts.length === 0) {
    svg.append(s('text', { x: GUTTER + 8, y: LANE.server - 12, class: 'step muted' }, 'No attempts yet.'));
  }
  return svg;
}

/**
 * The last race's requests on one time axis, as measured in the browser: when each was sent and when it was
 * answered. The timeline draws them side by side; this shows that they overlapped. Null when there was no race.
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
  const end = Math.max(...race.map((a) => a.sentAt + (a.latencyMs ?? now - a.sentAt)));
  const span = Math.max(end - start, 1);
  const left = 44;
  const scale = Math.max(width - left - 140, 40) / span;
  const height = 26 + race.length * STRIP_ROW;
  const svg = s(
    'svg',
    { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `The last race in real time: ${race.length} requests over ${span} ms`, class: 'timeline-svg' },
    s('text', { x: 4, y: 14, class: 'group-label' }, `Race ×${race.length} in real time: sent together, ${span} ms in all`),
  );
  race.forEach((a, i) => {
    const top = 22 + i * STRIP_ROW;
    const x = left + (a.sentAt - start) * scale;
    const length = Math.max(3, (a.latencyMs ?? now - a.sentAt) * scale);
    svg.append(
      s('text', { x: 4, y: top + 9, class: 'foot' }, `#${a.n}`),
      s('rect', { x, y: top, width: length, height: STRIP_ROW - 4, rx: 2, class: `bar o-${a.outcome}` }),
      s('text', { x: x + length + 4, y: top + 9, class: 'foot' }, a.latencyMs === null ? '…' : `${a.latencyMs} ms · ${footText(a).split(' · ')[1] ?? ''}`),
    );
  });
  return svg;
}

function edge(x1: number, y1: number, x2: number, y2: number): SVGLineElement {
  return s('line', { x1, y1, x2, y2, class: 'edge', 'marker-end': 'url(#arrow)' });
}
