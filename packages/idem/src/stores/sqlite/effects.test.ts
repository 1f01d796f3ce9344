/** The SQLite store's effects: the work's writes commit with the completion, or with the claim in `runLocal`. */
import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import { createEngine, manualClock } from 'idem';
import type { Outcome } from 'idem';
import { describe, expect, it } from 'vitest';
import { claimRequest, scope, storeWithLedger } from '#test/fixtures/sqlite.js';
import { LEASE, SUCCEEDED as succeeded, T0 } from '../../testing/fixtures.js';
import type { SqliteDatabase } from './index.js';

describe('sqlite store: effects commit with the completion, in one transaction', () => {
  /** A store with a ledger table and one key claimed; `complete` sends that key's succeeded completion at T0 + 1. */
  const claimed = async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    await store.claim(req);
    const complete = (over: Partial<Parameters<typeof store.complete>[0]>) =>
      store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: succeeded, ...over });
    return { store, ledger, req, complete, before: await store.get(req.pk) };
  };
  const insert = (tx: Database.Database, chargeId: string, recordId: string) =>
    tx.prepare('INSERT INTO ledger VALUES (?, ?, ?)').run(chargeId, recordId, 500);

  it('effects that insert a row commit together with an ok completion', async () => {
    const { store, ledger, req, complete } = await claimed();
    expect(await complete({ effects: (tx) => insert(tx, 'ch_1', req.id) })).toEqual({ ok: true });
    expect(ledger()).toEqual([{ charge_id: 'ch_1', record_id: req.id, amount: 500 }]);
    expect((await store.get(req.pk))?.status).toBe('succeeded');
    await store.close();
  });

  it('a stale token completes nothing: {ok:false}, the effects do not run and leave no row', async () => {
    const { store, ledger, req, complete, before } = await claimed();
    let calls = 0;
    const effects = (tx: Database.Database) => (calls++, insert(tx, 'ch_stale', req.id));
    expect(await complete({ token: randomUUID(), effects })).toEqual({ ok: false });
    expect(calls).toBe(0);
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    await store.close();
  });

  it('a lease taken over while the work ran: the first owner’s completion and effects are refused', async () => {
    const { store, ledger, req: first } = await claimed();
    const takeover = { ...first, token: randomUUID(), now: T0 + LEASE };
    expect((await store.claim(takeover)).kind).toBe('claimed');
    const inserting = (chargeId: string) => (tx: Database.Database) => insert(tx, chargeId, first.id);
    const late = { pk: first.pk, now: T0 + LEASE + 1, outcome: succeeded };
    expect(await store.complete({ ...late, token: first.token, effects: inserting('ch_late') })).toEqual({ ok: false });
    expect(await store.complete({ ...late, token: takeover.token, effects: inserting('ch_owner') })).toEqual({
      ok: true,
    });
    expect(ledger()).toEqual([{ charge_id: 'ch_owner', record_id: first.id, amount: 500 }]);
    expect((await store.get(first.pk))?.token).toBe(takeover.token);
    await store.close();
  });

  it('effects that throw roll back their writes and the completion, and the error is rethrown', async () => {
    const { store, ledger, req, complete, before } = await claimed();
    const boom = new Error('ledger constraint');
    const completion = complete({
      effects: (tx) => {
        insert(tx, 'ch_1', req.id);
        throw boom;
      },
    });
    await expect(completion).rejects.toBe(boom);
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    // The holder can still complete afterwards: nothing was left half-written.
    expect(await complete({ now: T0 + 2 })).toEqual({ ok: true });
    await store.close();
  });

  it('async effects are refused with a clear error, and their synchronous writes roll back', async () => {
    const { store, ledger, req, complete, before } = await claimed();
    const completion = complete({
      effects: async (tx) => {
        insert(tx, 'ch_1', req.id);
      },
    });
    await expect(completion).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: 'Expected `effects` to be a synchronous function: SQLite transactions here are synchronous.',
    });
    expect(ledger()).toEqual([]);
    expect(await store.get(req.pk)).toEqual(before);
    await store.close();
  });

  it('through the engine: the work’s ledger write and the completion commit once; a retry replays', async () => {
    const { store, ledger } = await storeWithLedger();
    const engine = createEngine({ store, clock: manualClock(T0), ttlMs: 24 * 3_600_000 });
    const run = { scope, key: randomUUID(), fingerprint: 'a'.repeat(64) };
    let executions = 0;
    const work = async ({ id }: { id: string }) => {
      executions++;
      return {
        response: { status: 201, headers: [], body: new TextEncoder().encode('{"id":"ch_1"}') },
        resultId: 'ch_1',
        effects: (tx: Database.Database) => insert(tx, 'ch_1', id),
      };
    };
    const first = await engine.run(run, work);
    const retry = await engine.run(run, work);
    expect([first.replayed, retry.replayed]).toEqual([false, true]);
    expect(executions).toBe(1);
    expect(ledger()).toEqual([{ charge_id: 'ch_1', record_id: first.record?.id, amount: 500 }]);
    expect(new TextDecoder().decode(retry.response.body)).toBe('{"id":"ch_1"}');
    await store.close();
  });
});

