/**
 * @module The model page: the item, the state machine of one key, and the store's real operations run through
 * `/v1/model/*`: each shows what the store answered, with its round trips, and lights the transition it made.
 */
import { ApiError, accountOf, getJson, labKey, postJson, uuid } from './api.js';
import { byId, h } from './dom.js';
import { clock, relative } from './format.js';
import { stateMachine } from './model-machine.js';
import { raceSection } from './model-race.js';
import { reporter, running, showError } from './model-show.js';
import { expirySection, lapseSection } from './model-timed.js';
import type { ClaimValue, Info, ModelRecord, Operation } from './model-types.js';

const ui = {
  error: byId('model-error', HTMLElement),
  storeName: byId('store-name', HTMLElement),
  scope: byId('scope', HTMLElement),
  pkExample: byId('pk-example', HTMLElement),
  attributes: byId('attributes-body', HTMLTableSectionElement),
  typeSource: byId('type-source', HTMLElement),
  opClaim: byId('op-claim', HTMLElement),
  opComplete: byId('op-complete', HTMLElement),
  opRenew: byId('op-renew', HTMLElement),
  opRelease: byId('op-release', HTMLElement),
  opGet: byId('op-get', HTMLElement),
  claimKey: byId('claim-key', HTMLInputElement),
  claimLease: byId('claim-lease', HTMLSelectElement),
  runClaim: byId('run-claim', HTMLButtonElement),
  outClaim: byId('out-claim', HTMLElement),
  completeKey: byId('complete-key', HTMLInputElement),
  completeToken: byId('complete-token', HTMLInputElement),
  completeOutcome: byId('complete-outcome', HTMLSelectElement),
  runComplete: byId('run-complete', HTMLButtonElement),
  runRenew: byId('run-renew', HTMLButtonElement),
  runRelease: byId('run-release', HTMLButtonElement),
  outComplete: byId('out-complete', HTMLElement),
  readKey: byId('read-key', HTMLInputElement),
  runRead: byId('run-read', HTMLButtonElement),
  outRead: byId('out-read', HTMLElement),
  seeded: byId('seeded-body', HTMLTableSectionElement),
  expiring: byId('expiring', HTMLButtonElement),
};

const machine = stateMachine(byId('machine', HTMLElement));
const report = reporter(machine);

// ---- The access patterns -----------------------------------------------------------------------------------------

/** The lease the holder's key was claimed with: a renewal asks for the same again. */
let holderLeaseMs = 60_000;

ui.runClaim.addEventListener('click', () => {
  void running(ui.runClaim, async () => {
    try {
      const leaseMs = Number(ui.claimLease.value);
      const op = await postJson<Operation>('/v1/model/claim', { key: ui.claimKey.value, leaseMs });
      report(ui.outClaim, [{ op, title: 'Claim a request key' }]);
      const value = op.result as ClaimValue | null;
      if (value?.kind === 'claimed') {
        // Hand the claim to the holder's writes: its token is what makes each of them conditional.
        ui.completeKey.value = value.record.key;
        ui.completeToken.value = value.record.token;
        holderLeaseMs = leaseMs;
      }
    } catch (error) {
      showError(ui.outClaim, error);
    }
  });
});

/** One of the holder's writes (complete, renew, release) with the key and token in the form. */
function holderWrite(button: HTMLButtonElement, path: string, title: () => string, body: () => object): void {
  button.addEventListener('click', () => {
    void running(button, async () => {
      try {
        const key = ui.completeKey.value;
        const op = await postJson<Operation>(path, { key, token: ui.completeToken.value || 'no-token', ...body() });
        report(ui.outComplete, [{ op, title: title() }]);
        ui.readKey.value = key;
        // Once the key is settled or freed, the next claim is of a new key.
        if (path !== '/v1/model/renew' && (!ui.claimKey.value || ui.claimKey.value === key)) {
          ui.claimKey.value = `k-${uuid().slice(0, 8)}`;
        }
      } catch (error) {
        showError(ui.outComplete, error);
      }
    });
  });
}

holderWrite(
  ui.runComplete,
  '/v1/model/complete',
  () => `Record the outcome: ${ui.completeOutcome.selectedOptions[0]?.textContent ?? ui.completeOutcome.value}`,
  () => ({ outcome: ui.completeOutcome.value }),
);
holderWrite(
  ui.runRenew,
  '/v1/model/renew',
  () => 'Renew the lease',
  () => ({ leaseMs: holderLeaseMs }),
);
holderWrite(
  ui.runRelease,
  '/v1/model/release',
  () => 'Release the key',
  () => ({}),
);

async function read(key: string): Promise<void> {
  try {
    const op = await getJson<Operation>(`/v1/model/read?key=${encodeURIComponent(key)}`);
    report(ui.outRead, [{ op, title: 'Read a previous outcome' }]);
  } catch (error) {
    showError(ui.outRead, error);
  }
}

ui.runRead.addEventListener('click', () => {
  void running(ui.runRead, () => read(ui.readKey.value));
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
                void running(ui.runRead, () => read(key));
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

// ---- The race, the crash and expiry ----------------------------------------------------------------------------

raceSection(byId('race', HTMLButtonElement), byId('race-result', HTMLElement), machine.light);
lapseSection(
  {
    first: byId('lapse-claim', HTMLButtonElement),
    second: byId('lapse-retry', HTMLButtonElement),
    third: byId('lapse-late', HTMLButtonElement),
    clock: byId('lapse-clock', HTMLElement),
    output: byId('out-lapse', HTMLElement),
  },
  report,
);
expirySection(
  {
    first: ui.expiring,
    second: byId('expiring-claim', HTMLButtonElement),
    third: byId('expiring-read', HTMLButtonElement),
    clock: byId('expiry-clock', HTMLElement),
    output: byId('out-expiry', HTMLElement),
  },
  report,
);

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
    ui.opRenew.textContent = info.operations.renew;
    ui.opRelease.textContent = info.operations.release;
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
