/**
 * The lab's request history (issue 28): what `GET /v1/lab/history` says about each sandbox request is read back from
 * the store and the ledger, in-process on SQLite (ledger in the records' transaction) and on the memory store (ledger
 * apart, each charge unique on its record id). A crashed attempt leaves its record in_progress; the retry after the
 * lease lapses takes it over with the same record id, and the ledger holds one charge.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { sqliteStore } from 'idem/stores/sqlite';
import { createApp } from './app.js';
import type { LabEntry } from './lab-journal.js';
import { ACCOUNT, sandboxClient, SANDBOX } from './lab-journal.test-kit.js';
import { SqliteLedger } from './ledger.js';

const LEASE_MS = 300;

function lab(shared: boolean, labMode = true) {
  const db = new Database(':memory:');
  const sqlite = sqliteStore({ database: db });
  const store = shared ? sqlite : memoryStore();
  const ledger = new SqliteLedger(shared ? db : new Database(':memory:'));
  const app = createApp({
    store,
    ledger,
    sharedLedger: shared,
    apiKeys: new Map([['sk_test_alice', 'acct_alice']]),
    lab: labMode,
    ttlMs: 60_000,
    leaseMs: LEASE_MS,
    mismatchStatus: 400,
  });
  const { charge, get, history } = sandboxClient(app, 50_000);
  return { app, store, charge, get, history, migrate: () => (shared ? sqlite.migrate() : Promise.resolve()) };
}

/** What an entry tells a reader, without times and random ids: control, payment, claim, work, answer, record before and after, charge. */
const told = (e: LabEntry) => [
  `${e.control} ${e.payment ?? '-'} ${e.state}`,
  e.claim,
  e.work,
  e.answer &&
    `${e.answer.status}${e.answer.replayed ? ' replayed' : ''}${e.answer.problem ? ` ${e.answer.problem.replace('urn:idem:problem:', '')}` : ''}`,
  e.before && `${e.before.status} ${String(e.before.retryable)} ${String(e.before.responseStatus)}`,
  e.record && `${e.record.status} ${String(e.record.retryable)} ${String(e.record.responseStatus)}`,
  e.charge && `${e.charge.amount} ${e.charge.status}`,
];

describe.each([
  { name: 'SQLite, ledger in the same transaction', shared: true },
  { name: 'memory store, ledger apart (unique on the record id)', shared: false },
])('lab history on $name', ({ shared }) => {
  it('a charge, its replay, a mismatch, a processor failure and its reclaim, a declined card: each read back', async () => {
    const { charge, history, migrate } = lab(shared);
    await migrate();
    const tag = (control: string, payment: string) => ({ 'idem-lab-control': control, 'idem-lab-payment': payment });
    expect((await charge('k1', tag('Charge', 'p1'))).status).toBe(201);
    expect((await charge('k1', tag('Retry', 'p1'))).status).toBe(201);
    expect((await charge('k1', tag('Tamper', 'p1'), 500_000)).status).toBe(400);
    expect((await charge('k2', { ...tag('Charge', 'p2'), 'idem-lab-fail': '503' })).status).toBe(503);
    expect((await charge('k2', tag('Retry', 'p2'))).status).toBe(201);
    expect((await charge('k3', tag('Charge', 'p3'), 50_000, 'tok_chargeDeclined')).status).toBe(402);
    expect((await charge('k3', tag('Retry', 'p3'), 50_000, 'tok_chargeDeclined')).status).toBe(402);
    const { entries, charges } = await history();
    expect(entries.map(told)).toEqual([
      ['Charge p1 done', 'fresh', 'charged', '201', null, 'succeeded null 201', '50000 succeeded'],
      ['Retry p1 done', 'replayed', null, '201 replayed', 'succeeded null 201', 'succeeded null 201', null],
      [
        'Tamper p1 done',
        'mismatch',
        null,
        '400 idempotency-key-reused',
        'succeeded null 201',
        'succeeded null 201',
        null,
      ],
      ['Charge p2 done', 'fresh', 'processor-failed', '503 processor-unavailable', null, 'failed true 503', null],
      ['Retry p2 done', 'reclaimed', 'charged', '201', 'failed true 503', 'succeeded null 201', '50000 succeeded'],
      ['Charge p3 done', 'fresh', 'declined', '402 card-declined', null, 'failed false 402', '50000 failed'],
      ['Retry p3 done', 'replayed', null, '402 replayed card-declined', 'failed false 402', 'failed false 402', null],
    ]);
    // The reclaim ran under the failed attempt's record id, and each charge in the history is the ledger's row.
    expect(entries[4]?.recordId).toBe(entries[3]?.recordId);
    expect(new Set(charges.map((c) => c.id))).toEqual(new Set(entries.flatMap((e) => (e.charge ? [e.charge.id] : []))));
  });

  it('a crash mid-charge: 409 while its lease holds, then a takeover with the same record id, and one charge', async () => {
    const { charge, history, store, migrate } = lab(shared);
    await migrate();
    const crashed = await charge('kc', { 'idem-lab-fault': 'crash', 'idem-lab-payment': 'pc' });
    expect(crashed.status).toBe(201); // what the attempt produced; the node bridge never sends it (dropsAfterCommit)
    expect((await charge('kc', { 'idem-lab-payment': 'pc' })).status).toBe(409);
    const pk = recordPk(ACCOUNT, 'kc');
    const held = await store.get(pk);
    expect(held?.status).toBe('in_progress');
    // Wait on the record's own lease (a poll, bounded), not a fixed sleep.
    for (let i = 0; i < 100 && (held?.leaseExpiresAt ?? 0) > Date.now(); i++)
      await new Promise((r) => setTimeout(r, 20));
    expect((await charge('kc', { 'idem-lab-payment': 'pc' })).status).toBe(201);
    const { entries, charges } = await history();
    expect(entries.map((e) => [e.claim, e.work, e.answer?.status ?? null, e.record?.status])).toEqual([
      ['fresh', 'crashed', null, 'in_progress'],
      ['in-flight', null, 409, 'in_progress'],
      ['taken-over', 'charged', 201, 'succeeded'],
    ]);
    expect(entries[2]?.recordId).toBe(entries[0]?.recordId);
    expect(entries[2]?.recordId).toBe(held?.id);
    // Ledger apart: the processor charged before the crash, and the takeover got that same charge back (its ref is
    // the record id). Ledger in the transaction: the crash committed nothing, and the takeover's charge is the one.
    expect(entries[0]?.charge?.id ?? null).toBe(shared ? null : entries[2]?.charge?.id);
    expect(charges.map((c) => [c.id, c.status])).toEqual([[entries[2]?.charge?.id, 'succeeded']]);
  });
});

