/**
 * @module The lab page. Every control sends real requests to the demo API as this tab's sandbox account, and every
 * figure is read back from it: `GET /v1/balance`, `GET /v1/idempotency_records`, `GET /v1/charges`.
 */
import {
  accountOf,
  ApiError,
  authHeaders,
  getJson,
  labKey,
  newLabKey,
  uuid,
  type Balance,
  type Charge,
  type List,
  type PublicRecord,
} from './api.js';
import { classify, describeOutcome, type Attempt, type Faults, type Source } from './attempt.js';
import { byId, h } from './dom.js';
import { abbreviate, clock, dollars, plural, relative } from './format.js';
import { narrateOne, narrateRace } from './narrate.js';
import { drawRaceStrip, drawTimeline } from './timeline.js';

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
  raceStrip: byId('race-strip', HTMLElement),
  narration: byId('narration', HTMLElement),
  intended: byId('intended', HTMLElement),
  intendedStat: byId('intended-stat', HTMLElement),
  chargedStat: byId('charged-stat', HTMLElement),
  callout: byId('charge-callout', HTMLElement),
  showReplay: byId('show-replay', HTMLButtonElement),
  show409: byId('show-409', HTMLButtonElement),
  showFailed: byId('show-failed', HTMLButtonElement),
  showDouble: byId('show-double', HTMLButtonElement),
  labOff: byId('lab-off', HTMLElement),
};

let currentKey = uuid();
/** The last request sent, for Retry: its key, body and payment go again, over a good connection. */
let last: { key: string | null; amount: number; intent: number } | null = null;
/** The key of the last keyed attempt, for Tamper. */
let lastKeyed: string | null = null;
const attempts: Attempt[] = [];
let pending = 0;
let groups = 0;
let records: readonly PublicRecord[] = [];
/** Bumped by Reset: reads started for an earlier account are dropped. */
let epoch = 0;
/** What the person meant to pay: each payment (intent) once, at its first amount. */
const intents = new Map<number, number>();
const intentOfKey = new Map<string, number>();
/** Cents charged, as last read back from `GET /v1/balance`. */
let charged = 0;

function intentFor(key: string | null, amount: number): number {
  const known = key === null ? undefined : intentOfKey.get(key);
  if (known !== undefined) return known;
  const intent = intents.size + 1;
  intents.set(intent, amount);
  if (key !== null) intentOfKey.set(key, intent);
  return intent;
}

// ---- Sending ---------------------------------------------------------------------------------------------------

interface Send {
  readonly source: Source;
  readonly key: string | null;
  readonly amount: number;
  readonly intent: number;
  readonly faults: Faults;
  readonly group?: number;
}

/** The faults the toggles ask for; `drop` only where the control sends over the flaky connection. */
const toggles = (drop: boolean): Faults => ({ drop, fail: ui.fail.checked, delayMs: Number(ui.delay.value) });

/**
 * Sends requests together: every attempt and its request are built first, then all are sent in one tick, and the
 * page is redrawn only after, so a race's requests really leave at the same moment. Resolves once all are answered.
 */
