/** The SQLite store from several processes and connections on one database file. */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { recordPk } from 'idem';
import { describe, expect, it } from 'vitest';
import { startChild } from '#test/fixtures/child.js';
import { doneAndLive, expectRefusals } from '#test/fixtures/stores.js';
import { claimRequest, freshFile } from '#test/fixtures/sqlite.js';
import { sqliteStore } from './index.js';

describe('sqlite store: two processes racing on one database file', () => {
  const child = 'sqlite-race-child.ts';

  interface ChildResult {
    readonly key: string;
    readonly kind: 'claimed' | 'existing';
    readonly token: string;
    readonly recordToken: string;
  }

  it('50 claims of each of 64 keys from each of 2 processes: exactly one claim per key wins', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true });
    await store.migrate();
    const keys = Array.from({ length: 64 }, () => randomUUID());
    const N = 50;

    const children = [0, 1].map(() => startChild(child, [file, String(N), ...keys]));
    // The shared start signal: once both processes are loaded and waiting, both are told the same instant.
    await Promise.all(children.map((c) => c.first));
    const startAt = Date.now() + 200;
    for (const c of children) c.tell(String(startAt), true);
    const outputs = await Promise.all(children.map((c) => c.done));

    for (const output of outputs) {
      expect({ code: output.code, stderr: output.stderr }).toEqual({ code: 0, stderr: '' });
    }
    const reports = outputs.map(
      (output) => JSON.parse(output.lines.at(-1) ?? '{}') as { pid: number; results: ChildResult[] },
    );
    for (const report of reports) expect(report.results.length).toBe(N * keys.length);
    const all = reports.flatMap((report) => report.results);
    for (const key of keys) {
      const mine = all.filter((result) => result.key === key);
      expect(mine.length).toBe(2 * N);
      const winners = mine.filter((result) => result.kind === 'claimed');
      expect(winners.length).toBe(1);
      const winner = winners[0] as ChildResult;
      expect(winner.recordToken).toBe(winner.token);
      // Every loser was handed the winner's record, in its one call.
      expect(mine.filter((result) => result.recordToken !== winner.token)).toEqual([]);
      expect((await store.get(recordPk('acct_race', key)))?.token).toBe(winner.token);
    }
    await store.close();
  });
});

describe('sqlite store: refusals do not take the write lock', () => {
  it('while another connection holds the write lock, a replay, a mismatch and a live lease still answer at once', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true, busyTimeoutMs: 2_000 });
    await store.migrate();
    const keys = await doneAndLive(store, claimRequest);
    // A writer that stalls inside its transaction (a frozen process): the write lock stays taken.
    const blocker = new Database(file);
    blocker.exec('BEGIN IMMEDIATE');
    try {
      await expectRefusals((r) => store.claim(r), keys);
      // (Were a refusal to take the lock, each of these would wait busy_timeout, then fail SQLITE_BUSY.)
      // A fresh key does need the lock: it waits, then fails closed.
      await expect(store.claim(claimRequest())).rejects.toMatchObject({ code: 'SQLITE_BUSY' });
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
      await store.close();
    }
  });
});

describe('sqlite store: runLocal from 4 processes on one new key', () => {
  const child = 'sqlite-local-child.ts';

  interface ChildReport {
    readonly replayed: boolean;
    readonly status: number;
    readonly body: string;
    readonly trips: unknown[][];
  }

  it('the first holds the lock until the 3 others read the key absent; they wait, then replay it; one ledger row', async () => {
    const file = freshFile();
    const store = sqliteStore({ database: new Database(file), closeDatabase: true });
    await store.migrate();
    store.database.exec('CREATE TABLE ledger (ref TEXT PRIMARY KEY, pid INTEGER NOT NULL)');
    const key = randomUUID();
    const N = 4;
    const children = Array.from({ length: N }, () => startChild(child, [file, key]));
    await Promise.all(children.map((c) => c.hear('ready')));
    const [first, ...others] = children as [(typeof children)[number], ...typeof children];
    first.tell('go');
    await first.hear('holding'); // inside its transaction: the write lock is taken, its ledger row uncommitted
    for (const other of others) other.tell('go');
    await Promise.all(others.map((other) => other.hear('read'))); // each read the key: absent
    first.tell('release');
    const outputs = await Promise.all(children.map((c) => c.done));
    for (const output of outputs) expect({ code: output.code, stderr: output.stderr }).toEqual({ code: 0, stderr: '' });
    const [winner, ...losers] = outputs.map((output) => JSON.parse(output.lines.at(-1) ?? '') as ChildReport) as [
      ChildReport,
      ...ChildReport[],
    ];
    // The winner: its read found nothing; in the transaction, its upsert returned its row and the UPDATE changed it.
    expect([winner.replayed, winner.status, winner.trips]).toEqual([false, 201, [[0], [1, { changes: 1 }]]]);
    for (const loser of losers) {
      // A loser: its read found nothing (before the commit); under the lock, its upsert was refused (no row) and
      // the SELECT read the winner's committed row. It replayed the winner's body.
      expect([loser.replayed, loser.status, loser.body, loser.trips]).toEqual([true, 201, winner.body, [[0], [0, 1]]]);
    }
    const rows = store.database.prepare('SELECT ref, pid FROM ledger').all() as Array<{ ref: string; pid: number }>;
    expect(rows).toEqual([{ ref: (JSON.parse(winner.body) as { id: string }).id, pid: first.proc.pid }]);
    await store.close();
  });
});
