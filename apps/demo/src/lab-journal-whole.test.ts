/**
 * The lab's history is whole (issue 28): an account keeps at most `LAB_HISTORY_LIMIT` requests and the next is
 * refused before it runs; a request whose entry cannot be written is refused 503 before it runs; and an entry a
 * stopped server process left `running` is read back as `interrupted`, with its record and its ledger row as they
 * are now. So every ledger row of a sandbox account is named by an entry the page reads.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { sqliteStore } from 'idem/stores/sqlite';
import { withPostgresLedger } from '../../../test/fixtures/demo.js';
import { POSTGRES_URL, serviceAvailable } from '../../../test/services.js';
import { createApp } from './app.js';
import { LAB_HISTORY_LIMIT, type LabEntry } from './lab-journal.js';
import { ACCOUNT, sandboxClient } from './lab-journal.test-kit.js';
import { SqliteLedger } from './ledger.js';

function lab() {
  const db = new Database(':memory:');
  const store = sqliteStore({ database: db });
  const ledger = new SqliteLedger(db);
  const app = createApp({
    store,
    ledger,
    sharedLedger: true,
    apiKeys: new Map(),
    lab: true,
    ttlMs: 60_000,
    leaseMs: 2_000,
    mismatchStatus: 400,
  });
  const { request, charge, get, history } = sandboxClient(app, 500);
  return { db, app, store, ledger, request, charge, get, history };
}

const problemOf = async (response: Response) => [response.status, ((await response.json()) as { type: string }).type];

describe('the lab history is whole', () => {
  it(`keeps ${LAB_HISTORY_LIMIT} requests per account; the next ones are refused 409 before they run`, async () => {
    const { app, store, request, charge, get, history } = lab();
    await store.migrate();
    for (let i = 0; i < LAB_HISTORY_LIMIT - 5; i++) expect((await charge(null)).status).toBe(201);
    // 20 at once with 5 places left: exactly 5 run.
    const raced = await Promise.all(Array.from({ length: 20 }, () => charge(null)));
    expect(raced.map((r) => r.status).sort()).toEqual([...Array<number>(5).fill(201), ...Array<number>(15).fill(409)]);
    expect(await problemOf(raced.find((r) => r.status === 409) as Response)).toEqual([
      409,
      'urn:idem:problem:lab-history-full',
    ]);
    const read = await history();
    expect([read.entries.length, read.charges.length]).toEqual([LAB_HISTORY_LIMIT, LAB_HISTORY_LIMIT]);
    // Every charge is named by an entry: nothing outside the history.
    const named = new Set(read.entries.map((e) => e.charge?.id));
    expect(read.charges.filter((c) => !named.has(c.id))).toEqual([]);
    expect(await get('/v1/balance')).toEqual({ object: 'balance', charged: 500 * LAB_HISTORY_LIMIT, count: 500 });
    // A keyed charge is refused the same way and leaves no record.
    expect(await problemOf(await charge('k-after-full'))).toEqual([409, 'urn:idem:problem:lab-history-full']);
    // A fault header does not cut a refusal: the client learns it was refused.
    const cutFault = request(null, { 'idem-lab-fault': 'drop-after-commit' });
    expect([(await app(cutFault)).status, app.dropsAfterCommit(cutFault)]).toEqual([409, false]);
    expect(await store.get(recordPk(ACCOUNT, 'k-after-full'))).toBe(null);
  });

  it('the drop and crash faults cut only an answer whose work ran: a replay, a 409, a refusal are answered', async () => {
    const { app, store, request } = lab();
    await store.migrate();
    const drop = { 'idem-lab-fault': 'drop-after-commit' };
    const cut = async (key: string | null, headers: Record<string, string>) => {
      const sent = request(key, headers);
      const answer = await app(sent);
      return [answer.status, app.dropsAfterCommit(sent)];
    };
    expect(await cut('k-1', drop)).toEqual([201, true]);
    expect(await cut('k-1', drop)).toEqual([201, false]); // the replay
    expect(await cut('k-1', { 'idem-lab-fault': 'crash' })).toEqual([201, false]); // a replay too
    expect(await cut('k-2', { ...drop, 'idem-lab-delay-ms': '0', 'idem-lab-fail': '503' })).toEqual([503, true]);
  });

  it('a request whose entry cannot be written is refused 503 and does not run', async () => {
    const { db, store, charge, get } = lab();
    await store.migrate();
    db.exec('DROP TABLE lab_requests');
    expect(await problemOf(await charge('k-1'))).toEqual([503, 'urn:idem:problem:lab-history-unavailable']);
    expect(await problemOf(await charge(null))).toEqual([503, 'urn:idem:problem:lab-history-unavailable']);
    expect(await get('/v1/balance')).toEqual({ object: 'balance', charged: 0, count: 0 });
    expect((await get<{ data: unknown[] }>('/v1/idempotency_records')).data.length).toBe(0);
  });

  it('at start-up, entries a stopped process left running are marked interrupted, with their record and charge', async () => {
    const { db, app, store, charge, history } = lab();
    await store.migrate();
    expect((await charge('k-keyed')).status).toBe(201);
    expect((await charge(null)).status).toBe(201);
    expect((await charge('k-never-charged')).status).toBe(201);
    const done = (await history()).entries;
    // As a process killed before its last write leaves them: running, from another process, nothing read back.
    for (const entry of done) {
      const running = { ...entry, state: 'running', instance: 'a-stopped-process', record: null, charge: null };
      db.prepare('UPDATE lab_requests SET entry = ? WHERE seq = ?').run(JSON.stringify(running), entry.seq);
    }
    // The third request's charge never happened: its record and its row are gone (the kill came before them).
    const third = done[2] as LabEntry;
    db.prepare('DELETE FROM charges WHERE id = ?').run(third.charge?.id);
    db.prepare('DELETE FROM idem_records WHERE pk = ?').run(recordPk(ACCOUNT, 'k-never-charged'));
    // Read before start-up: still running (only the start-up decides, before anything else can run).
    expect((await history()).entries.map((e) => e.state)).toEqual(['running', 'running', 'running']);
    expect(await app.recover?.()).toBe(3);
    const read = (await history()).entries;
    expect(read.map((e) => [e.state, e.record?.status ?? null, e.charge?.id ?? null])).toEqual([
      ['interrupted', 'succeeded', done[0]?.charge?.id],
      ['interrupted', null, done[1]?.charge?.id],
      ['interrupted', null, null],
    ]);
    expect(read.map((e) => e.charge?.found ?? null)).toEqual([false, false, null]);
    const stored = db.prepare('SELECT entry FROM lab_requests ORDER BY seq').all() as Array<{ entry: string }>;
    expect(stored.map((row) => (JSON.parse(row.entry) as LabEntry).state)).toEqual([
      'interrupted',
      'interrupted',
      'interrupted',
    ]);
  });

  it("a retry after the start-up takes the key over: the charge is its own, not the interrupted one's", async () => {
    const { db, app, store, charge, history } = lab();
    await store.migrate();
    // As a process killed during the processor's delay leaves it: the claim landed, nothing after it (a crash
    // fault on the shared ledger: its charge was to commit with the record), and its entry still running.
    expect((await charge('k-killed', { 'idem-lab-fault': 'crash' })).status).toBe(201);
    const [crashed] = (await history()).entries;
    const entry = { ...crashed, state: 'running', instance: 'gone', record: null, charge: null, work: null };
    db.prepare('UPDATE lab_requests SET entry = ? WHERE seq = ?').run(JSON.stringify(entry), crashed?.seq);
    expect(await app.recover?.()).toBe(1);
    // Once the lease has lapsed, the retry takes over under the same record id and makes the one charge.
    const pk = recordPk(ACCOUNT, 'k-killed');
    while (((await store.get(pk))?.leaseExpiresAt ?? 0) >= Date.now()) await new Promise((r) => setImmediate(r));
    const retry = await charge('k-killed');
    expect(retry.status).toBe(201);
    const read = (await history()).entries;
    expect(read.map((e) => [e.state, e.claim, e.charge === null ? null : e.charge.found])).toEqual([
      ['interrupted', 'fresh', null],
      ['done', 'taken-over', false],
    ]);
  });

  it('an entry this process is still running reads back as running, then done', async () => {
    const { store, history, charge } = lab();
    await store.migrate();
    const slow = charge('k-slow', { 'idem-lab-delay-ms': '1500' });
    let seen: string[] = [];
    while (seen.length === 0) seen = (await history()).entries.map((e) => e.state);
    expect(seen).toEqual(['running']);
    expect((await slow).status).toBe(201);
    expect((await history()).entries.map((e) => e.state)).toEqual(['done']);
  });
});

describe('PostgresLedger: the history limit holds under concurrent inserts', () => {
  it('20 inserts at once with 10 places: exactly 10 rows', async ({ skip }) => {
    if (!(await serviceAvailable('postgres', POSTGRES_URL))) skip();
    await withPostgresLedger(`lab_whole_${process.pid}`, 20, async (ledger) => {
      const seqs = await Promise.all(
        Array.from({ length: 20 }, (_, i) => ledger.journal('acct', null, `{"n":${i}}`, 10)),
      );
      expect([seqs.filter((s) => s !== null).length, seqs.filter((s) => s === null).length]).toEqual([10, 10]);
      expect((await ledger.history('acct', 100)).length).toBe(10);
    });
  });
});
