/**
 * @module The state machine of one idempotency key, drawn as an inline SVG: six states, every transition labelled.
 * `light(reading)` marks the transition an operation made (read from the store's answer) and the state it left the
 * row in, and says so in words beside the drawing, so nothing is told by colour alone. Two layouts: wide, and tall
 * for a phone, where the wide one's labels would shrink past reading.
 */
import type { ModelState, Reading, TransitionName } from '../../src/model-reading.js';
import { h, s } from './dom.js';

type Layout = 'wide' | 'tall';
type Box = readonly [x: number, y: number, w: number, h: number];
/** A label: its lines, where the first one's baseline sits, and which way the text runs from there. */
type Label = readonly [x: number, y: number, anchor: 'start' | 'middle' | 'end', ...lines: string[]];

interface StateSpec {
  readonly name: string;
  readonly note: string;
  readonly box: Record<Layout, Box>;
}

interface EdgeSpec {
  /** What it does, in words, for the list beside the drawing and the status line. */
  readonly words: string;
  readonly from: ModelState | 'any';
  readonly to: ModelState;
  /** SVG path data, per layout. */
  readonly path: Record<Layout, string>;
  readonly label: Record<Layout, Label>;
}

const STATES: Record<ModelState, StateSpec> = {
  absent: { name: 'absent', note: 'no row', box: { wide: [20, 128, 150, 50], tall: [10, 8, 170, 50] } },
  in_progress: {
    name: 'in_progress',
    note: 'a lease held',
    box: { wide: [340, 128, 170, 64], tall: [125, 190, 150, 64] },
  },
  succeeded: {
    name: 'succeeded',
    note: 'replayed (201)',
    box: { wide: [730, 28, 150, 50], tall: [10, 400, 120, 64] },
  },
  'failed-final': {
    name: 'failed, final',
    note: 'replayed (402)',
    box: { wide: [730, 135, 150, 50], tall: [140, 400, 120, 64] },
  },
  'failed-retryable': {
    name: 'failed, retryable',
    note: 'may run again',
    box: { wide: [730, 262, 150, 50], tall: [270, 400, 120, 64] },
  },
  expired: {
    name: 'expired',
    note: 'counts as absent',
    box: { wide: [20, 276, 150, 50], tall: [230, 8, 160, 50] },
  },
};

