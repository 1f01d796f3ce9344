/**
 * The lab page in real Chromium against the real demo server (SQLite), at desktop and phone sizes. Every figure
 * checked is one the page read back from the server; each test also asks the server directly, as the page's account.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import {
  VIEWPORTS,
  chromiumAvailable,
  ensureBuilt,
  launch,
  screenshot,
  seriousViolations,
  until,
  type Browser,
} from './harness.js';

/** Waits until every control's requests have finished, the figures were read back and the narration is final. */
const settled = (page: Page) => page.waitForSelector('body[data-pending="0"]', { state: 'attached' });
const total = (page: Page) => page.getByTestId('charged-total').textContent();
const intended = (page: Page) => page.getByTestId('intended-total').textContent();
const rows = (page: Page) => page.getByTestId('rows-count').textContent();
const narration = async (page: Page) => ((await page.getByTestId('narration').textContent()) ?? '').trim();
/** The request log's outcomes, in order (`data-outcome` on each row). */
const outcomes = (page: Page) =>
  page
    .locator('[data-testid="request-log"] tbody tr')
    .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-outcome')));
const logTexts = (page: Page) => page.locator('[data-testid="request-log"] tbody tr').allInnerTexts();
/** The Intended and Actually charged boxes: whether each is marked as differing, and the callout (null when hidden). */
const mismatch = async (page: Page) => [
  await page.locator('#intended-stat').evaluate((el) => el.classList.contains('differs')),
  await page.locator('#charged-stat').evaluate((el) => el.classList.contains('differs')),
  (await page.getByTestId('charge-callout').isVisible())
    ? await page.getByTestId('charge-callout').textContent()
    : null,
];
/** The timeline's payments: for each, the outcomes of its attempts in order. */
const threads = (page: Page) =>
  page
    .getByTestId('timeline')
    .locator('.thread')
    .evaluateAll((els) =>
      els.map((el) => [...el.querySelectorAll('.attempt')].map((a) => a.getAttribute('data-outcome'))),
    );
/** The balance as the server reports it for the page's sandbox account. */
const serverBalance = async (page: Page, url: string) => {
  const key = await page.evaluate('sessionStorage.getItem("idem-lab-api-key")');
  const response = await fetch(`${url}/v1/balance`, { headers: { authorization: `Bearer ${String(key)}` } });
  return (await response.json()) as { charged: number; count: number };
};

/** Layout checks that hold at every size: no sideways scroll, no clipped timeline text, timeline text ≥ 12 px. */
const layout = (page: Page) =>
  page.evaluate(() => {
    const timeline = document.querySelector('[data-testid="timeline"]') as HTMLElement;
    const clipped = [...timeline.querySelectorAll<HTMLElement>('.attempt, .group-label, .thread-head, .step-text')]
      .filter((el) => el.scrollWidth > el.clientWidth + 1)
      .map((el) => el.textContent);
    const texts = [...document.querySelectorAll<HTMLElement>('[data-testid="timeline"] *, #race-strip text')].filter(
      (el) => [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && (n.textContent ?? '').trim() !== ''),
    );
    const smallest = Math.min(...texts.map((el) => parseFloat(getComputedStyle(el).fontSize)));
    return {
      pageWidth: document.documentElement.scrollWidth,
      timelineOverflow: timeline.scrollWidth - timeline.clientWidth,
      clipped,
      smallest,
    };
  });

