/**
 * @module For the adapter conformance tests (not part of the library): the store and ledger every adapter's
 * suite runs against. Each store is a SQLite file of its own in a temporary folder, with a `ledger` table beside
 * the records; the work's effect is one ledger row for its ref, written inside the completion's transaction.
 * The folder is removed after the file's cases.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { sqliteStore } from '../stores/sqlite/index.js';
import type { AdapterConformanceOptions } from './adapter-harness.js';

type SqliteLedgerStore = ReturnType<typeof sqliteStore<Database.Database>>;

/**
 * `createStore`, `effect` and `countEffects` for {@link describeAdapterConformance}; `name` names the folder.
 * `makeStore` is `sqliteStore` from another build of the library (test/runtimes/nest.test.ts: the built package).
 */
export function sqliteLedger(
  name: string,
  makeStore: typeof sqliteStore = sqliteStore,
): Omit<AdapterConformanceOptions<Database.Database, SqliteLedgerStore>, 'harness'> {
  const dir = mkdtempSync(join(tmpdir(), `idem-${name}-conformance-`));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return {
    createStore: async () => {
      const store = makeStore({ database: new Database(join(dir, `${randomUUID()}.db`)), closeDatabase: true });
      await store.migrate();
      store.database.exec('CREATE TABLE ledger (ref TEXT NOT NULL UNIQUE)');
      return store;
    },
    effect: (tx, ref) => {
      tx.prepare('INSERT INTO ledger (ref) VALUES (?)').run(ref);
    },
    countEffects: async (ref, store) =>
      (store.database.prepare('SELECT count(*) AS n FROM ledger WHERE ref = ?').get(ref) as { n: number }).n,
  };
}
