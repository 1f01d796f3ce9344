/**
 * The SQLite store inside a transaction already open on its connection (another flow's BEGIN): better-sqlite3's
 * `.immediate` would become a SAVEPOINT, and the autocommit upsert would join it, so the outer ROLLBACK would undo
 * a claim, a completion or a runLocal "commit" the engine had already believed (and cached). All are refused.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../core/engine.js';
import { recordPk } from '../../core/key.js';
import { runLocal } from '../../core/local.js';
import { sqliteStore } from './index.js';

const ok = { status: 201, headers: [], body: new TextEncoder().encode('charged') };

async function setup() {
  const database = new Database(':memory:');
  const store = sqliteStore({ database });
  await store.migrate();
  database.exec('CREATE TABLE ledger (key TEXT)');
  const rows = () => (database.prepare('SELECT count(*) AS n FROM ledger').get() as { n: number }).n;
  const work = (tx: typeof database) => {
    tx.prepare("INSERT INTO ledger VALUES ('k')").run();
    return { response: ok };
  };
  return { database, store, rows, work };
}

describe('SQLite store on a connection with a transaction open', () => {
  it('runLocal refuses (CONFIG_INVALID), nothing is cached, and the retry after ROLLBACK charges once', async () => {
    const { database, store, rows, work } = await setup();
    const engine = createEngine({ store, ttlMs: 86_400_000, cacheSize: 10 });
    const request = { scope: 's', key: 'k', fingerprint: 'F' };
    database.exec('BEGIN');
    const refused = await runLocal(engine, request, work).then(
      () => 'ran',
      (error: { code?: string; message?: string }) => [error.code, error.message],
    );
    database.exec('ROLLBACK');
    expect(refused).toEqual(['CONFIG_INVALID', 'runLocal cannot run inside an open transaction on this connection']);
    expect([await store.get(recordPk('s', 'k')), rows()]).toEqual([null, 0]);
    const retry = await runLocal(engine, request, work);
    expect([retry.replayed, retry.record?.status, rows()]).toEqual([false, 'succeeded', 1]);
    const again = await runLocal(engine, request, work);
    expect([again.replayed, rows()]).toEqual([true, 1]);
  });

  it('claim and complete refuse too, and write nothing the outer transaction could take back', async () => {
    const { database, store } = await setup();
    const claim = { pk: recordPk('s', 'c'), scope: 's', key: 'c', fingerprint: 'F', token: 't1', id: 'id1' };
    const request = { ...claim, now: 1_000, leaseMs: 30_000, ttlMs: 86_400_000 };
    database.exec('BEGIN');
    const claimed = await store.claim(request).then(
      () => 'claimed',
      (error: { code?: string; message?: string }) => [error.code, error.message],
    );
    database.exec('ROLLBACK');
    expect(claimed).toEqual(['CONFIG_INVALID', 'claim cannot run inside an open transaction on this connection']);
    expect((await store.claim(request)).kind).toBe('claimed');
    const outcome = { status: 'succeeded' as const, retryable: false, resultId: null, response: ok };
    database.exec('BEGIN');
    const completed = await store.complete({ pk: claim.pk, token: 't1', now: 2_000, outcome }).then(
      () => 'completed',
      (error: { code?: string; message?: string }) => [error.code, error.message],
    );
    database.exec('ROLLBACK');
    expect(completed).toEqual(['CONFIG_INVALID', 'complete cannot run inside an open transaction on this connection']);
    expect((await store.get(claim.pk))?.status).toBe('in_progress');
    expect(await store.complete({ pk: claim.pk, token: 't1', now: 2_000, outcome })).toEqual({ ok: true });
    expect((await store.get(claim.pk))?.status).toBe('succeeded');
  });
});
