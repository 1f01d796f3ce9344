/**
 * The lab page in real Chromium against the real demo server (SQLite), at desktop and phone sizes. Every figure
 * checked is one the page read back from the server; each test also asks the server directly, as the page's account.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { VIEWPORTS, chromiumAvailable, ensureBuilt, launch, screenshot, until, type Browser } from './harness.js';

/** Waits until every control's requests have finished and the figures were read back. */
const settled = (page: Page) => page.waitForSelector('body[data-pending="0"]', { state: 'attached' });
const total = (page: Page) => page.getByTestId('charged-total').textContent();
const rows = (page: Page) => page.getByTestId('rows-count').textContent();
/** The request log's outcomes, in order (`data-outcome` on each row). */
const outcomes = (page: Page) => page.locator('[data-testid="request-log"] tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-outcome')));
const logTexts = (page: Page) => page.locator('[data-testid="request-log"] tbody tr').allInnerTexts();
/** The balance as the server reports it for the page's sandbox account. */
const serverBalance = async (page: Page, url: string) => {
  const key = await page.evaluate('sessionStorage.getItem("idem-lab-api-key")');
  const response = await fetch(`${url}/v1/balance`, { headers: { authorization: `Bearer ${String(key)}` } });
  return (await response.json()) as { charged: number; count: number };
};

