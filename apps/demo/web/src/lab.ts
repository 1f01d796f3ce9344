/**
 * @module The lab page. Every control sends real requests to the demo API as this tab's sandbox account; every
 * figure, sentence and card is read back from the server afterwards (`GET /v1/lab/history`, `/v1/balance`,
 * `/v1/idempotency_records`), so the page says only what the server reports, and the same after a reload.
 */
import { accountOf, authHeaders, labKey, newLabKey, uuid } from './api.js';
import { settled, type Attempt } from './attempt.js';
import { byId } from './dom.js';
import { abbreviate, plural } from './format.js';
import { CHARGE_CENTS, GUIDES, TAMPER_CENTS, type Runner } from './guided.js';
import { busyRequests, forget, payments, refresh, state, track, type Payment } from './history.js';
import { tell, tellOne, type Told } from './narrate.js';
import { render, renderStrip } from './render.js';
import { send, sendAll, type Spec } from './send.js';

const ui = {
  charge: byId('charge', HTMLButtonElement),
  retry: byId('retry', HTMLButtonElement),
  race: byId('race', HTMLButtonElement),
  raceSize: byId('race-size', HTMLSelectElement),
  tamper: byId('tamper', HTMLButtonElement),
  newKey: byId('new-key', HTMLButtonElement),
  reset: byId('reset', HTMLButtonElement),
  useKeys: byId('use-keys', HTMLInputElement),
  autoRetry: byId('auto-retry', HTMLInputElement),
  flaky: byId('flaky', HTMLInputElement),
  fail: byId('fail', HTMLInputElement),
  delay: byId('delay', HTMLSelectElement),
  keyless: byId('keyless-processor', HTMLInputElement),
  takeover: byId('takeover', HTMLSelectElement),
  currentKey: byId('current-key', HTMLElement),
  account: byId('account', HTMLElement),
  narration: byId('narration', HTMLElement),
};
const guides = GUIDES.map(([id, run]) => [byId(id, HTMLButtonElement), run] as const);

let currentKey = uuid();
/** The last request sent by a control, for Retry (same key, body and payment) and Tamper (its key, another amount). */
let last: Spec | null = null;
let lastKeyed: Spec | null = null;

const paymentOf = (a: Attempt): Payment | undefined => payments().list.find((p) => p.id === a.payment);
const newPayment = (): string => `pay_${uuid().slice(0, 8)}`;
/** The payment a keyed request belongs to: the one its key was first sent for, or a new one. */
const paymentForKey = (key: string): string => state.attempts.find((a) => a.key === key)?.payment ?? newPayment();

function narrate(told: Told): void {
  ui.narration.textContent = told.text;
  ui.narration.dataset.claims = JSON.stringify(told.claims);
}

// ---- Acting: send, read back, then say ----------------------------------------------------------------------------

let acting = 0;
/** What the controls finished so far have to say, by click, until the page is idle and says it all at once. */
const unsaid: Array<{ readonly click: number; readonly told: () => Told }> = [];
let clicks = 0;
let scheduled = false;

/** Redraws once the current synchronous run is over (a race's requests all leave before the first redraw). */
function redraw(): void {
  if (scheduled) return;
  scheduled = true;
  queueMicrotask(() => {
    scheduled = false;
    render();
    updateControls();
  });
}

/** Records a request as it is sent, and redraws as it is answered; `into` collects a control's requests. */
const observe =
  (into: Attempt[]) =>
  (attempt: Attempt, phase: 'sent' | 'answered'): void => {
    if (phase === 'sent') {
      track(attempt);
      into.push(attempt);
      poll();
    }
    redraw();
  };

/** Several controls' sentences, in the order they were clicked. */
function together(told: readonly Told[]): Told {
  return {
    text: told.map((t, i) => (i === 0 ? t.text : `Then: ${t.text}`)).join(' '),
    claims: told.flatMap((t) => t.claims),
  };
}

/**
 * Runs a control's requests, then reads everything back. Once no control is working any more, the page says what
 * the server reports for every control finished since it last spoke (a double click is two requests, and both are
 * told). `data-pending` on `<body>` counts the controls still working, so a test (or a person) can tell when the
 * figures and the narration are final. While anything runs, the guided runs and Reset wait (`aria-busy`).
 */