async function sendAll(specs: readonly Send[]): Promise<Attempt[]> {
  const built = specs.map(({ source, key, amount, intent, faults, group }) => {
    const attempt: Attempt = {
      n: attempts.length + 1,
      source,
      key,
      amount,
      intent,
      faults,
      group: group ?? null,
      sentAt: 0,
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
    const headers: Record<string, string> = { ...authHeaders(), 'content-type': 'application/json' };
    if (key !== null) headers['idempotency-key'] = key;
    if (faults.drop) headers['idem-lab-fault'] = 'drop-after-commit';
    if (faults.fail) headers['idem-lab-fail'] = '503';
    if (faults.delayMs > 0) headers['idem-lab-delay-ms'] = String(faults.delayMs);
    const init: RequestInit = {
      method: 'POST',
      headers,
      body: JSON.stringify({ amount, currency: 'usd', source: 'tok_visa' }),
      cache: 'no-store',
      // Chromium silently re-sends a POST when a reused keep-alive connection closes before any answer. A dropped
      // request therefore goes on a connection of its own: requests without credentials use a separate pool, and
      // only these do, and the fault destroys each of their connections. One click is one request.
      ...(faults.drop ? { credentials: 'omit' as const } : {}),
    };
    return { attempt, init };
  });
  const last = specs.at(-1);
  if (last) {
    const { key, amount, intent } = last;
    lastSent(key, amount, intent);
  }
  pending += built.length;
  const started = performance.now();
  const answers = built.map(({ attempt, init }) => {
    attempt.sentAt = Date.now();
    return fetch('/v1/charges', init);
  });
  render();
  startPolling();
  await Promise.all(built.map(({ attempt }, i) => settle(attempt, answers[i] as Promise<Response>, started)));
  return built.map(({ attempt }) => attempt);
}

function lastSent(key: string | null, amount: number, intent: number): void {
  last = { key, amount, intent };
  if (key !== null) lastKeyed = key;
}

/** Waits for one answer and records what the browser saw. */
async function settle(attempt: Attempt, answer: Promise<Response>, started: number): Promise<void> {
  try {
    const response = await answer;
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

const send = async (spec: Send): Promise<Attempt> => (await sendAll([spec]))[0] as Attempt;

let acting = 0;
/** Clicks so far: only the latest one narrates, so a slow demo finishing late cannot speak over a newer click. */
let clicks = 0;

/**
 * Runs a control's requests, then reads every figure back, then says what happened. `data-pending` on `<body>`
 * counts the controls still working, so a test (or a person) can tell when the figures and the narration are final.
 * While anything runs, the guided demos and Reset wait (`aria-busy`): they would otherwise overlap, or move to a new
 * sandbox account while a demo is still sending to the old one.
 */
async function act(work: () => Promise<string | null>): Promise<void> {
  const mine = ++clicks;
  const started = epoch;
  document.body.dataset.pending = String(++acting);
  busy(true);
  let told: string | null = null;
  try {
    told = await work();
  } catch (error) {
    told = `Something went wrong: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    await refresh();
    // Reset moves `epoch` itself; any other action that saw a Reset happen meanwhile has nothing true to say.
    const current = mine === clicks && (epoch === started || told?.startsWith('Reset:') === true);
    if (told !== null && current) narrate(told);
    document.body.dataset.pending = String(--acting);
    if (acting === 0) busy(false);
    renderIntended();
  }
}

/** Guided demos and Reset are unavailable while a control runs. */
function busy(on: boolean): void {
  document.body.setAttribute('aria-busy', String(on));
  for (const [button] of guides) button.disabled = on;
  ui.reset.disabled = on;
}

const keyForNext = (): string | null => (ui.useKeys.checked ? currentKey : null);
const earlierThan = (a: Attempt) => attempts.slice(0, a.n - 1);
const tell = (a: Attempt) => narrateOne(a, earlierThan(a));

// ---- Controls --------------------------------------------------------------------------------------------------

ui.charge.addEventListener('click', () => {
  const key = keyForNext();
  void act(async () =>
    tell(
      await send({
        source: 'Charge',
        key,
        amount: CHARGE_CENTS,
        intent: intentFor(key, CHARGE_CENTS),
        faults: toggles(ui.flaky.checked),
      }),
    ),
  );
});

ui.retry.addEventListener('click', () => {
  if (!last) return;
  const again = last;
  void act(async () =>
    tell(
      await send({
        source: 'Retry',
        key: again.key,
        amount: again.amount,
        intent: again.intent,
        faults: toggles(false),
      }),
    ),
  );
});

ui.race.addEventListener('click', () => {
  const n = Number(ui.raceSize.value);
  const key = keyForNext();
  const group = ++groups;
  const intent = key === null ? intentFor(null, CHARGE_CENTS) : intentFor(key, CHARGE_CENTS);
  const faults = toggles(false);
  void act(async () =>
    narrateRace(
      await sendAll(
        Array.from({ length: n }, () => ({
          source: 'Race' as const,
          key,
          amount: CHARGE_CENTS,
          intent,
          faults,
          group,
        })),
      ),
    ),
  );
});

ui.tamper.addEventListener('click', () => {
  if (lastKeyed === null) return;
  const key = lastKeyed;
  void act(async () =>
    tell(
      await send({
        source: 'Tamper',
        key,
        amount: TAMPER_CENTS,
        intent: intentFor(key, TAMPER_CENTS),
        faults: toggles(false),
      }),
    ),
  );
});

ui.newKey.addEventListener('click', () => {
  currentKey = uuid();
  narrate(
    `New Idempotency-Key ${abbreviate(currentKey, 8, 4)}: the next Charge $500 is a new payment, and a Race on it shows 409s.`,
  );
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
    intents.clear();
    intentOfKey.clear();
    records = [];
    render();
    return `Reset: deleted ${plural(deleted, 'charge')} and moved to a fresh sandbox account, ${accountOf(labKey())}. Nothing is charged and no key is stored.`;
  });
});

ui.useKeys.addEventListener('change', updateControls);

// ---- Guided: one click to each state -------------------------------------------------------------------------

/** Polls this account's records until the key's row is `in_progress` (the first attempt holds it). */
async function heldInProgress(key: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const list = await getJson<List<PublicRecord>>('/v1/idempotency_records');
    if (list.data.some((r) => r.key === key && r.status === 'in_progress')) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the first attempt never held key ${key}`);
}

const QUICK: Faults = { drop: false, fail: false, delayMs: 0 };

const guides: ReadonlyArray<[HTMLButtonElement, () => Promise<string>]> = [
  [
    ui.showReplay,
    async () => {
      const key = uuid();
      const intent = intentFor(key, CHARGE_CENTS);
      await send({ source: 'Charge', key, amount: CHARGE_CENTS, intent, faults: { ...QUICK, drop: true } });
      await refresh();
      const retry = await send({ source: 'Retry', key, amount: CHARGE_CENTS, intent, faults: QUICK });
      return retry.outcome === 'replayed'
        ? `The server charged $500.00 and committed, but the connection died before the answer reached you. Your retry with the same key got the stored ${retry.status ?? 201} back, marked as a replay: charged once.`
        : tell(retry);
    },
  ],
  [
    ui.show409,
    async () => {
      const key = uuid();
      const intent = intentFor(key, CHARGE_CENTS);
      const first = send({ source: 'Charge', key, amount: CHARGE_CENTS, intent, faults: { ...QUICK, delayMs: 1_000 } });
      await heldInProgress(key);
      const retry = await send({ source: 'Retry', key, amount: CHARGE_CENTS, intent, faults: QUICK });
      const original = await first;
      return retry.outcome === 'in-flight' && original.outcome === 'executed'
        ? `Your retry arrived while the first attempt still held the key (its processor takes 1 s), so the server answered 409${retry.retryAfter ? ` with Retry-After ${retry.retryAfter} s` : ''} instead of charging again. The first attempt then finished: $500.00 charged once.`
        : `${tell(retry)} ${tell(original)}`;
    },
  ],
  [
    ui.showFailed,
    async () => {
      const key = uuid();
      const intent = intentFor(key, CHARGE_CENTS);
      const failed = await send({
        source: 'Charge',
        key,
        amount: CHARGE_CENTS,
        intent,
        faults: { ...QUICK, fail: true },
      });
      await refresh();
      const retry = await send({ source: 'Retry', key, amount: CHARGE_CENTS, intent, faults: QUICK });
      return failed.outcome === 'processor-failed' && retry.outcome === 'executed'
        ? 'The processor failed, so the server answered 503 and marked the key failed but retryable. Your retry with the same key reclaimed it and charged $500.00: once.'
        : `${tell(failed)} ${tell(retry)}`;
    },
  ],
  [
    ui.showDouble,
    async () => {
      const intent = intentFor(null, CHARGE_CENTS);
      await send({ source: 'Charge', key: null, amount: CHARGE_CENTS, intent, faults: { ...QUICK, drop: true } });
      await refresh();
      const retry = await send({ source: 'Retry', key: null, amount: CHARGE_CENTS, intent, faults: QUICK });
      return retry.outcome === 'executed'
        ? 'Without a key, the server could not tell your retry from a new payment: the dropped charge had already gone through, so the retry charged $500.00 a second time.'
        : tell(retry);
    },
  ],
];

for (const [button, run] of guides) button.addEventListener('click', () => void act(run));

function updateControls(): void {
  ui.currentKey.textContent = ui.useKeys.checked ? currentKey : '(none: keys are off)';
  ui.account.textContent = accountOf(labKey());
  ui.retry.disabled = last === null;
  ui.tamper.disabled = lastKeyed === null || !ui.useKeys.checked;
  ui.newKey.disabled = !ui.useKeys.checked;
}

function narrate(message: string): void {
  ui.narration.textContent = message;
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
    charged = balance.charged;
    ui.charged.textContent = dollars(balance.charged);
    ui.chargeCount.textContent = `${plural(balance.count, 'succeeded charge')} in the ledger`;
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
  narrate(`Could not read the figures back: ${error instanceof Error ? error.message : String(error)}`);
}

// ---- Rendering ---------------------------------------------------------------------------------------------------

function render(): void {
  renderLog();
  renderRecords();
  ui.timeline.replaceChildren(drawTimeline(attempts));
  renderStrip();
  ui.attemptsCount.textContent = String(attempts.length);
  const counts = new Map<string, number>();
  for (const a of attempts) counts.set(describeOutcome(a), (counts.get(describeOutcome(a)) ?? 0) + 1);
  // The outcome first, then its count: "409 in flight: 4", never "4 409 in flight".
  ui.attemptsDetail.textContent =
    counts.size === 0 ? 'none yet' : [...counts].map(([what, n]) => `${what}: ${n}`).join(' · ');
  renderIntended();
  updateControls();
}

/**
 * What the person meant to pay beside what was charged. They are compared only once every request has been
 * answered and the balance read back; when they differ, both turn red and one line says why.
 */
function renderIntended(): void {
  const intended = [...intents.values()].reduce((sum, cents) => sum + cents, 0);
  ui.intended.textContent = dollars(intended);
  const settled = acting === 0 && pending === 0;
  const differ = settled && intended !== charged;
  ui.intendedStat.classList.toggle('differs', differ);
  ui.chargedStat.classList.toggle('differs', differ);
  ui.callout.hidden = !differ;
  if (!differ) return;
  ui.callout.textContent =
    charged > intended
      ? `Charged ${dollars(charged - intended)} more than you meant to pay: without a key, a repeated request ran the charge again.`
      : `${dollars(intended - charged)} you meant to pay has not been charged yet: its attempt failed. Press Retry.`;
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
        h(
          'td',
          { class: 'c-key' },
          a.key === null
            ? h('span', { class: 'muted' }, 'no key')
            : h('code', { title: a.key }, abbreviate(a.key, 8, 4)),
        ),
        h('td', { class: 'c-request' }, request),
        h(
          'td',
          { class: 'c-outcome' },
          h('span', { class: `badge o-${a.outcome}` }, describeOutcome(a)),
          a.retryAfter ? ` · Retry-After ${a.retryAfter} s` : '',
        ),
        h('td', { class: 'num c-status' }, a.status === null ? '—' : String(a.status)),
        h(
          'td',
          { class: 'num c-latency', title: `sent ${clock(a.sentAt)}` },
          a.latencyMs === null ? '…' : `${a.latencyMs} ms`,
        ),
      );
    }),
  );
  ui.logScroll.scrollTop = ui.logScroll.scrollHeight;
}

updateControls();
render();
void act(async () => null);