const EDGES: Record<TransitionName, EdgeSpec> = {
  'fresh-claim': {
    words: 'fresh claim: no row, so the claim writes in_progress with a new id',
    from: 'absent',
    to: 'in_progress',
    path: { wide: 'M170,142 H340', tall: 'M140,58 V190' },
    label: { wide: [255, 134, 'middle', 'fresh claim (new id)'], tall: [134, 110, 'end', 'fresh claim', '(new id)'] },
  },
  release: {
    words: 'release: the holder declines the work; the row is deleted',
    from: 'in_progress',
    to: 'absent',
    path: { wide: 'M340,166 H170', tall: 'M170,190 V58' },
    label: {
      wide: [255, 182, 'middle', 'release (row deleted)'],
      tall: [176, 110, 'start', 'release', '(row deleted)'],
    },
  },
  renew: {
    words: 'renew: the holder, still working, pushes its lease forward (same token)',
    from: 'in_progress',
    to: 'in_progress',
    path: { wide: 'M365,128 C365,84 405,84 405,128', tall: 'M125,200 C80,200 80,222 125,222' },
    label: { wide: [355, 96, 'end', 'renew (same token)'], tall: [76, 215, 'end', 'renew'] },
  },
  takeover: {
    words: 'lease lapse → takeover: the holder stopped renewing; a retry takes the key with a new token, the same id',
    from: 'in_progress',
    to: 'in_progress',
    path: { wide: 'M430,128 C430,84 470,84 470,128', tall: 'M125,230 C80,230 80,252 125,252' },
    label: {
      wide: [480, 88, 'start', 'lease lapse →', 'takeover (same id)'],
      tall: [76, 242, 'end', 'lapse →', 'takeover'],
    },
  },
  complete: {
    words: 'complete: the work succeeded; the answer is stored for replay',
    from: 'in_progress',
    to: 'succeeded',
    path: { wide: 'M510,140 H700 V53 H730', tall: 'M150,254 L70,400' },
    label: { wide: [605, 132, 'middle', 'complete (2xx)'], tall: [98, 330, 'end', 'complete'] },
  },
  'fail-final': {
    words: 'fail, final: a refusal that a retry would meet again (a declined card); replayed',
    from: 'in_progress',
    to: 'failed-final',
    path: { wide: 'M510,160 H730', tall: 'M200,254 V400' },
    label: { wide: [605, 176, 'middle', 'fail, final (402)'], tall: [206, 320, 'start', 'fail,', 'final'] },
  },
  'fail-retryable': {
    words: 'fail, retryable: the processor was down; a retry may run the work again',
    from: 'in_progress',
    to: 'failed-retryable',
    path: { wide: 'M510,180 H690 V287 H730', tall: 'M250,254 L330,400' },
    label: { wide: [600, 212, 'middle', 'fail, retryable (503)'], tall: [283, 300, 'start', 'fail,', 'retryable'] },
  },
  reclaim: {
    words: 'reclaim: a retry of a retryable failure runs the work again (new token, same id)',
    from: 'failed-retryable',
    to: 'in_progress',
    path: { wide: 'M805,312 V340 H470 V192', tall: 'M370,400 V240 H275' },
    label: {
      wide: [640, 356, 'middle', 'reclaim (same id, new token)'],
      tall: [364, 340, 'end', 'reclaim', '(same id)'],
    },
  },
  expire: {
    words: 'TTL expiry: once expiresAt has passed, the row counts as absent, whatever its state',
    from: 'any',
    to: 'expired',
    path: { wide: 'M400,192 V301 H170', tall: 'M275,210 H385 V58' },
    label: {
      wide: [285, 318, 'middle', 'TTL passes (any state)'],
      tall: [379, 170, 'end', 'TTL passes', '(any state)'],
    },
  },
  'reclaim-expired': {
    words: 'claim after expiry: the claim counts the expired row as absent and writes a fresh one, with a new id',
    from: 'expired',
    to: 'in_progress',
    path: { wide: 'M160,276 V240 H370 V192', tall: 'M300,58 V150 H255 V190' },
    label: {
      wide: [265, 234, 'middle', 'claim after expiry (new id)'],
      tall: [306, 84, 'start', 'claim after', 'expiry', '(new id)'],
    },
  },
  delete: {
    words: 'deleted: a sweep, or the store’s native TTL (Redis), removes the expired row',
    from: 'expired',
    to: 'absent',
    path: { wide: 'M60,276 V178', tall: 'M230,33 H180' },
    label: { wide: [68, 230, 'start', 'deleted', '(sweep or', 'native TTL)'], tall: [205, 26, 'middle', 'deleted'] },
  },
};

const VIEW: Record<Layout, string> = { wide: '0 0 900 366', tall: '0 0 400 470' };

/** What `light` needs to say where the row is now: the operation's name and its reading. */
export interface Lit {
  readonly operation: string;
  readonly key: string;
  readonly reading: Reading;
}

/**
 * Draws the machine into `figure` (an SVG, a status line and the transitions in words) and returns `light`.
 *
 * @example
 * const machine = stateMachine(byId('machine', HTMLElement))
 * machine.light({ operation: 'Claim a request key', key: 'k-1', reading })
 */
export function stateMachine(figure: HTMLElement): { readonly light: (lit: Lit) => void } {
  const narrow = window.matchMedia('(max-width: 640px)');
  let last: Lit | null = null;
  const status = h(
    'p',
    { class: 'machine-status', role: 'status', 'data-testid': 'machine-status' },
    'Nothing run yet: each operation below lights the transition it made here.',
  );
  const list = h(
    'ul',
    { class: 'machine-list small' },
    ...Object.entries(EDGES).map(([name, edge]) =>
      h('li', { 'data-edge': name }, h('strong', {}, label(name as TransitionName)), `: ${edge.words}.`),
    ),
  );
  const holder = h('div', { class: 'machine-drawing' });
  figure.replaceChildren(
    holder,
    status,
    h('details', { class: 'machine-words' }, h('summary', {}, 'Every transition in words'), list),
  );

  const draw = () => {
    const layout: Layout = narrow.matches ? 'tall' : 'wide';
    holder.replaceChildren(drawing(layout));
    if (last) mark(holder, list, last);
  };
  narrow.addEventListener('change', draw);
  draw();

  return {
    light: (lit) => {
      last = lit;
      mark(holder, list, lit);
      status.textContent = sentence(lit);
      status.dataset.transition = lit.reading.transition ?? 'none';
      status.dataset.state = lit.reading.to;
    },
  };
}