async function act(work: () => Promise<(() => Told) | null>): Promise<void> {
  const mine = ++clicks;
  document.body.dataset.pending = String(++acting);
  busy(true);
  try {
    const told = await work();
    if (told) unsaid.push({ click: mine, told });
  } catch (error) {
    unsaid.push({
      click: mine,
      told: () => ({ text: `Something went wrong in this page: ${String(error)}`, claims: [] }),
    });
  } finally {
    const read = await refresh();
    if (acting === 1 && unsaid.length > 0) {
      const told = together(
        unsaid
          .splice(0)
          .sort((x, y) => x.click - y.click)
          .map((u) => u.told()),
      );
      narrate(read || state.unreachable === null ? told : unreachable(told));
    }
    document.body.dataset.pending = String(--acting);
    if (acting === 0) busy(false);
    render();
    updateControls();
  }
}

/** A sentence told while the server could not be read: what was read before stands, and nothing new is claimed. */
const unreachable = (told: Told): Told =>
  told.claims.every((c) => c.kind === 'unknown')
    ? told
    : {
        text: `${told.text} (The server could not be read just now: the figures are from the last read.)`,
        claims: told.claims,
      };

function busy(on: boolean): void {
  document.body.setAttribute('aria-busy', String(on));
  for (const [button] of guides) button.disabled = on;
  ui.reset.disabled = on;
}

/** Sends specs (one, or a race's) with the toggles' client policy; returns what they sent, for the narration. */
async function sendSpecs(specs: readonly Spec[]): Promise<() => Told> {
  const sent: Attempt[] = [];
  const [first] = specs;
  if (first) {
    last = first;
    if (first.key !== null) lastKeyed = first;
  }
  await sendAll(specs, { autoRetry: ui.autoRetry.checked, signal: retrying.signal }, observe(sent));
  return () => tell(sent, paymentOf);
}

/** Aborted when Auto-retry is switched off: the client's pending retries stop there. */
let retrying = new AbortController();
ui.autoRetry.addEventListener('change', () => {
  if (ui.autoRetry.checked) return;
  retrying.abort(new Error('Auto-retry was switched off'));
  retrying = new AbortController();
});

const faults = (drop: boolean) => ({
  drop,
  crash: false,
  fail: ui.fail.checked,
  delayMs: Number(ui.delay.value),
});

/** The takeover switches as set now: sent with every request (send.ts). */
const switches = (): NonNullable<Spec['takeover']> => ({
  takeover: ui.takeover.value as NonNullable<Spec['takeover']>['takeover'],
  keyless: ui.keyless.checked,
});

const charge = (control: string, extra: Partial<Spec> = {}): Spec => {
  const key = ui.useKeys.checked ? currentKey : null;
  return {
    control,
    payment: key === null ? newPayment() : paymentForKey(key),
    group: null,
    key,
    amount: CHARGE_CENTS,
    source: 'tok_visa',
    faults: faults(false),
    takeover: switches(),
    ...extra,
  };
};

// ---- Controls ------------------------------------------------------------------------------------------------------

ui.charge.addEventListener(
  'click',
  () => void act(() => sendSpecs([charge('Charge', { faults: faults(ui.flaky.checked) })])),
);

ui.retry.addEventListener('click', () => {
  if (last) {
    const again: Spec = { ...last, control: 'Retry', group: null, faults: faults(false), takeover: switches() };
    void act(() => sendSpecs([again]));
  }
});

ui.race.addEventListener('click', () => {
  const one = charge('Race', { group: uuid().slice(0, 8) });
  void act(() => sendSpecs(Array.from({ length: Number(ui.raceSize.value) }, () => one)));
});

ui.tamper.addEventListener('click', () => {
  if (lastKeyed) {
    const other: Spec = { ...lastKeyed, control: 'Tamper', group: null, amount: TAMPER_CENTS, faults: faults(false) };
    void act(() => sendSpecs([other]));
  }
});

ui.newKey.addEventListener('click', () => {
  currentKey = uuid();
  narrate({
    text: `New Idempotency-Key ${abbreviate(currentKey, 8, 4)}: the next Charge $500 is a new payment, and a Race on it shows 409s.`,
    claims: [],
  });
  updateControls();
});

ui.reset.addEventListener('click', () => {
  void act(async () => {
    let deleted: number | null = null;
    try {
      const response = await fetch('/v1/lab/reset', { method: 'POST', headers: authHeaders(), cache: 'no-store' });
      if (response.status === 409) {
        // Requests of this account still run (another tab's): nothing was deleted, and the page stays on it.
        const { detail } = (await response.json()) as { detail: string };
        return () => ({ text: `Reset refused, nothing deleted: ${detail}`, claims: [] });
      }
      if (response.ok) deleted = ((await response.json()) as { deleted_charges: number }).deleted_charges;
    } catch {
      // the account switch below still starts the page over
    }
    forget();
    newLabKey();
    currentKey = uuid();
    last = null;
    lastKeyed = null;
    const what =
      deleted === null
        ? 'could not reach the server to delete the old charges'
        : `deleted ${plural(deleted, 'charge')}`;
    return () => ({
      text: `Reset: ${what} and moved to a fresh sandbox account, ${accountOf(labKey())}, with no charges, records or history.`,
      claims: [],
    });
  });
});