describe('lab history: scope and mode', () => {
  it('is per sandbox account, follows Reset, and journals nothing for a non-sandbox account', async () => {
    const { charge, get, history, app } = lab(true);
    await charge(null, { 'idem-lab-fault': 'drop-after-commit' });
    expect((await history()).entries.map((e) => [e.key, e.claim, e.work, e.answer, e.charge?.status])).toEqual([
      [null, 'none', 'charged', null, 'succeeded'],
    ]);
    expect(await get('/v1/lab/history', 'sk_lab_zzzzzzzz00000000')).toEqual({
      object: 'lab_history',
      entries: [],
      charges: [],
    });
    const reset = await app(
      new Request('http://127.0.0.1/v1/lab/reset', { method: 'POST', headers: { authorization: `Bearer ${SANDBOX}` } }),
    );
    expect(await reset.json()).toEqual({ object: 'lab_reset', deleted_charges: 1 });
    expect(await history()).toEqual({ object: 'lab_history', entries: [], charges: [] });
    await app(
      new Request('http://127.0.0.1/v1/charges', {
        method: 'POST',
        headers: { authorization: 'Bearer sk_test_alice', 'content-type': 'application/json' },
        body: '{"amount":500}',
      }),
    );
    expect(await get('/v1/lab/history', 'sk_test_alice')).toEqual({
      object: 'lab_history',
      entries: [],
      charges: [expect.objectContaining({ amount: 500 })],
    });
  });

  it('outside lab mode: no history route, and Idem-Lab-Fault: crash is an ordinary charge that completes', async () => {
    const { app, store, migrate } = lab(true, false);
    await migrate();
    const alice = { authorization: 'Bearer sk_test_alice' };
    const history = await app(new Request('http://127.0.0.1/v1/lab/history', { headers: alice }));
    expect(history.status).toBe(404);
    const request = new Request('http://127.0.0.1/v1/charges', {
      method: 'POST',
      headers: { ...alice, 'content-type': 'application/json', 'idempotency-key': 'kx', 'idem-lab-fault': 'crash' },
      body: '{"amount":500}',
    });
    expect(app.dropsAfterCommit(request)).toBe(false);
    expect((await app(request)).status).toBe(201);
    expect((await store.get(recordPk('acct_alice', 'kx')))?.status).toBe('succeeded');
  });
});
