/**
 * @module The one place `src/` reaches into `demo/`: `idem serve`, `idem migrate` and `idem records` need the
 * demo's server and its store-URL opener (`openBackend`), and must not parse store URLs a second time.
 *
 * The import is dynamic, so the library's entry points never load the demo, and the path is the same relative
 * path from source and from the build (`src/cli/demo.ts` → `demo/server.ts` under tsx; `dist/src/cli/demo.js` →
 * `dist/demo/server.js` once built, which the package ships for this reason).
 */
import type * as ConfigModule from '../../demo/config.js';
import type * as ServerModule from '../../demo/server.js';
import type { IdempotencyStore } from '../core/record.js';

export type DemoServer = typeof ServerModule;
export type DemoConfigModule = typeof ConfigModule;

/**
 * Loads the demo server and its configuration module.
 *
 * @example
 * const { server, config } = await loadDemo()
 * await server.startServer(config.loadConfig(process.env))
 */
export async function loadDemo(): Promise<{ server: DemoServer; config: DemoConfigModule }> {
  const [server, config] = await Promise.all([import('../../demo/server.js'), import('../../demo/config.js')]);
  return { server, config };
}

/** A store opened from its URL, with `migrate` when the store has one. */
export interface OpenedStore {
  readonly store: IdempotencyStore<unknown> & {
    migrate?: () => Promise<void>;
    createTable?: () => Promise<{ readonly created: boolean; readonly timeToLive: string }>;
  };
  readonly description: string;
  close(): Promise<void>;
}

/**
 * Opens the store named by `url` exactly as `idem serve` would (the same URL forms, the same driver options).
 * Opening migrates SQL stores (the demo does so at startup); call `migrate()` again to be explicit.
 *
 * @example
 * const { store, close } = await openStore('sqlite:./.idem/idem.db')
 */
export async function openStore(url: string, ledger?: string): Promise<OpenedStore> {
  const [{ openBackend }, { loadConfig }] = await Promise.all([import('../../demo/stores.js'), import('../../demo/config.js')]);
  const config = loadConfig({}, ['--store', url, ...(ledger ? ['--ledger', ledger] : [])]);
  const backend = await openBackend(config);
  return {
    store: backend.store,
    description: backend.description,
    close: () => backend.close(),
  };
}