ui.useKeys.addEventListener('change', updateControls);

// ---- Guided runs ---------------------------------------------------------------------------------------------------

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls the records (each read is a reading) until `done` says so; bounded. */
async function until(done: () => boolean, what: string, limitMs: number): Promise<void> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    await refresh();
    render();
    if (done()) return;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await sleep(100);
  }
}

const runner: Runner = {
  payment: newPayment,
  key: uuid,
  send: async (spec) => {
    const sent: Attempt[] = [];
    last = spec;
    if (spec.key !== null) lastKeyed = spec;
    await send(spec, { autoRetry: false }, observe(sent));
    await refresh();
    return sent[0] as Attempt;
  },
  held: (key, over) =>
    until(
      () => over() || state.records.some((r) => r.key === key && r.status === 'in_progress'),
      `${key} in_progress`,
      10_000,
    ),
  lapsed: (key) =>
    until(
      () => {
        const record = state.records.find((r) => r.key === key);
        const left = record && record.status === 'in_progress' ? record.leaseExpiresAt - Date.now() : 0;
        if (left > 0)
          narrate({
            text: `The crashed attempt's record is in_progress; its lease lapses in ${Math.ceil(left / 1_000)} s…`,
            claims: [],
          });
        return left <= 0;
      },
      'the lease to lapse',
      120_000,
    ),
  paymentOf,
  takeover: switches,
};

for (const [button, run] of guides)
  button.addEventListener(
    'click',
    () =>
      void act(async () => {
        const told = await run(runner);
        return () => told;
      }),
  );

function updateControls(): void {
  ui.currentKey.textContent = ui.useKeys.checked ? currentKey : '(none: keys are off)';
  ui.account.textContent = accountOf(labKey());
  ui.retry.disabled = last === null;
  ui.tamper.disabled = lastKeyed === null || !ui.useKeys.checked;
  ui.newKey.disabled = !ui.useKeys.checked;
}

// ---- Reading back ----------------------------------------------------------------------------------------------------

let poller: number | undefined;
/** A request the server reported running when the page loaded: told once the server is done with it. */
let watched: Attempt | null = null;

/** While a request runs (this page's, or one the server reports running), read everything back every 400 ms. */
function poll(): void {
  if (poller !== undefined) return;
  poller = window.setInterval(() => {
    if (!busyRequests() && acting === 0) {
      window.clearInterval(poller);
      poller = undefined;
    }
    void refresh().then(() => {
      const done = watched && state.attempts.find((a) => a.request === watched?.request);
      if (done && settled(done) && acting === 0) {
        watched = null;
        narrate(tellOne(done, paymentOf(done)));
      }
      redraw();
    });
  }, 400);
}

/** Rebuilds the page from the server: on load, and whenever the page is shown again (back/forward, another tab). */
async function restore(): Promise<void> {
  await refresh();
  const latest = state.attempts.at(-1);
  const keyed = state.attempts.findLast((a) => a.key !== null);
  const spec = (a: Attempt): Spec => ({
    control: a.control,
    payment: a.payment,
    group: null,
    key: a.key,
    amount: a.amount,
    source: a.source,
    faults: faults(false),
  });
  last = latest ? spec(latest) : null;
  lastKeyed = keyed ? spec(keyed) : null;
  if (keyed?.key) currentKey = keyed.key;
  if (busyRequests()) poll();
  watched = latest && !settled(latest) ? latest : null;
  if (state.unreachable !== null) {
    narrate({
      text: `Could not reach the server to read this account's history (${state.unreachable}). Nothing is shown until it answers.`,
      claims: [],
    });
  } else if (latest) {
    const told = tellOne(latest, paymentOf(latest));
    narrate({
      text: `Read back from the server: ${plural(state.attempts.length, 'request')} so far. The last: ${told.text}`,
      claims: told.claims,
    });
  }
  render();
  updateControls();
}

window.addEventListener('resize', renderStrip);
window.addEventListener('pageshow', (event) => {
  if (event.persisted)
    void act(async () => {
      await restore();
      return null;
    });
});
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && acting === 0) void refresh().then(redraw);
});

updateControls();
render();
void act(async () => {
  await restore();
  return null;
});
