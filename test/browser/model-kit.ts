/**
 * The model page's browser tests' kit: the three stores they run on (SQLite, PostgreSQL in its own schema, Redis
 * under its own prefix), one demo server per store, and the truth oracle: after each action, the claim the page's
 * sentence makes is checked against the record read through the model API, as the page's own sandbox account.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import type { ModelRecord } from '../../apps/demo/web/src/model-types.js';
import { VIEWPORTS, chromiumAvailable, ensureBuilt, launch, until, type Browser, type Viewport } from './harness.js';

const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const redis = await serviceAvailable('Redis', REDIS_URL);
const run = `${process.pid}_${Date.now()}`;

export interface ModelStore {
  readonly name: 'sqlite' | 'postgres' | 'redis';
  readonly skip: boolean;
  env(dir: string): Record<string, string>;
  cleanup(): Promise<void>;
}

/** The stores, each in a namespace of its own (a file per server, a schema, a key prefix), removed afterwards. */
export const STORES: readonly ModelStore[] = [
  {
    name: 'sqlite',
    skip: false,
    env: (dir) => ({ IDEM_STORE: `sqlite:${dir}/idem.db` }),
    cleanup: async () => {},
  },
  {
    name: 'postgres',
    skip: !postgres,
    env: () => {
      const schema = `model_browser_${run}_${Math.floor(Math.random() * 1e6)}`;
      schemas.push(schema);
      return { IDEM_STORE: `${POSTGRES_URL}?schema=${schema}` };
    },
    cleanup: async () => {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL });
      for (const schema of schemas.splice(0)) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  },
  {
    name: 'redis',
    skip: !redis,
    env: (dir) => ({ IDEM_STORE: `${REDIS_URL}?prefix=model-browser-${run}:`, IDEM_LEDGER: `${dir}/ledger.db` }),
    cleanup: async () => {
      const client = new Redis(REDIS_URL);
      const keys = await client.keys(`model-browser-${run}:*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    },
  },
];
const schemas: string[] = [];

/** One demo server for a store: its URL, and the model page opened on it once loaded. */
export type Demo = ReturnType<typeof serveModel>;

/**
 * The model page's suites: one Chromium for the file, then for each store a demo server and for each viewport the
 * tests `body` declares. `also` declares tests beside them, with the same browser.
 *
 * @example
 * eachModelPage('model page expiry in Chromium', (store, demo, viewport) => { it.skipIf(store.skip)(…) })
 */
export function eachModelPage(
  title: string,
  body: (store: ModelStore, demo: Demo, viewport: Viewport) => void,
  also?: (browser: () => Browser) => void,
): void {
  describe.skipIf(!chromiumAvailable())(title, () => {
    let browser: Browser;
    beforeAll(async () => {
      await ensureBuilt();
      browser = await launch();
    });
    afterAll(async () => {
      await browser?.close();
    });
    describe.each(STORES)('on the $name store', (store) => {
      const demo = serveModel(store, () => browser);
      describe.each(VIEWPORTS)('at $width×$height', (viewport) => body(store, demo, viewport));
    });
    also?.(() => browser);
  });
}

/**
 * Starts a demo server on `store` for the enclosing `describe`, and returns how to reach it and open the page.
 *
 * @example
 * const demo = serveModel(store, () => browser)
 * const page = await demo.open(VIEWPORTS[0])
 */
export function serveModel(store: ModelStore, browser: () => Browser) {
  const dir = tempDir();
  let server: DemoProcess | undefined;
  beforeAll(async () => {
    if (!store.skip) server = await startDemo(store.env(dir.path));
  });
  afterAll(async () => {
    await server?.stop();
    await store.cleanup();
    dir.remove();
  });
  return {
    url: () => server?.url ?? '',
    async open(viewport: Viewport) {
      const page = await browser().page(viewport);
      await page.goto(`${server?.url}/model`);
      await until(() => page.locator('#store-name').textContent(), store.name);
      await until(() => page.locator('[data-testid="seeded-rows"] tbody tr').count(), 4);
      await until(() => page.locator('[data-testid="attributes"] tbody tr').count(), 15);
      return page;
    },
  };
}

/** A record as `GET /v1/model/read` returns it: the page's record but its address and fingerprint. */
export type Row = Omit<ModelRecord, 'pk' | 'fingerprint'>;

/** The row under `key` in the page's own sandbox, read through the model API (null: the store holds none). */
export async function rowOf(page: Page, url: string, key: string): Promise<Row | null> {
  const apiKey = await page.evaluate(() => sessionStorage.getItem('idem-lab-api-key'));
  const answer = await fetch(`${url}/v1/model/read?key=${encodeURIComponent(key)}`, {
    headers: { authorization: `Bearer ${apiKey}` },
  });
  if (answer.status !== 200) throw new Error(`read ${key}: HTTP ${answer.status}`);
  return ((await answer.json()) as { result: Row | null }).result;
}

const label = (row: Row) => (row.status === 'failed' ? `failed, ${row.retryable ? 'retryable' : 'final'}` : row.status);
const same = (a: Row | null, b: Row | null) => JSON.stringify(a) === JSON.stringify(b);

/**
 * What is wrong with `message` given the row before and after the action (empty when its claim holds). Each message
 * starts with its claim: written (claimed, taken over, reclaimed, written, renewed, released), not written (refused,
 * nothing written), or read (found, no row).
 *
 * @example
 * expect(untrue('refused: nothing written. …', before, after)).toEqual([])
 */
export function untrue(message: string, before: Row | null, after: Row | null): string[] {
  const wrong: string[] = [];
  const need = (ok: boolean, what: string) => {
    if (!ok) wrong.push(`${what} (before ${JSON.stringify(before)}, after ${JSON.stringify(after)})`);
  };
  const claim = /^([a-z ]+):/.exec(message)?.[1] ?? '';
  switch (claim) {
    case 'claimed':
      need(after?.status === 'in_progress' && after.token !== before?.token, 'claimed: a new in_progress claim');
      need(after !== null && after.id !== before?.id && message.includes(after.id), 'claimed: a new id, named');
      if (message.includes('no row under this key')) need(before === null, 'claimed: there was no row');
      if (message.includes('had expired'))
        need(before !== null && before.expiresAt <= (after?.claimedAt ?? 0), 'expired before');
      break;
    case 'taken over':
    case 'reclaimed':
      need(
        before?.status === (claim === 'taken over' ? 'in_progress' : 'failed') &&
          (claim === 'taken over' ? before.leaseExpiresAt <= (after?.claimedAt ?? 0) : before.retryable === true),
        `${claim}: from a lapsed lease or a retryable failure`,
      );
      need(
        after?.status === 'in_progress' && after.id === before?.id && after.token !== before.token,
        `${claim}: same id, new token`,
      );
      need(after !== null && message.includes(after.id), `${claim}: names the id`);
      break;
    case 'written': {
      const to = /^written: in_progress → ([a-z_, ]+?), because/.exec(message)?.[1];
      need(before?.status === 'in_progress' && after !== null && label(after) === to, `written: in_progress → ${to}`);
      need(after?.token === before?.token, 'written: by the holder');
      break;
    }
    case 'renewed':
      need(
        before !== null && after?.token === before.token && after.leaseExpiresAt > before.leaseExpiresAt,
        'renewed: the lease moved forward',
      );
      break;
    case 'released':
      need(before?.status === 'in_progress' && after === null, 'released: the row is gone');
      break;
    case 'refused':
    case 'nothing written':
      need(same(before, after), `${claim}: the row did not change`);
      break;
    case 'found': {
      const status = /^found: status ([a-z_, ]+?)(, response|;|\.)/.exec(message)?.[1];
      need(after !== null && label(after) === status, `found: status ${status}`);
      if (message.includes('still stored')) need(after !== null, 'still stored');
      break;
    }
    case 'no row':
      need(after === null, 'no row');
      break;
    default:
      wrong.push(`no claim word in "${message}"`);
  }
  return wrong;
}

/**
 * Runs `act` on the page, waits for the verdict it produces in `output` (a new one, even if its text repeats), and
 * returns that verdict with the row under `key` read through the API just before and just after.
 *
 * @example
 * const { message, before, after } = await acted(page, url, 'claim-output', key, () => button.click())
 */
export async function acted(page: Page, url: string, output: string, key: string, act: () => Promise<void>) {
  const box = page.getByTestId(output);
  await box.evaluate((el) => el.querySelectorAll('.verdict').forEach((v) => v.setAttribute('data-old', '')));
  const before = await rowOf(page, url, key);
  await act();
  const fresh = box.locator('.verdict:not([data-old])').last();
  await fresh.waitFor({ timeout: 15_000 });
  const message = ((await fresh.textContent()) ?? '').trim();
  const after = await rowOf(page, url, key);
  return { message, before, after };
}

/**
 * Clicks the button named `button`, checks the verdict it produces in `output` against the row under `key` (the
 * oracle), and returns the verdict with the rows before and after.
 *
 * @example
 * const { message } = await step(page, demo.url(), 'claim-output', key, 'Run Claim a request key')
 */
export async function step(page: Page, url: string, output: string, key: string, button: string) {
  const seen = await acted(page, url, output, key, () =>
    page.getByRole('button', { name: button, exact: true }).click(),
  );
  expect(untrue(seen.message, seen.before, seen.after), seen.message).toEqual([]);
  return seen;
}

/** The lit transition and state on the drawing, and the status line's: they must agree. */
export async function lit(page: Page) {
  return page.evaluate(() => ({
    edges: [...document.querySelectorAll('.machine .edge.lit')].map((e) => e.getAttribute('data-edge')),
    states: [...document.querySelectorAll('.machine .state.lit')].map((e) => e.getAttribute('data-state')),
    status: document.querySelector('[data-testid="machine-status"]')?.getAttribute('data-transition') ?? null,
  }));
}

/** Clicks `button`, waits for the note with test id `note`, and returns the key it names (`pattern`'s group, or ''). */
export async function keyFromNote(page: Page, button: string, note: string, pattern: RegExp): Promise<string> {
  await page.getByRole('button', { name: button }).click();
  await page.getByTestId(note).waitFor();
  return pattern.exec((await page.getByTestId(note).textContent()) ?? '')?.[1] ?? '';
}
