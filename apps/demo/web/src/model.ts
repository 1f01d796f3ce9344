/**
 * @module The model page: runs the store's real claim / complete / get through `/v1/model/*` and shows what the
 * engine answered, with the round trips each took.
 */
import { ApiError, accountOf, getJson, labKey, postJson, uuid } from './api.js';
import { byId, h } from './dom.js';
import { abbreviate, clock, relative } from './format.js';
import { raw } from './raw.js';

interface Trip {
  readonly op: string;
  readonly request: unknown;
  readonly response?: unknown;
  readonly error?: unknown;
}

interface ModelRecord {
  readonly pk: string;
  readonly key: string;
  readonly status: 'in_progress' | 'succeeded' | 'failed';
  readonly fingerprint: string;
  readonly id: string;
  readonly token: string;
  readonly claimedAt: number;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
  readonly retryable: boolean | null;
  readonly resultId: string | null;
  readonly responseStatus: number | null;
}

/** One contract call as `/v1/model/*` reports it. */
interface Operation {
  readonly operation: 'claim' | 'complete' | 'get';
  readonly traced: boolean;
  readonly roundTrips: number;
  readonly result: unknown;
  readonly error?: { name?: string; message?: string };
  readonly trips: readonly Trip[];
}

type ClaimValue = { kind: 'claimed' | 'existing'; record: ModelRecord };

interface Info {
  readonly store: string;
  readonly scope: string;
  readonly pk: { pattern: string; stored: string; example: string };
  readonly attributes: {
    source: string;
    fields: ReadonlyArray<{ name: string; type: string; storedAs: string; unit: string; meaning: string }>;
  };
  readonly operations: { claim: string; complete: string; get: string };
  readonly expiringTtlMs: number;
}

const ui = {
  error: byId('model-error', HTMLElement),
  storeName: byId('store-name', HTMLElement),
  scope: byId('scope', HTMLElement),
  pkExample: byId('pk-example', HTMLElement),
  attributes: byId('attributes-body', HTMLTableSectionElement),
  typeSource: byId('type-source', HTMLElement),
  opClaim: byId('op-claim', HTMLElement),
  opComplete: byId('op-complete', HTMLElement),
  opGet: byId('op-get', HTMLElement),
  claimKey: byId('claim-key', HTMLInputElement),
  runClaim: byId('run-claim', HTMLButtonElement),
  outClaim: byId('out-claim', HTMLElement),
  completeKey: byId('complete-key', HTMLInputElement),
  completeToken: byId('complete-token', HTMLInputElement),
  completeOutcome: byId('complete-outcome', HTMLSelectElement),
  runComplete: byId('run-complete', HTMLButtonElement),
  outComplete: byId('out-complete', HTMLElement),
  readKey: byId('read-key', HTMLInputElement),
  runRead: byId('run-read', HTMLButtonElement),
  outRead: byId('out-read', HTMLElement),
  seeded: byId('seeded-body', HTMLTableSectionElement),
  race: byId('race', HTMLButtonElement),
  raceResult: byId('race-result', HTMLElement),
  expiring: byId('expiring', HTMLButtonElement),
  expiringClaim: byId('expiring-claim', HTMLButtonElement),
  expiringRead: byId('expiring-read', HTMLButtonElement),
  expiryClock: byId('expiry-clock', HTMLElement),
  outExpiry: byId('out-expiry', HTMLElement),
};

// ---- Showing one operation ---------------------------------------------------------------------------------------

/** The verdict of a claim, in words, and a class for its colour. */
function claimVerdict(value: ClaimValue | null): { text: string; tone: string } {
  if (!value) return { text: 'no answer', tone: 'bad' };
  if (value.kind === 'claimed')
    return {
      text: `claimed: this caller holds the key (status in_progress, token ${abbreviate(value.record.token, 8, 4)})`,
      tone: 'good',
    };
  return {
    text: `condition failed: the key is taken (the row that stopped it: status ${value.record.status})`,
    tone: 'warn',
  };
}

