/**
 * Browser tests' harness: Debian's Chromium driven by playwright-core (never a downloaded browser), the built pages,
 * and screenshots under `test-results/browser/`.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WEB = join(ROOT, 'apps/demo/web');
const BUILT = join(ROOT, 'apps/demo/dist/public/index.html');
export const CHROMIUM = process.env.IDEM_TEST_CHROMIUM ?? '/usr/bin/chromium';
export const SCREENSHOTS = join(ROOT, 'test-results/browser');

export const VIEWPORTS = [
  { name: 'desktop', width: 1280, height: 800 },
  { name: 'phone', width: 390, height: 844 },
] as const;
export type Viewport = (typeof VIEWPORTS)[number];

/**
 * For `describe.skipIf(!chromiumAvailable())`: true when Chromium is installed; false (loudly) outside CI; throws
 * under `CI=true`, where `.ci/run` installs it.
 */
export function chromiumAvailable(): boolean {
  if (existsSync(CHROMIUM)) return true;
  const message = `Chromium is not installed at ${CHROMIUM} (apt-get install chromium, or set IDEM_TEST_CHROMIUM)`;
  if (process.env.CI === 'true') throw new Error(`${message}; CI requires it.`);
  console.warn(`\n*** SKIPPING browser tests: ${message}. ***\n`);
  return false;
}

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * Builds the pages when `dist/demo/public` is missing or older than demo/web (`npm test` builds first; this covers
 * `npx vitest run test/browser`). A lock directory keeps two test files from building at once.
 */
export async function ensureBuilt(): Promise<void> {
  // The lab bundles idem/client from its source (web/vite.config.ts), so a change there is a change to the page.
  const newest = () => Math.max(newestSource(WEB), newestSource(join(ROOT, 'packages/idem/src/client')));
  const fresh = () => existsSync(BUILT) && statSync(BUILT).mtimeMs >= newest();
  if (fresh()) return;
  const lock = join(ROOT, 'apps/demo/dist/.pages-build-lock');
  mkdirSync(join(ROOT, 'apps/demo/dist'), { recursive: true });
  // Taken by creating it (EEXIST while another build holds it).
  const take = () => {
    mkdirSync(lock);
    return true;
  };
  await waitFor(`${lock} (remove it if no build is running)`, take, {
    timeoutMs: 120_000,
    everyMs: 200,
    retryOnError: true,
  });
  try {
    if (!fresh()) {
      execFileSync(
        process.execPath,
        [join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', '--config', join(WEB, 'vite.config.ts')],
        {
          cwd: ROOT,
          stdio: 'pipe',
        },
      );
    }
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

export interface Browser {
  readonly context: BrowserContext;
  /**
   * A new tab (so a new sessionStorage: a new lab sandbox account) at this viewport. Script errors and console errors
   * (a CSP violation, say) are collected in `errors`, except Chromium's own line for each failed or non-2xx request.
   */
  page(viewport: Viewport): Promise<Page & { errors: string[] }>;
  close(): Promise<void>;
}

/**
 * Launches headless Chromium with a fresh profile directory, removed on close.
 *
 * @example
 * const browser = await launch()
 * const page = await browser.page(VIEWPORTS[0])
 */
export async function launch(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'idem-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    async page(viewport) {
      const page = await context.newPage();
      await page.setViewportSize({ width: viewport.width, height: viewport.height });
      const errors: string[] = [];
      page.on('console', (message) => {
        // Chromium logs every non-2xx answer and every dropped request; the lab provokes those on purpose.
        if (message.type() === 'error' && !message.text().startsWith('Failed to load resource:'))
          errors.push(message.text());
      });
      page.on('pageerror', (error) => errors.push(String(error)));
      return Object.assign(page, { errors });
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Saves a full-page screenshot as `test-results/browser/<name>-<viewport>.png` and returns its path.
 *
 * @example
 * await screenshot(page, 'lab-flaky-retry', VIEWPORTS[0])
 */
export async function screenshot(page: Page, name: string, viewport: Viewport): Promise<string> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}-${viewport.name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/**
 * Resolves once `read()` returns `expected` (compared as JSON); fails with the last value seen after `timeoutMs`.
 * For figures that update after a request completes. Not a timing assertion: only the final value is checked.
 *
 * @example
 * await until(() => page.getByTestId('charged-total').textContent(), '$500.00')
 */
export async function until<T>(read: () => Promise<T>, expected: T, timeoutMs = 15_000): Promise<void> {
  let last = '';
  await waitFor(
    () => `${JSON.stringify(expected)}, still ${last}`,
    async () => (last = JSON.stringify(await read())) === JSON.stringify(expected),
    { timeoutMs, everyMs: 50 },
  );
}

/** One accessibility rule broken on a page, as axe-core reports it (only what a failing test needs to show). */
export interface AxeViolation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly targets: readonly string[];
}

/**
 * Runs axe-core (the pinned devDependency) on the page as it is now and returns its serious and critical violations.
 * The source is evaluated through the DevTools protocol, which the pages' CSP (no inline script) does not govern.
 *
 * @example
 * expect(await seriousViolations(page)).toEqual([])
 */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(readFileSync(join(ROOT, 'node_modules/axe-core/axe.min.js'), 'utf8'));
  const violations = await page.evaluate(async () => {
    const axe = (
      window as unknown as {
        axe: {
          run(context: Document): Promise<{
            violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }>;
          }>;
        };
      }
    ).axe;
    const result = await axe.run(document);
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      targets: v.nodes.map((n) => n.target.map(String).join(' ')),
    }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/**
 * A page's last checks, then it is closed: no serious accessibility violation; its screenshot `name` (scrolled to
 * the heading named `heading` first, when given); no script or console error.
 *
 * @example
 * await closeChecked(page, 'lab-empty', viewport)
 */
export async function closeChecked(
  page: Page & { errors: string[] },
  name: string,
  viewport: Viewport,
  heading?: string | RegExp,
): Promise<void> {
  expect(await seriousViolations(page)).toEqual([]);
  if (heading !== undefined) await page.getByRole('heading', { name: heading }).scrollIntoViewIfNeeded();
  await screenshot(page, name, viewport);
  expect(page.errors).toEqual([]);
  await page.close();
}
