/**
 * @module The lab page. Every control sends real requests to the demo API as this tab's sandbox account, and every
 * figure is read back from it: `GET /v1/balance`, `GET /v1/idempotency_records`, `GET /v1/charges`.
 */
import { accountOf, ApiError, authHeaders, getJson, labKey, newLabKey, uuid, type Balance, type Charge, type List, type PublicRecord } from './api.js';
import { classify, describeOutcome, type Attempt, type Source } from './attempt.js';
import { byId, h } from './dom.js';
import { abbreviate, clock, dollars, relative } from './format.js';
import { drawLanes, drawRaceStrip, drawTimeline } from './timeline.js';

const CHARGE_CENTS = 50_000;
const TAMPER_CENTS = 500_000;

const ui = {
  charge: byId('charge', HTMLButtonElement),
  retry: byId('retry', HTMLButtonElement),
  race: byId('race', HTMLButtonElement),
  raceSize: byId('race-size', HTMLSelectElement),
  tamper: byId('tamper', HTMLButtonElement),
  newKey: byId('new-key', HTMLButtonElement),
  reset: byId('reset', HTMLButtonElement),
  useKeys: byId('use-keys', HTMLInputElement),
  flaky: byId('flaky', HTMLInputElement),
  fail: byId('fail', HTMLInputElement),
  delay: byId('delay', HTMLSelectElement),
  currentKey: byId('current-key', HTMLElement),
  account: byId('account', HTMLElement),
  charged: byId('charged', HTMLElement),
  chargeCount: byId('charge-count', HTMLElement),
  rows: byId('rows', HTMLElement),
  attemptsCount: byId('attempts-count', HTMLElement),
  attemptsDetail: byId('attempts-detail', HTMLElement),
  recordsBody: byId('records-body', HTMLTableSectionElement),
  recordsEmpty: byId('records-empty', HTMLElement),
  ledgerBody: byId('ledger-body', HTMLTableSectionElement),
  ledgerEmpty: byId('ledger-empty', HTMLElement),
  logBody: byId('log-body', HTMLTableSectionElement),
  logEmpty: byId('log-empty', HTMLElement),
  logScroll: byId('log-scroll', HTMLElement),
  timeline: byId('timeline', HTMLElement),
  lanes: byId('timeline-lanes', HTMLElement),
  raceStrip: byId('race-strip', HTMLElement),
  status: byId('status', HTMLElement),
  labOff: byId('lab-off', HTMLElement),
};

let currentKey = uuid();
/** The last request sent, for Retry: its key and body go again, over a good connection. */
let last: { key: string | null; amount: number } | null = null;
/** The key of the last keyed attempt, for Tamper. */
let lastKeyed: string | null = null;
const attempts: Attempt[] = [];
let pending = 0;
let groups = 0;
let records: readonly PublicRecord[] = [];
/** Bumped by Reset: reads started for an earlier account are dropped. */
let epoch = 0;

// ---- Sending ---------------------------------------------------------------------------------------------------

interface Send {
  readonly source: Source;
  readonly key: string | null;
  readonly amount: number;
  readonly drop: boolean;
  readonly group?: number;
}

/** Sends one `POST /v1/charges` and records what the browser saw. */
async function send({ source, key, amount, drop, group }: Send): Promise<void> {
  const faults = { drop, fail: ui.fail.checked, delayMs: Number(ui.delay.value) };
  const attempt: Attempt = {
    n: attempts.length + 1,
    source,
    key,
    amount,
    faults,
    group: group ?? null,
    sentAt: Date.now(),
    outcome: 'pending',
    status: null,
    latencyMs: null,
    problemType: null,
    retryAfter: null,
    chargeId: null,
    reclaim: key !== null && attempts.some((a) => a.key === key && a.outcome === 'processor-failed'),
    readBack: null,
  };
  attempts.push(attempt);
  last = { key, amount };
  if (key !== null) lastKeyed = key;
  pending++;
  render();
  startPolling();

  const headers: Record<string, string> = { ...authHeaders(), 'content-type': 'application/json' };
  if (key !== null) headers['idempotency-key'] = key;
  if (faults.drop) headers['idem-lab-fault'] = 'drop-after-commit';
  if (faults.fail) headers['idem-lab-fail'] = '503';
  if (faults.delayMs > 0) headers['idem-lab-delay-ms'] = String(faults.delayMs);
  const started = performance.now();
  try {
    const response = await fetch('/v1/charges', {
      method: 'POST',
      headers,
      body: JSON.stringify({ amount, currency: 'usd', source: 'tok_visa' }),
      cache: 'no-store',
      // Chromium silently re-sends a POST when a reused keep-alive connection closes before any answer. A dropped
      // request therefore goes on a connection of its own: requests without credentials use a separate pool, and
      // only these do, and the fault destroys each of their connections. One click is one request.
      ...(faults.drop ? { credentials: 'omit' as const } : {}),
    });
    const text = await response.text();
    attempt.status = response.status;
    attempt.latencyMs = Math.round(performance.now() - started);
    attempt.retryAfter = response.headers.get('retry-after');
    let body: { type?: unknown; id?: unknown } = {};
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      // not JSON: classified by status alone
    }
    attempt.problemType = typeof body.type === 'string' ? body.type : null;
    attempt.chargeId = typeof body.id === 'string' ? body.id : null;
    attempt.outcome = classify(response.status, response.headers.get('idempotent-replayed'), attempt.problemType);
  } catch (error) {
    attempt.latencyMs = Math.round(performance.now() - started);
    attempt.outcome = error instanceof TypeError ? 'dropped' : 'error';
  } finally {
    pending--;
  }
  render();
}