/** A transition's short name, as its label and the status line use it. */
export function label(name: TransitionName): string {
  return {
    'fresh-claim': 'fresh claim',
    release: 'release',
    renew: 'renew',
    takeover: 'lease lapse → takeover',
    complete: 'complete',
    'fail-final': 'fail, final',
    'fail-retryable': 'fail, retryable',
    reclaim: 'reclaim',
    expire: 'TTL expiry',
    'reclaim-expired': 'claim after expiry',
    delete: 'deleted',
  }[name];
}

/** The status line: what the last operation did to which key, and where the row is now. */
function sentence({ operation, key, reading }: Lit): string {
  const now = `the row is ${STATES[reading.to].name}`;
  if (reading.verdict === 'read') {
    return reading.transition
      ? `${operation} on ${key}: ${label(reading.transition)} had happened; ${now} (${STATES[reading.to].note}).`
      : `${operation} on ${key}: no transition (a read writes nothing); ${now}.`;
  }
  if (reading.transition === null) {
    return `${operation} on ${key}: no transition, nothing written; ${now}.`;
  }
  return `${operation} on ${key}: ${label(reading.transition)}, ${STATES[reading.from].name} → ${STATES[reading.to].name}; ${now}.`;
}

function mark(holder: HTMLElement, list: HTMLElement, { reading }: Lit): void {
  for (const edge of holder.querySelectorAll<SVGGElement>('[data-edge]')) {
    const on = edge.dataset.edge === reading.transition;
    edge.classList.toggle('lit', on);
    edge.classList.toggle('seen', on && reading.verdict === 'read');
  }
  for (const state of holder.querySelectorAll<SVGGElement>('[data-state]')) {
    state.classList.toggle('lit', state.dataset.state === reading.to);
  }
  for (const item of list.querySelectorAll<HTMLLIElement>('[data-edge]')) {
    if (item.dataset.edge === reading.transition) item.setAttribute('aria-current', 'true');
    else item.removeAttribute('aria-current');
  }
}

function drawing(layout: Layout): SVGSVGElement {
  const arrow = (id: string) =>
    s(
      'marker',
      {
        id,
        viewBox: '0 0 10 10',
        refX: 9,
        refY: 5,
        markerWidth: 10,
        markerHeight: 10,
        markerUnits: 'userSpaceOnUse',
        orient: 'auto',
      },
      s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow-head' }),
    );
  const edges = Object.entries(EDGES).map(([name, edge]) =>
    s(
      'g',
      { class: 'edge', 'data-edge': name },
      s('path', { d: edge.path[layout], 'marker-end': 'url(#machine-arrow)' }),
      text(edge.label[layout], 'edge-label'),
    ),
  );
  const states = Object.entries(STATES).map(([state, spec]) => {
    const [x, y, w, height] = spec.box[layout];
    // On a phone, "failed, retryable" and "failed, final" take two lines.
    const name = layout === 'tall' ? spec.name.replace(', ', ',\n').split('\n') : [spec.name];
    const top = y + height / 2 - 3 - (name.length - 1) * 8;
    return s(
      'g',
      { class: 'state', 'data-state': state },
      s('rect', { x, y, width: w, height, rx: 8 }),
      text([x + w / 2, top, 'middle', ...name], 'state-name'),
      text([x + w / 2, top + 17 + (name.length - 1) * 15, 'middle', spec.note], 'state-note'),
    );
  });
  return s(
    'svg',
    {
      class: `machine ${layout}`,
      viewBox: VIEW[layout],
      role: 'img',
      'aria-label':
        'The state machine of one idempotency key: absent, in_progress, succeeded, failed final, failed retryable and expired, with every transition between them; the same transitions are listed in words below.',
    },
    s('defs', {}, arrow('machine-arrow'), arrow('machine-arrow-lit')),
    ...edges,
    ...states,
  );
}

function text([x, y, anchor, ...lines]: Label, className: string): SVGTextElement {
  return s(
    'text',
    { x, y, 'text-anchor': anchor, class: className },
    ...lines.map((line, i) => s('tspan', { x, dy: i === 0 ? 0 : '1.15em' }, line)),
  );
}
