/**
 * @module Opens the store named by `IDEM_STORE`, and the ledger beside it.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { IdempotencyStore, RoundTripObserver } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { sqliteStore } from 'idem/stores/sqlite';
import { ConfigError, type DemoConfig } from './config.js';
import { SqliteLedger, type Ledger } from './ledger.js';

export interface Backend {
  readonly store: IdempotencyStore<never> | IdempotencyStore<unknown>;
  readonly ledger: Ledger;
  /** The ledger shares the store's database: charges commit in the completion's transaction. */
  readonly sharedLedger: boolean;
  /** A description for the startup line. */
  readonly description: string;
  close(): Promise<void>;
}

function openSqlite(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  return new Database(path);
}

/**
 * Opens the backend for `config.store`: `sqlite:<path>` (records and ledger in one database) or `memory:`
 * (records in memory, ledger in `config.ledger`). `observer.onRoundTrip` sees every store round trip (the model page).
 *
 * @example
 * const backend = await openBackend(loadConfig(process.env))
 */
export async function openBackend(config: DemoConfig, observer: RoundTripObserver = {}): Promise<Backend> {
  const url = config.store;
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length);
    if (!path) throw new ConfigError('IDEM_STORE=sqlite:<path> needs a path, e.g. sqlite:./.idem/idem.db');
    const database = openSqlite(path);
    const store = sqliteStore({ database });
    await store.migrate();
    return {
      store,
      ledger: new SqliteLedger(database),
      sharedLedger: true,
      description: `SQLite ${path} (records and ledger, one transaction)`,
      close: async () => {
        await store.close();
        database.close();
      },
    };
  }
  if (url === 'memory:') {
    const ledgerDb = openSqlite(config.ledger);
    const store = memoryStore(observer);
    return {
      store,
      ledger: new SqliteLedger(ledgerDb),
      sharedLedger: false,
      description: `memory (records), SQLite ${config.ledger} (ledger)`,
      close: async () => {
        await store.close();
        ledgerDb.close();
      },
    };
  }
  throw new ConfigError(`IDEM_STORE must be sqlite:<path> or memory:, got "${url}".`);
}