/** Runs a control's requests with the controls locked, then reads every figure back. */
let acting = 0;

/**
 * Runs a control's requests, then reads every figure back. `data-pending` on `<body>` counts the controls still
 * working, so a test (or a person) can tell when the figures are final.
 */
async function act(work: () => Promise<void>): Promise<void> {
  document.body.dataset.pending = String(++acting);
  status('');
  try {
    await work();
  } finally {
    await refresh();
    document.body.dataset.pending = String(--acting);
  }
}

const keyForNext = (): string | null => (ui.useKeys.checked ? currentKey : null);

// ---- Controls --------------------------------------------------------------------------------------------------

ui.charge.addEventListener('click', () => {
  void act(() => send({ source: 'Charge', key: keyForNext(), amount: CHARGE_CENTS, drop: ui.flaky.checked }));
});

ui.retry.addEventListener('click', () => {
  if (!last) return;
  const again = last;
  void act(() => send({ source: 'Retry', key: again.key, amount: again.amount, drop: false }));
});

ui.race.addEventListener('click', () => {
  const n = Number(ui.raceSize.value);
  const key = keyForNext();
  const group = ++groups;
  void act(async () => {
    await Promise.all(Array.from({ length: n }, () => send({ source: 'Race', key, amount: CHARGE_CENTS, drop: false, group })));
  });
});

ui.tamper.addEventListener('click', () => {
  if (lastKeyed === null) return;
  const key = lastKeyed;
  void act(() => send({ source: 'Tamper', key, amount: TAMPER_CENTS, drop: false }));
});

ui.newKey.addEventListener('click', () => {
  currentKey = uuid();
  status(`New Idempotency-Key ${currentKey}: the next Charge $500 is a new payment.`);
  updateControls();
});

ui.reset.addEventListener('click', () => {
  void act(async () => {
    let deleted = 0;
    try {
      const response = await fetch('/v1/lab/reset', { method: 'POST', headers: authHeaders(), cache: 'no-store' });
      if (response.ok) deleted = ((await response.json()) as { deleted_charges: number }).deleted_charges;
    } catch {
      // the account switch below still starts the page over
    }
    epoch++;
    newLabKey();
    currentKey = uuid();
    last = null;
    lastKeyed = null;
    attempts.length = 0;
    records = [];
    render();
    status(`Reset: deleted ${deleted} charge${deleted === 1 ? '' : 's'}, switched to a fresh sandbox account ${accountOf(labKey())}.`);
  });
});

ui.useKeys.addEventListener('change', updateControls);

function updateControls(): void {
  ui.currentKey.textContent = ui.useKeys.checked ? currentKey : '(none: keys are off)';
  ui.account.textContent = accountOf(labKey());
  ui.retry.disabled = last === null;
  ui.tamper.disabled = lastKeyed === null || !ui.useKeys.checked;
  ui.newKey.disabled = !ui.useKeys.checked;
}

function status(message: string): void {
  ui.status.textContent = message;
}

// ---- Reading back ------------------------------------------------------------------------------------------------

let poller: number | undefined;

/** While requests are in flight, read the records every 250 ms so an in_progress row is seen as it is. */
function startPolling(): void {
  if (poller !== undefined) return;
  poller = window.setInterval(() => {
    if (pending === 0) {
      window.clearInterval(poller);
      poller = undefined;
      return;
    }
    void refreshRecords();
  }, 250);
}

async function refreshRecords(): Promise<void> {
  const mine = epoch;
  try {
    const list = await getJson<List<PublicRecord>>('/v1/idempotency_records');
    if (mine !== epoch) return;
    records = list.data;
    renderRecords();
  } catch (error) {
    reportReadError(error);
  }
}