describe('sqlite store: runLocal, the claim, the work and the completion in one transaction', () => {
  const committed: Outcome = succeeded;
  const insertLedger = (db: SqliteDatabase, recordId: string): void =>
    void db
      .prepare('INSERT INTO ledger (charge_id, record_id, amount) VALUES (?, ?, ?)')
      .run(`ch_${recordId}`, recordId, 500);

  it('a new key: one round trip; the claim, the ledger row and the outcome commit together', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    const before = store.roundTrips;
    const result = await store.runLocal({ ...req, work: (db, record) => (insertLedger(db, record.id), committed) });
    expect(store.roundTrips - before).toBe(1);
    expect(result).toEqual({ kind: 'committed', record: await store.get(req.pk) });
    expect([result.kind === 'committed' && result.record.status, ledger()]).toEqual([
      'succeeded',
      [{ charge_id: `ch_${req.id}`, record_id: req.id, amount: 500 }],
    ]);
    // A refusal afterwards: one plain read, the work not called.
    const beforeReplay = store.roundTrips;
    const replay = await store.runLocal({
      ...claimRequest({ key: req.key, now: T0 + 1 }),
      work: () => {
        throw new Error('must not run');
      },
    });
    const replayed = replay.kind === 'existing' && replay.record.response?.status;
    expect([replay.kind, replayed, store.roundTrips - beforeReplay]).toEqual(['existing', 201, 1]);
    await store.close();
  });

  it('work that returns null or throws rolls back its rows and the claim: no record, no ledger row', async () => {
    const { store, ledger } = await storeWithLedger();
    const req = claimRequest();
    expect(await store.runLocal({ ...req, work: (db, record) => (insertLedger(db, record.id), null) })).toEqual({
      kind: 'rolled-back',
    });
    const boom = new Error('boom');
    await expect(
      store.runLocal({
        ...claimRequest({ key: req.key }),
        work: (db, record) => {
          insertLedger(db, record.id);
          throw boom;
        },
      }),
    ).rejects.toBe(boom);
    expect([await store.get(req.pk), ledger()]).toEqual([null, []]);
    await store.close();
  });

  it('a key left in_progress by a lease-mode claim: refused while the lease lives, taken over (same id) once it lapsed', async () => {
    const { store, ledger } = await storeWithLedger();
    const held = claimRequest();
    await store.claim(held);
    let runs = 0;
    const work = (db: SqliteDatabase, record: { id: string }) => (runs++, insertLedger(db, record.id), committed);
    const refused = await store.runLocal({ ...claimRequest({ key: held.key, now: T0 + LEASE - 1 }), work });
    expect([refused.kind, refused.kind === 'existing' && refused.record.token, runs]).toEqual([
      'existing',
      held.token,
      0,
    ]);
    const taken = await store.runLocal({ ...claimRequest({ key: held.key, now: T0 + LEASE }), work });
    expect([taken.kind, taken.kind === 'committed' && taken.record.id, runs]).toEqual(['committed', held.id, 1]);
    expect(await store.complete({ pk: held.pk, token: held.token, now: T0 + LEASE, outcome: committed })).toEqual({
      ok: false,
    });
    expect(ledger()).toEqual([{ charge_id: `ch_${held.id}`, record_id: held.id, amount: 500 }]);
    await store.close();
  });
});
