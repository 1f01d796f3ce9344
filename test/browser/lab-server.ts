/**
 * The servers the lab's browser tests run against: SQLite, PostgreSQL (a schema of its own) and Redis (a key prefix
 * of its own, the ledger in SQLite), each demo started once per describe block with Chromium beside it.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll } from 'vitest';
import pg from 'pg';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { VIEWPORTS, ensureBuilt, launch, type Browser, type Viewport } from './harness.js';
import { settled } from './lab-oracle.js';

export interface LabStore {
  readonly name: 'sqlite' | 'postgres' | 'redis';
  /** The service to reach first (null: none). */
  readonly service: string | null;
  /** The demo's environment, given a fresh temporary directory. */
  env(dir: string): Record<string, string>;
  /** Removes what `env` made outside `dir` (a PostgreSQL schema). */
  cleanup(): Promise<void>;
}

/** SQLite, PostgreSQL (a schema of its own) and Redis (a key prefix of its own, the ledger in SQLite). */
export function labStores(label: string): LabStore[] {
  const tag = `${label}_${randomBytes(4).toString('hex')}`;
  return [
    { name: 'sqlite', service: null, env: (dir) => ({ IDEM_STORE: `sqlite:${dir}/idem.db` }), cleanup: async () => {} },
    {
      name: 'postgres',
      service: POSTGRES_URL,
      env: () => ({ IDEM_STORE: `${POSTGRES_URL}?schema=${tag}` }),
      cleanup: async () => {
        const client = new pg.Client({ connectionString: POSTGRES_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${tag}" CASCADE`);
        await client.end();
      },
    },
    {
      name: 'redis',
      service: REDIS_URL,
      env: (dir) => ({ IDEM_STORE: `${REDIS_URL}?prefix=${tag}:`, IDEM_LEDGER: `${dir}/ledger.db` }),
      cleanup: async () => {},
    },
  ];
}

/** True when the store's service answers (skips loudly outside CI, fails under CI=true). */
export const storeAvailable = (store: LabStore): Promise<boolean> =>
  store.service === null ? Promise.resolve(true) : serviceAvailable(store.name, store.service);

/** One store's demo and a browser, for a describe block. `available` is false when the store's service is down. */
export interface LabSuite {
  readonly available: boolean;
  readonly url: string;
  readonly dir: string;
  /** A tab at the lab (on an existing sandbox account, if given: a duplicated tab keeps its sessionStorage), read. */
  open(viewport?: Viewport, account?: string, url?: string): ReturnType<Browser['page']>;
}

/**
 * Starts the demo on `store` with `env` before the block's tests and stops it after.
 *
 * @example
 * const lab = labSuite(store, { IDEM_LEASE_MS: '2000' })
 * it('…', async ({ skip }) => { if (!lab.available) skip(); const page = await lab.open() })
 */
export function labSuite(store: LabStore, env: Record<string, string> = {}): LabSuite {
  const dir = tempDir();
  let server: DemoProcess | undefined;
  let browser: Browser | undefined;
  let available = false;
  beforeAll(async () => {
    available = await storeAvailable(store);
    if (!available) return;
    await ensureBuilt();
    server = await startDemo({ ...store.env(dir.path), ...env });
    browser = await launch();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await store.cleanup();
    dir.remove();
  });
  return {
    get available() {
      return available;
    },
    get url() {
      return server?.url ?? '';
    },
    dir: dir.path,
    async open(viewport = VIEWPORTS[0], account, url = server?.url ?? '') {
      const page = await (browser as Browser).page(viewport);
      if (account) await page.addInitScript((key) => sessionStorage.setItem('idem-lab-api-key', key), account);
      await page.goto(`${url}/`);
      await settled(page);
      return page;
    },
  };
}
