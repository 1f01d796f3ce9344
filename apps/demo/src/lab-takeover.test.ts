/**
 * The lab's "processor without keys" switch and its takeover policy (issue 33): a charge attempt crashes after the
 * processor charged, its lease lapses, and the retry takes the key over under `Idem-Lab-Takeover`. A processor that
 * does not deduplicate by the record id charges twice under `'rerun'`; `'reconcile'` asks the ledger and replays the
 * charge it finds; `'quarantine'` answers 409 `operation_state: "unknown"`. The ledger's rows are counted in SQL.
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { ACCOUNT } from './lab-journal.test-kit.js';
import { lab, switches } from './lab-takeover.test-kit.js';

describe.each([
  { name: 'SQLite, ledger in the store database', shared: true },
  { name: 'memory store, ledger apart', shared: false },
])('processor without keys, crash, then a takeover ($name)', ({ shared }) => {
  it("'rerun': the takeover charges again — two ledger rows for one key", async () => {
    const { charge, history, rows, lapsed } = await lab(shared);
    await charge('k', { ...switches('rerun', 'keyless'), 'idem-lab-fault': 'crash' });
    const record = await lapsed('k');
    const retry = await charge('k', switches('rerun', 'keyless'));
    expect(retry.status).toBe(201);
    const ledger = rows();
    expect(ledger.map((r) => [r.status, r.ref?.startsWith(`${record.id}/`)])).toEqual([
      ['succeeded', true],
      ['succeeded', true],
    ]);
    const { entries } = await history();
    expect(entries.map((e) => [e.claim, e.work, e.answer?.status ?? null, e.charge?.id, e.reconciled])).toEqual([
      ['fresh', 'crashed', null, ledger[0]?.id, null],
      ['taken-over', 'charged', 201, ledger[1]?.id, null],
    ]);
    expect(entries.map((e) => e.takeover)).toEqual([
      { takeover: 'rerun', keyless: true },
      { takeover: 'rerun', keyless: true },
    ]);
  });

  it("'reconcile': the hook finds the crashed attempt's charge in the ledger and it is replayed — one row", async () => {
    const { charge, history, rows, lapsed } = await lab(shared);
    await charge('k', { ...switches('reconcile', 'keyless'), 'idem-lab-fault': 'crash' });
    await lapsed('k');
    const retry = await charge('k', switches('reconcile', 'keyless'));
    const ledger = rows();
    expect(ledger).toHaveLength(1);
    expect([retry.status, ((await retry.json()) as { id: string }).id]).toEqual([201, ledger[0]?.id]);
    const { entries } = await history();
    expect(entries.map((e) => [e.claim, e.work, e.answer?.status ?? null, e.charge?.id, e.reconciled])).toEqual([
      ['fresh', 'crashed', null, ledger[0]?.id, null],
      ['reconciled', null, 201, ledger[0]?.id, 'succeeded'],
    ]);
    expect(entries[1]?.record?.status).toBe('succeeded');
    expect(entries[1]?.recordId).toBe(entries[0]?.recordId);
    // Settled by the hook: the next retry replays the recorded answer, and still nothing runs.
    expect((await charge('k', switches('reconcile', 'keyless'))).headers.get('idempotent-replayed')).toBe('true');
    expect(rows()).toHaveLength(1);
  });

  it("'quarantine': the retry gets 409 operation_state unknown and runs nothing — one row", async () => {
    const { charge, history, rows, lapsed, store } = await lab(shared);
    await charge('k', { ...switches('quarantine', 'keyless'), 'idem-lab-fault': 'crash' });
    await lapsed('k');
    const retry = await charge('k', switches('quarantine', 'keyless'));
    const body = (await retry.json()) as { type: string; operation_state: string };
    expect([retry.status, retry.headers.get('content-type'), body.type, body.operation_state]).toEqual([
      409,
      'application/problem+json',
      'urn:idem:problem:idempotency-outcome-unknown',
      'unknown',
    ]);
    expect(rows()).toHaveLength(1);
    const { entries } = await history();
    expect(entries.map((e) => [e.claim, e.work, e.answer?.status ?? null, e.answer?.problem ?? null])).toEqual([
      ['fresh', 'crashed', null, null],
      ['refused', null, 409, 'urn:idem:problem:idempotency-outcome-unknown'],
    ]);
    expect((await store.get(recordPk(ACCOUNT, 'k')))?.status).toBe('in_progress');
  });
});

describe('processor keyed on the record id (the default), ledger in the store database', () => {
  it("'reconcile' after a crash that committed nothing: the hook finds no charge, the work runs — one row", async () => {
    const { charge, history, rows, lapsed } = await lab(true);
    await charge('k', { ...switches('reconcile', 'keyed'), 'idem-lab-fault': 'crash' });
    await lapsed('k');
    expect(rows()).toHaveLength(0);
    expect((await charge('k', switches('reconcile', 'keyed'))).status).toBe(201);
    const { entries } = await history();
    expect(entries.map((e) => [e.claim, e.work, e.reconciled])).toEqual([
      ['fresh', 'crashed', null],
      ['taken-over', 'charged', 'not_done'],
    ]);
    expect(rows().map((r) => r.id)).toEqual([entries[1]?.charge?.id]);
  });

  it("'quarantine' after a crash that committed nothing: 409 unknown, zero rows", async () => {
    const { charge, rows, lapsed } = await lab(true);
    await charge('k', { ...switches('quarantine', 'keyed'), 'idem-lab-fault': 'crash' });
    await lapsed('k');
    const retry = await charge('k', switches('quarantine', 'keyed'));
    expect([retry.status, ((await retry.json()) as { operation_state: string }).operation_state]).toEqual([
      409,
      'unknown',
    ]);
    expect(rows()).toHaveLength(0);
  });
});

describe('the switches are validated before anything runs', () => {
  it.each([
    ['idem-lab-takeover', 'retry', 'Idem-Lab-Takeover'],
    ['idem-lab-processor', 'none', 'Idem-Lab-Processor'],
  ])('%s: %s → 400 problem+json, no record, no charge, no history', async (header, value, param) => {
    const { charge, history, rows, store } = await lab(true);
    const answer = await charge('k', { [header]: value });
    const body = (await answer.json()) as { type: string; param: string };
    expect([answer.status, answer.headers.get('content-type'), body.type, body.param]).toEqual([
      400,
      'application/problem+json',
      'urn:idem:problem:parameter-invalid',
      param,
    ]);
    expect([rows().length, (await history()).entries.length, await store.get(recordPk(ACCOUNT, 'k'))]).toEqual([
      0,
      0,
      null,
    ]);
  });
});
