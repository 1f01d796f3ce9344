/**
 * @module Shows one model operation: the store's reading of it (the verdict, the transition it made), its round
 * trips with the raw requests and replies, and what the contract call returned.
 */
import { ApiError } from './api.js';
import { h } from './dom.js';
import { abbreviate } from './format.js';
import { label, type Lit } from './model-machine.js';
import type { ClaimValue, Operation, Reading, Refusal, Trip } from './model-types.js';
import { raw } from './raw.js';

/** An operation's verdict in words and a class for its colour: the store's reading when there is one. */
function verdictOf(op: Operation): { text: string; tone: string } {
  if (op.error) return { text: `error: ${op.error.name ?? ''} ${op.error.message ?? ''}`, tone: 'bad' };
  const reading = op.reading;
  if (reading) {
    const tone =
      reading.verdict === 'written'
        ? 'good'
        : reading.verdict === 'read'
          ? reading.to === 'absent'
            ? 'muted'
            : 'good'
          : 'warn';
    return { text: reading.text, tone };
  }
  // A race's loser, or an answer the server could not read around: say only what the store returned.
  const value = op.result as ClaimValue | { ok?: boolean } | null;
  if (value && 'kind' in value) {
    return value.kind === 'claimed'
      ? {
          text: `claimed: this caller holds the key (status in_progress, token ${abbreviate(value.record.token, 8, 4)})`,
          tone: 'good',
        }
      : { text: `refused: the key is taken (the row that stopped it: status ${value.record.status})`, tone: 'warn' };
  }
  return { text: `the store answered ${JSON.stringify(value)}`, tone: 'muted' };
}

/** The transition an operation made, in a line under its verdict, pointing at the lit drawing. */
function transitionLine(reading: Reading): HTMLElement {
  const made =
    reading.transition === null
      ? ['no transition: the row stays ', h('strong', {}, reading.to)]
      : reading.verdict === 'read'
        ? ['the read saw ', h('strong', {}, label(reading.transition)), ` (the row is ${reading.to})`]
        : [h('strong', {}, label(reading.transition)), `: ${reading.from} → ${reading.to}`];
  return h(
    'p',
    { class: 'transition-line', 'data-testid': 'transition', 'data-transition': reading.transition ?? 'none' },
    'State machine: ',
    ...made,
    ' · ',
    h('a', { href: '#machine-h' }, 'see it lit'),
  );
}

/** The first line of an SQL statement, shortened, to name it. */
function firstLine(sql: unknown): string {
  const line = String(sql).trim().split('\n')[0] ?? '';
  return line.length > 56 ? `${line.slice(0, 55)}…` : line;
}

/** A statement's result in words: rows returned, rows changed. */
function resultCaption(value: unknown): string {
  if (Array.isArray(value))
    return value.length === 0 ? 'no row' : `${value.length} row${value.length === 1 ? '' : 's'}`;
  const changes =
    (value as { changes?: unknown; rowCount?: unknown } | null)?.changes ??
    (value as { rowCount?: unknown } | null)?.rowCount;
  if (typeof changes === 'number')
    return `${changes} row${changes === 1 ? '' : 's'} ${(value as { rows?: unknown }).rows ? 'returned' : 'changed'}`;
  return '';
}

/** A `<pre>` of `text`, with `mark` (a condition the race result names) highlighted where it occurs. */
function code(text: string, sql = false, mark: string | null = null): HTMLElement {
  const at = mark ? text.indexOf(mark) : -1;
  if (!mark || at < 0) return h('pre', { class: sql ? 'sql' : '' }, text);
  return h(
    'pre',
    { class: sql ? 'sql' : '' },
    text.slice(0, at),
    h('mark', { 'data-testid': 'condition' }, mark),
    text.slice(at + mark.length),
  );
}

/**
 * One round trip: what was sent (SQL statements and their parameters, a command and its arguments, a DynamoDB
 * command's input) and the engine's raw reply. SQL trips of several statements pair each statement with its result.
 */