/** Reads every figure back from the server. */
async function refresh(): Promise<void> {
  const mine = epoch;
  try {
    const [balance, list, charges] = await Promise.all([
      getJson<Balance>('/v1/balance'),
      getJson<List<PublicRecord>>('/v1/idempotency_records'),
      getJson<List<Charge>>('/v1/charges?limit=100'),
    ]);
    if (mine !== epoch) return;
    ui.labOff.hidden = true;
    records = list.data;
    // A dropped attempt's server side is known only from the store: read its record back.
    for (const attempt of attempts) {
      if (attempt.outcome !== 'dropped' || attempt.key === null || attempt.readBack) continue;
      const record = records.find((r) => r.key === attempt.key);
      if (record) attempt.readBack = { status: record.status, responseStatus: record.responseStatus };
    }
    ui.charged.textContent = dollars(balance.charged);
    ui.chargeCount.textContent = `${balance.count} succeeded charge${balance.count === 1 ? '' : 's'} in the ledger`;
    renderLedger(charges.data);
    render();
  } catch (error) {
    reportReadError(error);
  }
}

function reportReadError(error: unknown): void {
  if (error instanceof ApiError && error.status === 401) {
    ui.labOff.hidden = false;
    return;
  }
  status(`Could not read the figures back: ${error instanceof Error ? error.message : String(error)}`);
}

// ---- Rendering ---------------------------------------------------------------------------------------------------

function render(): void {
  renderLog();
  renderRecords();
  ui.timeline.replaceChildren(drawTimeline(attempts));
  ui.timeline.scrollLeft = ui.timeline.scrollWidth;
  renderStrip();
  ui.attemptsCount.textContent = String(attempts.length);
  const counts = new Map<string, number>();
  for (const a of attempts) counts.set(describeOutcome(a), (counts.get(describeOutcome(a)) ?? 0) + 1);
  ui.attemptsDetail.textContent = counts.size === 0 ? 'none yet' : [...counts].map(([what, n]) => `${n} ${what}`).join(' · ');
  updateControls();
}

function renderStrip(): void {
  const strip = drawRaceStrip(attempts, ui.raceStrip.clientWidth || 600);
  ui.raceStrip.replaceChildren(...(strip ? [strip] : []));
}

window.addEventListener('resize', renderStrip);

function renderRecords(): void {
  ui.rows.textContent = String(records.length);
  ui.recordsEmpty.hidden = records.length > 0;
  const now = Date.now();
  ui.recordsBody.replaceChildren(
    ...records.map((r) =>
      h(
        'tr',
        { 'data-key': r.key, 'data-status': r.status },
        h('td', { class: 'c-key' }, h('code', { title: r.key }, abbreviate(r.key, 8, 4))),
        h('td', { class: 'c-fingerprint' }, h('code', { title: r.fingerprint }, abbreviate(r.fingerprint, 6, 4))),
        h('td', { class: 'c-status' }, h('span', { class: `badge s-${r.status}` }, r.status), r.status === 'failed' ? (r.retryable ? ' retryable' : ' final') : ''),
        h('td', { class: 'c-response' }, r.responseStatus === null ? '—' : String(r.responseStatus)),
        h('td', { class: 'c-expires', title: new Date(r.expiresAt).toISOString() }, relative(r.expiresAt, now)),
      ),
    ),
  );
}

function renderLedger(charges: readonly Charge[]): void {
  ui.ledgerEmpty.hidden = charges.length > 0;
  ui.ledgerBody.replaceChildren(
    ...charges.map((c) =>
      h(
        'tr',
        {},
        h('td', {}, h('code', { title: c.id }, abbreviate(c.id, 7, 4))),
        h('td', { class: 'num' }, dollars(c.amount)),
        h('td', {}, c.status),
      ),
    ),
  );
}

function renderLog(): void {
  ui.logEmpty.hidden = attempts.length > 0;
  ui.logBody.replaceChildren(
    ...attempts.map((a) => {
      const request = `POST $${(a.amount / 100).toLocaleString('en-US')}${a.faults.drop ? ' · flaky' : ''}${a.faults.fail ? ' · fail 503' : ''}${
        a.faults.delayMs ? ` · slow ${a.faults.delayMs} ms` : ''
      }`;
      return h(
        'tr',
        { 'data-outcome': a.outcome, 'data-n': a.n, class: `o-${a.outcome}` },
        h('td', { class: 'num c-n' }, String(a.n)),
        h('td', { class: 'c-control' }, a.source),
        h('td', { class: 'c-key' }, a.key === null ? h('span', { class: 'muted' }, 'no key') : h('code', { title: a.key }, abbreviate(a.key, 8, 4))),
        h('td', { class: 'c-request' }, request),
        h('td', { class: 'c-outcome' }, h('span', { class: `badge o-${a.outcome}` }, describeOutcome(a)), a.retryAfter ? ` · Retry-After ${a.retryAfter} s` : ''),
        h('td', { class: 'num c-status' }, a.status === null ? '—' : String(a.status)),
        h('td', { class: 'num c-latency', title: `sent ${clock(a.sentAt)}` }, a.latencyMs === null ? '…' : `${a.latencyMs} ms`),
      );
    }),
  );
  ui.logScroll.scrollTop = ui.logScroll.scrollHeight;
}

ui.lanes.replaceChildren(drawLanes());
updateControls();
render();
void act(async () => {});