function verdictOf(op: Operation): { text: string; tone: string } {
  if (op.error) return { text: `error: ${op.error.name ?? ''} ${op.error.message ?? ''}`, tone: 'bad' };
  if (op.operation === 'claim') return claimVerdict(op.result as ClaimValue | null);
  if (op.operation === 'complete') {
    return (op.result as { ok: boolean } | null)?.ok
      ? { text: 'ok: the outcome is written (the token held and the row was in_progress)', tone: 'good' }
      : { text: 'condition failed: no in_progress row held with this token; nothing changed', tone: 'warn' };
  }
  const record = op.result as ModelRecord | null;
  if (!record) return { text: 'no row with this key', tone: 'muted' };
  const expired = record.expiresAt <= Date.now();
  const failed = record.status === 'failed' ? (record.retryable ? ', retryable' : ', final') : '';
  return {
    text: `found: status ${record.status}${failed}${record.responseStatus ? `, response ${record.responseStatus}` : ''}${expired ? ' (expired: a claim would treat it as absent)' : ''}`,
    tone: 'good',
  };
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

/** What refused a losing claim, as `/v1/model/race` reports it. */
interface Refusal {
  readonly trip: number;
  readonly statement: number | null;
  /** What refused the loser: a conditional write's condition, a pre-read, or one in-process step (memory). */
  readonly by: 'write' | 'read' | 'step';
  readonly text: string;
  readonly condition: string | null;
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

/** Renders an operation: its verdict, round trips, the raw requests and replies, and the contract's return value. */
function showOperation(op: Operation, title?: string, refusal: Refusal | null = null): HTMLElement {
  const verdict = verdictOf(op);
  return h(
    'div',
    { class: 'op-result', 'data-operation': op.operation },
    title ? h('h4', {}, title) : null,
    h('p', { class: `verdict ${verdict.tone}` }, verdict.text),
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

function showError(target: HTMLElement, error: unknown): void {
  const message =
    error instanceof ApiError
      ? error.message
      : error instanceof TypeError
        ? 'The server could not be reached.'
        : String(error);
  target.replaceChildren(h('p', { class: 'verdict bad' }, message));
}

/** Disables a button while its request runs. */
async function running(button: HTMLButtonElement, work: () => Promise<void>): Promise<void> {
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  try {
    await work();
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
  }
}

// ---- The three access patterns -----------------------------------------------------------------------------------

ui.runClaim.addEventListener('click', () => {
  void running(ui.runClaim, async () => {
    try {
      const op = await postJson<Operation>('/v1/model/claim', { key: ui.claimKey.value });
      ui.outClaim.replaceChildren(showOperation(op));
      const value = op.result as ClaimValue | null;
      if (value?.kind === 'claimed') {
        // Hand the claim to the second pattern: its token is what makes the completion's write conditional.
        ui.completeKey.value = value.record.key;
        ui.completeToken.value = value.record.token;
      }
    } catch (error) {
      showError(ui.outClaim, error);
    }
  });
});

ui.runComplete.addEventListener('click', () => {
  void running(ui.runComplete, async () => {
    try {
      const op = await postJson<Operation>('/v1/model/complete', {
        key: ui.completeKey.value,
        token: ui.completeToken.value || 'no-token',
        outcome: ui.completeOutcome.value,
      });
      ui.outComplete.replaceChildren(showOperation(op));
      ui.readKey.value = ui.completeKey.value;
      if (!ui.claimKey.value || ui.claimKey.value === ui.completeKey.value)
        ui.claimKey.value = `k-${uuid().slice(0, 8)}`;
    } catch (error) {
      showError(ui.outComplete, error);
    }
  });
});

async function read(key: string, target: HTMLElement): Promise<void> {
  try {
    const op = await getJson<Operation>(`/v1/model/read?key=${encodeURIComponent(key)}`);
    target.replaceChildren(showOperation(op));
  } catch (error) {
    showError(target, error);
  }
}

ui.runRead.addEventListener('click', () => {
  void running(ui.runRead, () => read(ui.readKey.value, ui.outRead));
});

// ---- Seeded rows ---------------------------------------------------------------------------------------------------

async function seed(): Promise<void> {
  const { rows } = await postJson<{ rows: Array<{ key: string; state: string; record: ModelRecord | null }> }>(
    '/v1/model/seed',
  );
  ui.seeded.replaceChildren(
    ...rows.map(({ key, record }) =>
      h(
        'tr',
        { 'data-key': key, 'data-status': record?.status ?? 'missing' },
        h('td', { class: 'c-key' }, h('code', {}, key)),
        h(
          'td',
          { class: 'c-status' },
          h('span', { class: `badge s-${record?.status ?? 'missing'}` }, record?.status ?? 'missing'),
        ),
        h('td', { class: 'c-reclaim' }, reclaimable(record)),
        h('td', { class: 'c-result' }, record?.resultId ? h('code', {}, record.resultId) : '—'),
        h(
          'td',
          { class: 'c-claimed', title: record ? `${record.claimedAt} (epoch ms)` : '' },
          record ? clock(record.claimedAt) : '—',
        ),
        h(
          'td',
          { class: 'c-expires', title: record ? `${record.expiresAt} (epoch ms), ${clock(record.expiresAt)}` : '' },
          record ? relative(record.expiresAt) : '—',
        ),
        h(
          'td',
          { class: 'c-action' },
          h(
            'button',
            {
              type: 'button',
              class: 'small-button',
              'aria-label': `Read ${key}`,
              onclick: () => {
                ui.readKey.value = key;
                ui.readKey.scrollIntoView({ block: 'center' });
                void running(ui.runRead, () => read(key, ui.outRead));
              },
            },
            'Read',
          ),
        ),
      ),
    ),
  );
}

function reclaimable(record: ModelRecord | null): string {
  if (!record) return '—';
  if (record.status === 'succeeded') return 'no: a retry gets the result replayed';
  if (record.status === 'failed')
    return record.retryable ? 'yes: a retry runs the work again' : 'no: final, a retry gets the refusal replayed';
  return `not while its lease holds (${relative(record.leaseExpiresAt)})`;
}

// ---- Race two claims ---------------------------------------------------------------------------------------------

interface Race {
  readonly key: string;
  readonly winners: number;
  readonly barrier: boolean;
  readonly claims: ReadonlyArray<
    Operation & { label: string; verdict: 'won' | 'lost' | 'error'; refusedBy?: Refusal | null }
  >;
}

ui.race.addEventListener('click', () => {
  void running(ui.race, async () => {
    try {
      const race = await postJson<Race>('/v1/model/race');
      const lost = race.claims.find((c) => c.verdict === 'lost');
      const how =
        lost?.refusedBy?.by === 'write'
          ? "refused by the write's own condition"
          : lost?.refusedBy?.by === 'read'
            ? 'turned away by its read'
            : lost?.refusedBy?.by === 'step'
              ? "refused inside the claim's one synchronous step"
              : 'refused';
      const parts: Node[] = [
        h(
          'p',
          { class: 'race-summary', 'data-testid': 'race-summary' },
          'Key ',
          h('code', {}, race.key),
          `: ${race.winners} winner; the other claim was ${how}.`,
          race.barrier ? ' Both had read the key as free before either wrote.' : '',
        ),
        // What refused the loser comes first, above both claims' round trips (on a phone, those run long).
        ...(lost?.refusedBy
          ? [
              h(
                'p',
                { class: 'callout refused-by', 'data-testid': 'refused-by' },
                `Claim ${lost.label}: ${lost.refusedBy.text}`,
              ),
            ]
          : []),
        ...(lost?.refusedBy?.condition
          ? [
              h(
                'div',
                { class: 'refused-condition' },
                h(
                  'p',
                  { class: 'label' },
                  lost.refusedBy.by === 'write'
                    ? 'the condition that refused the write'
                    : 'the read that answered first',
                ),
                h('pre', { class: 'sql' }, h('mark', {}, lost.refusedBy.condition)),
              ),
            ]
          : []),
        h(
          'div',
          { class: 'race-columns' },
          ...race.claims.map((claim) =>
            h(
              'div',
              { class: `race-claim ${claim.verdict}`, 'data-verdict': claim.verdict },
              h(
                'p',
                { class: 'race-label' },
                `Claim ${claim.label}: `,
                h('strong', {}, claim.verdict === 'won' ? 'won' : claim.verdict === 'lost' ? `lost: ${how}` : 'error'),
              ),
              showOperation(claim, undefined, claim.refusedBy ?? null),
            ),
          ),
        ),
      ];
      ui.raceResult.replaceChildren(...parts);
    } catch (error) {
      showError(ui.raceResult, error);
    }
  });
});

// ---- Expiry ------------------------------------------------------------------------------------------------------

/** The expiry demonstration's row as written, and its key (kept after a reclaim, for Read it). */
let expiring: ModelRecord | null = null;
let expiryKey: string | null = null;
let ticker: number | undefined;

function tick(): void {
  if (!expiring) return;
  const left = expiring.expiresAt - Date.now();
  ui.expiryClock.textContent =
    left > 0
      ? `live: expires in ${(left / 1000).toFixed(1)} s`
      : `expired ${(-left / 1000).toFixed(1)} s ago, still stored`;
  ui.expiryClock.dataset.state = left > 0 ? 'live' : 'expired';
}

ui.expiring.addEventListener('click', () => {
  void running(ui.expiring, async () => {
    try {
      const made = await postJson<{ key: string; ttlMs: number; record: ModelRecord | null; steps: Operation[] }>(
        '/v1/model/expiring',
      );
      expiring = made.record;
      expiryKey = made.key;
      ui.expiringClaim.disabled = expiring === null;
      ui.expiringRead.disabled = false;
      ui.outExpiry.replaceChildren(
        h(
          'p',
          { class: 'callout', 'data-testid': 'expiry-note' },
          `Wrote ${made.key} with a ${made.ttlMs / 1000} s TTL. Claim its key now: the live row refuses it. Claim again after the countdown: the claim treats the expired row as absent.`,
        ),
        ...made.steps.map((op, i) =>
          showOperation(op, i === 0 ? `Claim with a ${made.ttlMs / 1000} s TTL` : 'Record the outcome: succeeded'),
        ),
      );
      window.clearInterval(ticker);
      ticker = window.setInterval(tick, 100);
      tick();
    } catch (error) {
      showError(ui.outExpiry, error);
    }
  });
});

ui.expiringClaim.addEventListener('click', () => {
  if (!expiring) return;
  const before = expiring;
  void running(ui.expiringClaim, async () => {
    try {
      const op = await postJson<Operation>('/v1/model/claim', { key: before.key });
      const value = op.result as ClaimValue | null;
      const note =
        value?.kind === 'claimed'
          ? `The expired row counted as absent: claimed afresh with a new record id (${abbreviate(value.record.id, 8, 4)}, was ${abbreviate(before.id, 8, 4)}).`
          : 'Refused: the row is still live, so its key is still taken.';
      ui.outExpiry.replaceChildren(
        h('p', { class: 'callout', 'data-testid': 'expiry-note' }, note),
        showOperation(op, 'Claim its key'),
      );
      if (value?.kind === 'claimed') {
        window.clearInterval(ticker);
        ui.expiryClock.textContent = 'claimed again: a new lease and TTL from now';
        ui.expiryClock.dataset.state = 'reclaimed';
        expiring = null;
        ui.expiringClaim.disabled = true;
      }
    } catch (error) {
      showError(ui.outExpiry, error);
    }
  });
});

ui.expiringRead.addEventListener('click', () => {
  // Always this section's own row, also after it was claimed again (never the key in the third pattern's field).
  const key = expiryKey;
  if (key === null) return;
  void running(ui.expiringRead, () => read(key, ui.outExpiry));
});

// ---- Start -------------------------------------------------------------------------------------------------------

async function start(): Promise<void> {
  try {
    await seed();
    const info = await getJson<Info>('/v1/model');
    ui.storeName.textContent = info.store;
    ui.scope.textContent = info.scope;
    ui.pkExample.textContent = info.pk.example;
    ui.opClaim.textContent = info.operations.claim;
    ui.opComplete.textContent = info.operations.complete;
    ui.opGet.textContent = info.operations.get;
    ui.typeSource.textContent = `Types as ${info.store} stores them: read from ${info.attributes.source}.`;
    ui.attributes.replaceChildren(
      ...info.attributes.fields.map((f) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row', class: 'c-name' }, h('code', {}, f.name)),
          h('td', { class: 'c-type' }, h('code', {}, f.type)),
          h('td', { class: 'c-stored' }, h('code', {}, f.storedAs)),
          h('td', { class: 'c-holds' }, f.unit ? `${f.meaning}; ${f.unit}` : f.meaning),
        ),
      ),
    );
    ui.expiring.textContent = `Write a row with a ${info.expiringTtlMs / 1000} s TTL`;
  } catch (error) {
    ui.error.hidden = false;
    ui.error.textContent =
      error instanceof ApiError && (error.status === 401 || error.status === 404)
        ? 'The model API is off: it runs in lab mode only. Start the demo with IDEM_LAB=1 (npm start does).'
        : `Could not load the model: ${error instanceof Error ? error.message : String(error)}`;
  }
}

ui.claimKey.value = `k-${uuid().slice(0, 8)}`;
ui.scope.textContent = `${accountOf(labKey())}/model`;
void start();
