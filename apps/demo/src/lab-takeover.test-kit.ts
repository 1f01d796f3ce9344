/** The lab takeover tests' app (lab-takeover.ts's switches): a sandbox client, the ledger's rows, the lease lapse. */
import Database from 'better-sqlite3';
import { recordPk, type IdempotencyStore } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { sqliteStore } from 'idem/stores/sqlite';
import { createApp } from './app.js';
import { ACCOUNT, sandboxClient } from './lab-journal.test-kit.js';
import { SqliteLedger, type Ledger } from './ledger.js';

const LEASE_MS = 250;

/**
 * An in-process lab app with a short lease: on SQLite with the ledger in the store's database (`shared`), or on the
 * memory store with the ledger apart. `wrap` may stand in for the ledger (to hold one of its calls).
 */
export async function lab(shared: boolean, wrap: (ledger: Ledger) => Ledger = (ledger) => ledger) {
  const db = new Database(':memory:');
  const sqlite = sqliteStore({ database: db });
  await sqlite.migrate();
  const store: IdempotencyStore<unknown> = shared ? sqlite : memoryStore();
  const ledgerDb = shared ? db : new Database(':memory:');
  /** A server process on the store and the ledger's database (a second one stands for a restart). */
  const start = () =>
    createApp({
      store,
      ledger: wrap(new SqliteLedger(ledgerDb)),
      sharedLedger: shared,
      apiKeys: new Map(),
      lab: true,
      ttlMs: 60_000,
      leaseMs: LEASE_MS,
      mismatchStatus: 400,
    });
  const app = start();
  const rows = () =>
    ledgerDb.prepare('SELECT id, status, idempotency_ref AS ref FROM charges ORDER BY rowid').all() as Array<{
      id: string;
      status: string;
      ref: string | null;
    }>;
  /** Resolves once the key's record is in_progress with its lease lapsed, as the store reports it (polled, bounded). */
  const lapsed = async (key: string) => {
    for (let i = 0; i < 200; i++) {
      const record = await store.get(recordPk(ACCOUNT, key));
      if (record?.status === 'in_progress' && record.leaseExpiresAt <= Date.now()) return record;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`the lease of ${key} never lapsed`);
  };
  /** A new server process on the same databases, once it has marked what the first left running. */
  const restart = async () => {
    const next = start();
    await next.recover?.();
    return sandboxClient(next, 50_000);
  };
  const client = sandboxClient(app, 50_000);
  /** Sends `key` as an attempt that crashes under the switches, and resolves with its record once its lease lapsed. */
  const crashed = async (key: string, takeover: string, processor: 'keyed' | 'keyless') => {
    await client.charge(key, { ...switches(takeover, processor), 'idem-lab-fault': 'crash' });
    return lapsed(key);
  };
  return { ...client, app, store, rows, lapsed, crashed, restart };
}

export const switches = (takeover: string, processor: 'keyed' | 'keyless') => ({
  'idem-lab-takeover': takeover,
  'idem-lab-processor': processor,
});