describe.skipIf(!chromiumAvailable())('lab page in Chromium', () => {
  const dir = tempDir();
  let server: DemoProcess;
  let browser: Browser;
  beforeAll(async () => {
    await ensureBuilt();
    server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db` });
    browser = await launch();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    dir.remove();
  });

  const open = async (viewport: (typeof VIEWPORTS)[number]) => {
    const page = await browser.page(viewport);
    await page.goto(`${server.url}/`);
    await settled(page);
    return page;
  };

  describe.each(VIEWPORTS)('at $width×$height', (viewport) => {
    it('shows the empty state first, read from the server', async () => {
      const page = await open(viewport);
      expect(await page.title()).toBe('Idempotency-Key Retry Safety Lab · Idem');
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Idempotency-Key Retry Safety Lab');
      expect([await total(page), await rows(page)]).toEqual(['$0.00', '0']);
      expect(await page.locator('#records-empty').textContent()).toBe('empty — the first POST will atomically insert (key, hash, in_progress)');
      expect(await page.locator('#log-empty').textContent()).toBe('No requests yet.');
      for (const name of ['Charge $500', 'Retry', 'Race', 'Tamper', 'New key', 'Reset']) {
        expect(await page.getByRole('button', { name, exact: true }).count()).toBe(1);
      }
      for (const name of ['Use idempotency keys', 'Flaky connection', 'Processor fails']) {
        expect(await page.getByRole('checkbox', { name, exact: true }).count()).toBe(1);
      }
      expect(await page.getByRole('combobox', { name: 'Slow processor' }).inputValue()).toBe('300');
      expect(await page.getByRole('combobox', { name: 'Race size' }).inputValue()).toBe('5');
      expect(await page.getByRole('heading', { name: 'How it works' }).count()).toBe(1);
      const width = await page.evaluate('document.documentElement.scrollWidth');
      expect(width).toBe(viewport.width); // nothing overflows the viewport sideways
      await screenshot(page, 'lab-empty', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('flaky charge, then Retry: the connection drops after commit, the retry replays, $500.00 charged once', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Flaky connection' }).check();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped']);
      expect((await logTexts(page))[0]).toContain('connection dropped');
      // The server committed before the connection died: the money moved, and the record says so.
      expect([await total(page), await rows(page)]).toEqual(['$500.00', '1']);
      expect(await page.locator('[data-testid="records-table"] tbody tr').getAttribute('data-status')).toBe('succeeded');
      expect(await page.getByTestId('timeline').locator('.o-dropped .readback').textContent()).toBe('read back: succeeded 201');

      await page.getByRole('button', { name: 'Retry' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped', 'replayed']);
      const retry = (await logTexts(page))[1] ?? '';
      expect(retry).toContain('replayed');
      expect(retry).toContain('201');
      expect([await total(page), await rows(page)]).toEqual(['$500.00', '1']);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      expect(await page.getByTestId('timeline').locator('g.attempt').count()).toBe(2);
      await screenshot(page, 'lab-flaky-retry', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Race with 5: one execution, the rest 409 in flight or replays, $500.00', async () => {
      const page = await open(viewport);
      expect(await page.getByRole('combobox', { name: 'Race size' }).inputValue()).toBe('5');
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('1000');
      await page.getByRole('button', { name: 'Race' }).click();
      await settled(page);
      const seen = await outcomes(page);
      expect(seen.length).toBe(5);
      expect(seen.filter((o) => o === 'executed').length).toBe(1);
      expect(seen.filter((o) => o !== 'executed').every((o) => o === 'in-flight' || o === 'replayed')).toBe(true);
      expect([await total(page), await rows(page)]).toEqual(['$500.00', '1']);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      expect(await page.getByTestId('timeline').locator('.race-group').count()).toBe(1);
      // The same five on one real time axis: one bar per request.
      expect(await page.locator('#race-strip .bar').count()).toBe(5);
      await screenshot(page, 'lab-race', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Tamper: the same key with $5,000 gets 400 mismatch, and the total is unchanged', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await total(page)).toBe('$500.00');
      await page.getByRole('button', { name: 'Tamper' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['executed', 'mismatch']);
      const tampered = (await logTexts(page))[1] ?? '';
      expect(tampered).toContain('$5,000');
      expect(tampered).toContain('400 mismatch');
      expect([await total(page), await rows(page)]).toEqual(['$500.00', '1']);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-tamper', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('keys off, Charge twice: two real charges, $1,000.00, and no idempotency rows', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Use idempotency keys' }).uncheck();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['executed', 'executed']);
      expect([await total(page), await rows(page)]).toEqual(['$1,000.00', '0']);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 100000, count: 2 });
      expect(await page.getByRole('button', { name: 'Tamper' }).isDisabled()).toBe(true);
      await screenshot(page, 'lab-keys-off', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  });

  it('keys off and a flaky connection: the retry charges again (what keys prevent)', async () => {
    const viewport = VIEWPORTS[0];
    const page = await open(viewport);
    await page.getByRole('checkbox', { name: 'Use idempotency keys' }).uncheck();
    await page.getByRole('checkbox', { name: 'Flaky connection' }).check();
    await page.getByRole('button', { name: 'Charge $500' }).click();
    await settled(page);
    // One click, one request: the browser did not silently resend the dropped POST.
    expect(await total(page)).toBe('$500.00');
    await page.getByRole('button', { name: 'Retry' }).click();
    await settled(page);
    expect(await outcomes(page)).toEqual(['dropped', 'executed']);
    expect(await total(page)).toBe('$1,000.00');
    await screenshot(page, 'lab-keys-off-flaky', viewport);
    await page.close();
  });

  it('Processor fails: 503 keeps the key retryable; the retry executes once', async () => {
    const viewport = VIEWPORTS[0];
    const page = await open(viewport);
    await page.getByRole('checkbox', { name: 'Processor fails' }).check();
    await page.getByRole('button', { name: 'Charge $500' }).click();
    await settled(page);
    expect([await total(page), await page.locator('[data-testid="records-table"] tbody tr').getAttribute('data-status')]).toEqual(['$0.00', 'failed']);
    await page.getByRole('checkbox', { name: 'Processor fails' }).uncheck();
    await page.getByRole('button', { name: 'Retry' }).click();
    await settled(page);
    expect(await outcomes(page)).toEqual(['processor-failed', 'executed']);
    expect([await total(page), await rows(page)]).toEqual(['$500.00', '1']);
    await page.close();
  });

  it('works from the keyboard: Tab to Charge $500, Enter charges; Reset starts a fresh account', async () => {
    const viewport = VIEWPORTS[0];
    const page = await open(viewport);
    const focused = () => page.evaluate('document.activeElement && document.activeElement.textContent');
    for (let i = 0; i < 10 && (await focused()) !== 'Charge $500'; i++) await page.keyboard.press('Tab');
    expect(await focused()).toBe('Charge $500');
    await page.keyboard.press('Enter');
    await settled(page);
    expect(await outcomes(page)).toEqual(['executed']);
    expect(await total(page)).toBe('$500.00');
    const before = await page.locator('#account').textContent();

    for (let i = 0; i < 20 && (await focused()) !== 'Reset'; i++) await page.keyboard.press('Tab');
    expect(await focused()).toBe('Reset');
    await page.keyboard.press('Enter');
    await settled(page);
    await until(() => total(page), '$0.00');
    expect([await rows(page), await outcomes(page)]).toEqual(['0', []]);
    expect(await page.locator('#account').textContent()).not.toBe(before);
    expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 0, count: 0 });
    await screenshot(page, 'lab-keyboard-reset', viewport);
    await page.close();
  });
});