const SHOW_ME = [
  'Show me a replay after a dropped connection',
  'Show me a 409 while the first attempt runs',
  'Show me a failed attempt retried',
  'Show me a double charge without keys',
] as const;

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
    it('shows the empty state first, read from the server, with the guided buttons and no accessibility violations', async () => {
      const page = await open(viewport);
      expect(await page.title()).toBe('Idempotency-Key Retry Safety Lab · Idem');
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Idempotency-Key Retry Safety Lab');
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$0.00', '$0.00', '0']);
      expect(await narration(page)).toBe(
        'Nothing sent yet. Press one of the “Show me” buttons above, or Charge $500 below.',
      );
      expect(await page.locator('#records-empty').textContent()).toBe(
        'empty — the first POST will atomically insert (key, hash, in_progress)',
      );
      expect(await page.getByRole('button', { name: /^Show me/ }).allTextContents()).toEqual([...SHOW_ME]);
      for (const name of ['Charge $500', 'Retry', 'Race', 'Tamper', 'New key', 'Reset']) {
        expect(await page.getByRole('button', { name, exact: true }).count()).toBe(1);
      }
      for (const name of ['Use idempotency keys', 'Flaky connection', 'Processor fails']) {
        expect(await page.getByRole('checkbox', { name, exact: true }).count()).toBe(1);
      }
      expect(await page.getByRole('combobox', { name: 'Slow processor' }).inputValue()).toBe('300');
      expect(await page.getByRole('combobox', { name: 'Race size' }).inputValue()).toBe('5');
      for (const name of ['How it works', 'Trade-offs'])
        expect(await page.getByRole('heading', { name, exact: true }).count()).toBe(1);
      // The states a retry meets include failed, both kinds.
      expect(await page.locator('#how-h ~ ul li strong').allTextContents()).toEqual([
        'Succeeded',
        'Failed',
        'In progress',
      ]);
      expect(await page.evaluate('document.documentElement.scrollWidth')).toBe(viewport.width);
      expect(await seriousViolations(page)).toEqual([]);
      await screenshot(page, 'lab-empty', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a replay after a dropped connection: one click, the retry replays, $500.00 charged once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: SHOW_ME[0] }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped', 'replayed']);
      expect(await narration(page)).toBe(
        'The server charged $500.00 and committed, but the connection died before the answer reached you. Your retry with the same key got the stored 201 back, marked as a replay: charged once.',
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await mismatch(page)).toEqual([false, false, null]);
      // The dropped charge and its retry are one payment in the timeline, and the read-back shows what the server did.
      expect(await threads(page)).toEqual([['dropped', 'replayed']]);
      expect(await page.getByTestId('timeline').getByTestId('read-back').locator('.step-text').textContent()).toBe(
        'read back: succeeded 201',
      );
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-show-replay', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a 409 while the first attempt runs: the retry gets 409, the first then charges once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: SHOW_ME[1] }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['executed', 'in-flight']);
      expect(await narration(page)).toBe(
        'Your retry arrived while the first attempt still held the key (its processor takes 1 s), so the server answered 409 with Retry-After 1 s instead of charging again. The first attempt then finished: $500.00 charged once.',
      );
      expect((await logTexts(page))[1]).toContain('409 in flight · Retry-After 1 s');
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await threads(page)).toEqual([['executed', 'in-flight']]);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-show-409', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('while a demo runs, the other demos and Reset wait: no narration from an older click, no demo sending to a new account', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: SHOW_ME[1] }).click(); // the 409 demo holds the key for 1 s
      // A hostile review clicked Reset mid-flight: the old demo's sentence then contradicted the fresh $0.00 figures.
      const disabled = await page.evaluate(() => ({
        busy: document.body.getAttribute('aria-busy'),
        reset: document.querySelector<HTMLButtonElement>('#reset')?.disabled ?? null,
        guides: [...document.querySelectorAll('button')]
          .filter((b) => b.textContent?.startsWith('Show me'))
          .map((b) => b.disabled),
      }));
      expect(disabled).toEqual({ busy: 'true', reset: true, guides: [true, true, true, true] });
      await settled(page);
      expect(await page.evaluate(() => document.body.getAttribute('aria-busy'))).toBe('false');
      expect(await narration(page)).toMatch(/^Your retry arrived while the first attempt still held the key/);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a failed attempt retried: 503 keeps the key retryable, the retry reclaims it and charges once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: SHOW_ME[2] }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['processor-failed', 'executed']);
      expect(await narration(page)).toBe(
        'The processor failed, so the server answered 503 and marked the key failed but retryable. Your retry with the same key reclaimed it and charged $500.00: once.',
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await page.locator('[data-testid="records-table"] tbody tr').getAttribute('data-status')).toBe(
        'succeeded',
      );
      expect(await page.getByTestId('timeline').locator('.o-executed .step-text').allTextContents()).toContain(
        'claim: reclaimed the failed key',
      );
      await screenshot(page, 'lab-show-failed', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a double charge without keys: $1,000.00 charged for $500.00 intended, both red, one line why', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: SHOW_ME[3] }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped', 'executed']);
      expect(await narration(page)).toBe(
        'Without a key, the server could not tell your retry from a new payment: the dropped charge had already gone through, so the retry charged $500.00 a second time.',
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$1,000.00', '0']);
      expect(await mismatch(page)).toEqual([
        true,
        true,
        'Charged $500.00 more than you meant to pay: without a key, a repeated request ran the charge again.',
      ]);
      expect(await page.locator('#charged').evaluate((el) => getComputedStyle(el).color)).toBe('rgb(179, 38, 30)');
      expect(await threads(page)).toEqual([['dropped', 'executed']]);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 100000, count: 2 });
      expect(await seriousViolations(page)).toEqual([]);
      await screenshot(page, 'lab-show-double', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('every control narrates: flaky Charge, Retry, Tamper, New key', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Flaky connection' }).check();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await narration(page)).toBe(
        'The server charged $500.00 and committed; the connection died before the answer reached you. Retry with the same key.',
      );
      expect([await intended(page), await total(page)]).toEqual(['$500.00', '$500.00']);
      await page.getByRole('button', { name: 'Retry' }).click();
      await settled(page);
      expect(await narration(page)).toBe(
        'The key was already completed, so the server sent the stored 201 again, marked as a replay, and charged nothing. Still charged once.',
      );
      await page.getByRole('button', { name: 'Tamper' }).click();
      await settled(page);
      expect(await narration(page)).toBe(
        'Same key, different body ($5,000.00): the server refused with 400 and ran nothing. A key belongs to one request.',
      );
      expect(await outcomes(page)).toEqual(['dropped', 'replayed', 'mismatch']);
      // Outcome first, then its count: never "1 400 mismatch".
      expect(await page.getByTestId('attempts-detail').textContent()).toBe(
        'connection dropped: 1 · replayed: 1 · 400 mismatch: 1',
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await mismatch(page)).toEqual([false, false, null]);
      await page.getByRole('button', { name: 'New key' }).click();
      expect(await narration(page)).toMatch(
        /^New Idempotency-Key [0-9a-f]{8}…[0-9a-f]{4}: the next Charge \$500 is a new payment, and a Race on it shows 409s\.$/,
      );
      await screenshot(page, 'lab-narration', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Race with 5 on a fresh key: all five requests are sent in one tick before any redraw; one executes, four get 409', async () => {
      const page = await browser.page(viewport);
      // Records, for each POST /v1/charges, the synchronous run it was sent in and how many log rows were drawn then.
      await page.addInitScript(() => {
        const sent: Array<{ run: number; drawn: number }> = [];
        let run = 0;
        let scheduled = false;
        const original = window.fetch.bind(window);
        (window as unknown as { sent: typeof sent }).sent = sent;
        window.fetch = (input: RequestInfo | URL, init?: RequestInit) => {
          if (typeof input === 'string' && input === '/v1/charges') {
            if (!scheduled) {
              scheduled = true;
              queueMicrotask(() => {
                run++;
                scheduled = false;
              });
            }
            sent.push({ run, drawn: document.querySelectorAll('[data-testid="request-log"] tbody tr').length });
          }
          return original(input, init);
        };
      });
      await page.goto(`${server.url}/`);
      await settled(page);
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('1000');
      await page.getByRole('button', { name: 'Race' }).click();
      await settled(page);
      expect(await page.evaluate('window.sent')).toEqual(Array.from({ length: 5 }, () => ({ run: 0, drawn: 0 })));
      expect(await outcomes(page)).toEqual(['executed', 'in-flight', 'in-flight', 'in-flight', 'in-flight']);
      expect(await narration(page)).toBe(
        '5 identical requests with one key left together: 1 ran the charge, 4 got 409 because the first still held the key. $500.00 charged once.',
      );
      expect(await page.getByTestId('attempts-detail').textContent()).toBe('executed: 1 · 409 in flight: 4');
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await page.getByTestId('timeline').locator('.race-group .attempt').count()).toBe(5);
      expect(await page.locator('#race-strip .bar').count()).toBe(5);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-race', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('the timeline stays readable after a dozen attempts: no sideways scroll, nothing clipped, text ≥ 12 px', async () => {
      const page = await open(viewport);
      for (const name of SHOW_ME) {
        await page.getByRole('button', { name }).click();
        await settled(page);
      }
      await page.getByRole('button', { name: 'New key' }).click();
      await page.getByRole('button', { name: 'Race' }).click();
      await settled(page);
      // Payments in order; each charge with its retries, the race in one box of its own payment.
      expect(await threads(page)).toEqual([
        ['dropped', 'replayed'],
        ['executed', 'in-flight'],
        ['processor-failed', 'executed'],
        ['dropped', 'executed'],
        ['executed', 'in-flight', 'in-flight', 'in-flight', 'in-flight'],
      ]);
      const measured = await layout(page);
      expect(measured).toEqual({ pageWidth: viewport.width, timelineOverflow: 0, clipped: [], smallest: 12 });
      expect(await seriousViolations(page)).toEqual([]);
      await page.getByRole('heading', { name: 'Timeline' }).scrollIntoViewIfNeeded();
      await screenshot(page, 'lab-timeline', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('keys off, Charge twice: two real charges, $1,000.00 meant and charged, and no idempotency rows', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Use idempotency keys' }).uncheck();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['executed', 'executed']);
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$1,000.00', '$1,000.00', '0']);
      expect(await mismatch(page)).toEqual([false, false, null]);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 100000, count: 2 });
      expect(await page.getByRole('button', { name: 'Tamper' }).isDisabled()).toBe(true);
      await screenshot(page, 'lab-keys-off', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  });

  it('Processor fails, never retried: $500.00 intended, $0.00 charged, and the callout says to retry', async () => {
    const viewport = VIEWPORTS[0];
    const page = await open(viewport);
    await page.getByRole('checkbox', { name: 'Processor fails' }).check();
    await page.getByRole('button', { name: 'Charge $500' }).click();
    await settled(page);
    expect(await narration(page)).toBe(
      'The processor failed, so the server answered 503 and marked the key failed but retryable. Retry with the same key to run the charge again.',
    );
    expect([await intended(page), await total(page)]).toEqual(['$500.00', '$0.00']);
    expect(await mismatch(page)).toEqual([
      true,
      true,
      '$500.00 you meant to pay has not been charged yet: its attempt failed. Press Retry.',
    ]);
    await page.getByRole('checkbox', { name: 'Processor fails' }).uncheck();
    await page.getByRole('button', { name: 'Retry' }).click();
    await settled(page);
    expect(await outcomes(page)).toEqual(['processor-failed', 'executed']);
    expect(await narration(page)).toBe(
      "The key's last attempt had failed and was marked retryable, so this retry reclaimed the key and charged $500.00: once.",
    );
    expect(await mismatch(page)).toEqual([false, false, null]);
    await page.close();
  });

  it('works from the keyboard: Tab to Charge $500, Enter charges; Reset starts a fresh account', async () => {
    const viewport = VIEWPORTS[0];
    const page = await open(viewport);
    const focused = () => page.evaluate('document.activeElement && document.activeElement.textContent');
    for (let i = 0; i < 15 && (await focused()) !== 'Charge $500'; i++) await page.keyboard.press('Tab');
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
    expect([await intended(page), await rows(page), await outcomes(page)]).toEqual(['$0.00', '0', []]);
    expect(await narration(page)).toMatch(
      /^Reset: deleted 1 charge and moved to a fresh sandbox account, acct_lab_[a-z0-9]{16}\. Nothing is charged and no key is stored\.$/,
    );
    expect(await page.locator('#account').textContent()).not.toBe(before);
    expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 0, count: 0 });
    await screenshot(page, 'lab-keyboard-reset', viewport);
    await page.close();
  });
});