function showTrip(trip: Trip, i: number, refusal: Refusal | null = null): HTMLElement {
  const refused = refusal?.trip === i + 1 ? refusal : null;
  /** The condition to mark in statement `n` (1-based), or in the whole request when the trip has one. */
  const markIn = (n: number | null) =>
    refused && (refused.statement === null || refused.statement === n) ? refused.condition : null;
  const request = (trip.request ?? {}) as {
    statements?: unknown;
    text?: unknown;
    values?: unknown;
    command?: unknown;
    script?: unknown;
  };
  const statements = Array.isArray(request.statements)
    ? (request.statements as Array<{ sql?: unknown; params?: unknown }>)
    : null;
  const summary = statements
    ? statements.map((st) => firstLine(st.sql)).join('  ;  ')
    : typeof request.text === 'string'
      ? firstLine(request.text)
      : typeof request.command === 'string'
        ? `${request.command}${typeof request.script === 'string' ? ` ${request.script}` : ''}`
        : `${trip.op}(…)`;
  const sent = statements
    ? statements.flatMap((st, n) => [
        h('p', { class: 'label' }, `statement ${n + 1}`),
        code(String(st.sql).trim(), true, markIn(n + 1)),
        st.params === undefined ? null : code(raw(st.params)),
      ])
    : typeof request.text === 'string'
      ? [code(request.text.trim(), true, markIn(null)), request.values === undefined ? null : code(raw(request.values))]
      : [code(raw(trip.request), false, markIn(null))];

  let reply: HTMLElement;
  if (trip.error !== undefined) {
    reply = h(
      'div',
      { 'data-testid': 'raw-response' },
      h('p', { class: 'label bad' }, 'raw engine response: error'),
      h('pre', { class: 'error' }, raw(trip.error)),
    );
  } else if (statements && Array.isArray(trip.response) && trip.response.length === statements.length) {
    const results = trip.response as unknown[];
    reply = h(
      'div',
      { 'data-testid': 'raw-response' },
      h('p', { class: 'label' }, 'raw engine response'),
      ...statements.flatMap((st, n) => [
        h(
          'p',
          { class: 'result-head' },
          `statement ${n + 1} `,
          h('code', {}, firstLine(st.sql)),
          ` → ${resultCaption(results[n])}`,
          refused?.statement === n + 1
            ? h(
                'strong',
                { class: 'refused-note' },
                refused.by === 'write' ? ': refused by its WHERE' : ': the read found the row',
              )
            : '',
        ),
        code(raw(results[n])),
      ]),
    );
  } else {
    const caption = resultCaption((trip.response as { rows?: unknown } | null)?.rows ?? trip.response);
    reply = h(
      'div',
      { 'data-testid': 'raw-response' },
      h('p', { class: 'label' }, `raw engine response${caption ? ` → ${caption}` : ''}`),
      code(raw(trip.response)),
    );
  }
  return h(
    'div',
    { class: refused ? 'trip refused' : 'trip', ...(refused ? { 'data-refused': refused.by } : {}) },
    h(
      'p',
      { class: 'trip-head' },
      `round trip ${i + 1}: ${trip.op}`,
      refused
        ? h(
            'span',
            { class: 'refused-tag' },
            refused.by === 'write'
              ? ' · the write refused here'
              : refused.by === 'step'
                ? ' · refused in this step'
                : ' · refused by the read',
          )
        : '',
    ),
    h(
      'details',
      { class: 'sent', open: refused !== null },
      h('summary', {}, 'request ', h('code', {}, summary)),
      ...sent,
    ),
    reply,
  );
}

/**
 * Renders an operation: its verdict and transition, round trips, the raw requests and replies, and the contract's
 * return value.
 *
 * @example
 * output.replaceChildren(showOperation(op))
 */
export function showOperation(op: Operation, title?: string, refusal: Refusal | null = null): HTMLElement {
  const verdict = verdictOf(op);
  return h(
    'div',
    { class: 'op-result', 'data-operation': op.operation },
    title ? h('h4', {}, title) : null,
    h('p', { class: `verdict ${verdict.tone}` }, verdict.text),
    op.reading ? transitionLine(op.reading) : null,
    h(
      'p',
      { class: 'trips-count' },
      `Round trips: `,
      h('strong', { 'data-testid': 'round-trips' }, String(op.roundTrips)),
      op.traced ? '' : ' (counted by the store)',
    ),
    op.traced
      ? h('div', { class: 'trips' }, ...op.trips.map((trip, i) => showTrip(trip, i, refusal)))
      : h(
          'p',
          { class: 'small muted' },
          `This store does not report its raw requests yet (no onRoundTrip), so there is no raw engine response to show; below is what its ${op.operation}() returned.`,
        ),
    h(
      'details',
      { open: !op.traced },
      h('summary', {}, `What store.${op.operation}() returned`),
      h('pre', {}, raw(op.result)),
    ),
  );
}

/** Shows why a request failed instead of an answer: the server's problem, or that it could not be reached. */
export function showError(target: HTMLElement, error: unknown): void {
  const message =
    error instanceof ApiError
      ? error.message
      : error instanceof TypeError
        ? 'The server could not be reached.'
        : String(error);
  target.replaceChildren(h('p', { class: 'verdict bad' }, message));
}

/**
 * Disables a button while its request runs.
 *
 * @example
 * void running(button, () => read(key))
 */
export async function running(button: HTMLButtonElement, work: () => Promise<void>): Promise<void> {
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  try {
    await work();
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
  }
}

/** Puts operations in an output and lights the last one's transition on the state machine. */
export type Report = (target: HTMLElement, ops: ReadonlyArray<{ op: Operation; title: string }>, lead?: Node) => void;

/**
 * A {@link Report} that lights `machine`: each operation the reader runs shows its verdict and lights what it did.
 *
 * @example
 * const report = reporter(stateMachine(figure))
 * report(output, [{ op, title: 'Claim a request key' }])
 */
export function reporter(machine: { readonly light: (lit: Lit) => void }): Report {
  return (target, ops, lead) => {
    target.replaceChildren(...(lead ? [lead] : []), ...ops.map(({ op, title }) => showOperation(op, title)));
    const last = ops.at(-1);
    if (last?.op.reading) machine.light({ operation: last.title, key: last.op.key, reading: last.op.reading });
  };
}
