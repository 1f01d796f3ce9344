/**
 * The lab page in real Chromium against the real demo server (SQLite), at desktop and phone sizes. Every figure
 * checked is one the page read back from the server; each test also asks the server directly, as the page's account.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { GUIDED, callout, narration, outcomes, paymentRows, settled } from './lab-oracle.js';
import {
  type Browser,
  chromiumAvailable,
  closeChecked,
  ensureBuilt,
  launch,
  screenshot,
  until,
  VIEWPORTS,
} from './harness.js';

const total = (page: Page) => page.getByTestId('charged-total').textContent();
const intended = (page: Page) => page.getByTestId('intended-total').textContent();
const rows = (page: Page) => page.getByTestId('rows-count').textContent();
const logTexts = (page: Page) => page.locator('[data-testid="request-log"] tbody tr').allInnerTexts();
/** A ledger row's id as the page abbreviates it. */
const ROW = 'ch_[0-9a-f]{4}…[0-9a-f]{4}';
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

const SHOW_ME = GUIDED;
const [DOUBLE, REPLAY, IN_FLIGHT, FAILED] = SHOW_ME;

describe.skipIf(!chromiumAvailable())('lab page in Chromium', () => {
  const dir = tempDir();
  let server: DemoProcess;
  let browser: Browser;
  beforeAll(async () => {
    await ensureBuilt();
    server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_LEASE_MS: '2000' });
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
    it('shows the empty state first: what a key is above the fold, the guided buttons, no accessibility violations', async () => {
      const page = await open(viewport);
      expect(await page.title()).toBe('Idempotency-Key Retry Safety Lab · Idem');
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Idempotency-Key Retry Safety Lab');
      // Three lines on what a key is and who makes it, above the fold; the double charge is the first lesson.
      const facts = page.getByRole('list', { name: 'What an idempotency key is' }).locator('li');
      expect(await facts.evaluateAll((lis) => lis.map((li) => li.querySelector('strong')?.textContent))).toEqual([
        'What:',
        'Who:',
        'Why:',
      ]);
      expect((await facts.last().boundingBox())!.y + (await facts.last().boundingBox())!.height).toBeLessThan(
        viewport.height,
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$0.00', '$0.00', '0']);
      expect(await narration(page)).toBe(
        'Nothing sent yet. Press one of the “Show me” buttons above, or Charge $500 below.',
      );
      expect(await callout(page)).toEqual({
        flag: 'none',
        text: 'No payments yet. Each one’s Intended and Charged will be compared here, as the ledger reads them.',
      });
      expect(await page.locator('#records-empty').textContent()).toBe(
        'empty — the first POST will atomically insert (key, hash, in_progress)',
      );
      expect(await page.getByRole('button', { name: /^Show me/ }).allTextContents()).toEqual([...SHOW_ME]);
      for (const name of ['Charge $500', 'Retry', 'Race', 'Tamper', 'New key', 'Reset']) {
        expect(await page.getByRole('button', { name, exact: true }).count()).toBe(1);
      }
      for (const name of ['Use idempotency keys', 'Auto-retry', 'Flaky connection', 'Processor fails']) {
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
      await closeChecked(page, 'lab-empty', viewport);
    });

    it('Show me a replay after a dropped connection: one click, the retry replays, $500.00 charged once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: REPLAY }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped', 'replayed']);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^The server charged \\$500\\.00 \\(${ROW}\\) and stored the 201 with the key, but the connection was cut before the answer reached you\\. Your retry with the same key got that stored 201 back, marked as a replay: charged once\\.$`,
        ),
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$500.00', 'once']]);
      // The dropped charge and its retry are one payment in the timeline, and the read-back shows what the server did.
      expect(await threads(page)).toEqual([['dropped', 'replayed']]);
      expect(
        await page.getByTestId('timeline').getByTestId('read-back').locator('.step-text').allTextContents(),
      ).toEqual(['record: succeeded 201', 'record: succeeded 201']);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-show-replay', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a 409 while the first attempt runs: the retry gets 409, the first then charges once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: IN_FLIGHT }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['charged', 'in-flight']);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^Your retry arrived while the first attempt still held the key \\(its processor takes 1 s\\), so the server answered 409 with Retry-After [12] s and ran nothing\\. The first attempt then finished: \\$500\\.00 charged once \\(${ROW}\\)\\.$`,
        ),
      );
      expect((await logTexts(page))[1]).toMatch(/409 in flight · Retry-After [12] s/);
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await threads(page)).toEqual([['charged', 'in-flight']]);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-show-409', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('while a demo runs, the other demos and Reset wait: no narration from an older click, no demo sending to a new account', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: IN_FLIGHT }).click(); // the 409 demo holds the key for 1 s
      const disabled = await page.evaluate(() => ({
        busy: document.body.getAttribute('aria-busy'),
        reset: document.querySelector<HTMLButtonElement>('#reset')?.disabled ?? null,
        guides: [...document.querySelectorAll('button')]
          .filter((b) => b.textContent?.startsWith('Show me'))
          .map((b) => b.disabled),
      }));
      expect(disabled).toEqual({ busy: 'true', reset: true, guides: SHOW_ME.map(() => true) });
      await settled(page);
      expect(await page.evaluate(() => document.body.getAttribute('aria-busy'))).toBe('false');
      expect(await narration(page)).toMatch(/^Your retry arrived while the first attempt still held the key/);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a failed attempt retried: 503 keeps the key retryable, the retry reclaims it and charges once', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: FAILED }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['processor-failed', 'charged']);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^The processor failed: the server answered 503 and marked the key failed but retryable, charging nothing\\. Your retry with the same key reclaimed it under the same record id and charged \\$500\\.00 \\(${ROW}\\): once\\.$`,
        ),
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await page.locator('[data-testid="records-table"] tbody tr').getAttribute('data-status')).toBe(
        'succeeded',
      );
      expect(await page.getByTestId('timeline').locator('.o-charged .step-text').allTextContents()).toContain(
        'claim: reclaimed the failed key, same id',
      );
      await screenshot(page, 'lab-show-failed', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Show me a double charge without keys: $1,000.00 charged for $500.00 meant, flagged on its payment', async () => {
      const page = await open(viewport);
      await page.getByRole('button', { name: DOUBLE }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['dropped', 'charged']);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^Without a key the server could not tell your retry from a new payment\\. The dropped request had charged \\$500\\.00 \\(${ROW}\\) before its answer was lost, and the retry charged \\$500\\.00 again \\(${ROW}\\): \\$1,000\\.00 for the \\$500\\.00 you meant\\.$`,
        ),
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$1,000.00', '0']);
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$1,000.00', 'over']]);
      expect(await callout(page)).toEqual({
        flag: 'over',
        text: 'Payment 1 was charged $1,000.00 (2 charges) for the $500.00 you meant: a double charge.',
      });
      expect(await page.locator('[data-payment="1"] .c-charged').evaluate((el) => getComputedStyle(el).color)).toBe(
        'rgb(179, 38, 30)',
      );
      expect(await threads(page)).toEqual([['dropped', 'charged']]);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 100000, count: 2 });
      await closeChecked(page, 'lab-show-double', viewport);
    });

    it('every control narrates: flaky Charge, Retry, Tamper, New key', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Flaky connection' }).check();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^The server charged \\$500\\.00 \\(${ROW}\\), then the connection was cut before the answer reached you\\. The key's record says succeeded 201: a retry with the same key gets that answer back\\.$`,
        ),
      );
      expect([await intended(page), await total(page)]).toEqual(['$500.00', '$500.00']);
      await page.getByRole('button', { name: 'Retry' }).click();
      await settled(page);
      expect(await narration(page)).toBe(
        'The key was already completed, so the server sent the stored 201 again, marked as a replay, and ran nothing: no new charge.',
      );
      await page.getByRole('button', { name: 'Tamper' }).click();
      await settled(page);
      expect(await narration(page)).toBe(
        "Same key, different body ($5,000.00): the request's hash did not match the one stored with the key, so the server refused with 400 and ran nothing.",
      );
      expect(await outcomes(page)).toEqual(['dropped', 'replayed', 'mismatch']);
      // Outcome first, then its count: never "1 400 mismatch".
      expect(await page.getByTestId('attempts-detail').textContent()).toBe(
        'charged, answer dropped: 1 · 201 replayed: 1 · 400 mismatch: 1',
      );
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$500.00', 'once']]);
      await page.getByRole('button', { name: 'New key' }).click();
      expect(await narration(page)).toMatch(
        /^New Idempotency-Key [0-9a-f]{8}…[0-9a-f]{4}: the next Charge \$500 is a new payment, and a Race on it shows 409s\.$/,
      );
      await screenshot(page, 'lab-narration', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('Race with 5 on a fresh key: all five requests are sent in one tick before any redraw; one charges, four get 409', async () => {
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
      expect(await outcomes(page)).toEqual(['charged', 'in-flight', 'in-flight', 'in-flight', 'in-flight']);
      expect(await narration(page)).toMatch(
        new RegExp(
          `^5 identical requests with one key left together: 1 ran the charge \\(${ROW}\\), 4 got 409 while it held the key\\. The ledger holds 1 charge for this payment: \\$500\\.00\\.$`,
        ),
      );
      expect(await page.getByTestId('attempts-detail').textContent()).toBe('charged: 1 · 409 in flight: 4');
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$500.00', '$500.00', '1']);
      expect(await page.getByTestId('timeline').locator('.race-group .attempt').count()).toBe(5);
      expect(await page.locator('#race-strip .bar').count()).toBe(5);
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 50000, count: 1 });
      await screenshot(page, 'lab-race', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('the timeline stays readable after every guided run: no sideways scroll, nothing clipped, text ≥ 12 px', async () => {
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
        ['dropped', 'charged'],
        ['dropped', 'replayed'],
        ['charged', 'in-flight'],
        ['processor-failed', 'charged'],
        ['charged', 'mismatch'],
        ['declined', 'replayed'],
        ['crashed', 'in-flight', 'charged'],
        ['charged', 'in-flight', 'in-flight', 'in-flight', 'in-flight'],
      ]);
      const measured = await layout(page);
      expect(measured).toEqual({ pageWidth: viewport.width, timelineOverflow: 0, clipped: [], smallest: 12 });
      await closeChecked(page, 'lab-timeline', viewport, 'Timeline');
    });

    it('keys off, Charge twice: two payments, each charged once, and no idempotency rows', async () => {
      const page = await open(viewport);
      await page.getByRole('checkbox', { name: 'Use idempotency keys' }).uncheck();
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      await page.getByRole('button', { name: 'Charge $500' }).click();
      await settled(page);
      expect(await outcomes(page)).toEqual(['charged', 'charged']);
      expect([await intended(page), await total(page), await rows(page)]).toEqual(['$1,000.00', '$1,000.00', '0']);
      expect(await paymentRows(page)).toEqual([
        ['1', '$500.00', '$500.00', 'once'],
        ['2', '$500.00', '$500.00', 'once'],
      ]);
      expect((await callout(page)).flag).toBe('ok');
      expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 100000, count: 2 });
      expect(await page.getByRole('button', { name: 'Tamper' }).isDisabled()).toBe(true);
      await screenshot(page, 'lab-keys-off', viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  });

  it('Processor fails, never retried: $500.00 meant, $0.00 charged, and the flag line says to retry', async () => {
    const page = await open(VIEWPORTS[0]);
    await page.getByRole('checkbox', { name: 'Processor fails' }).check();
    await page.getByRole('button', { name: 'Charge $500' }).click();
    await settled(page);
    expect(await narration(page)).toBe(
      'The processor failed: the server answered 503 and marked the key failed but retryable. Nothing was charged; a retry with the same key runs the charge again.',
    );
    expect([await intended(page), await total(page)]).toEqual(['$500.00', '$0.00']);
    expect(await callout(page)).toEqual({
      flag: 'unpaid',
      text: 'Payment 1: meant, but nothing charged yet. Retry with the same key to charge once.',
    });
    await page.getByRole('checkbox', { name: 'Processor fails' }).uncheck();
    await page.getByRole('button', { name: 'Retry' }).click();
    await settled(page);
    expect(await outcomes(page)).toEqual(['processor-failed', 'charged']);
    expect(await narration(page)).toMatch(
      new RegExp(
        `^The key's last attempt had failed and was marked retryable, so this retry reclaimed the key under the same record id and charged \\$500\\.00 \\(${ROW}\\)\\.$`,
      ),
    );
    expect((await callout(page)).flag).toBe('ok');
    await page.close();
  });

  it('works from the keyboard: Tab to Charge $500, Enter charges; Reset starts a fresh account', async () => {
    const page = await open(VIEWPORTS[0]);
    const focused = () => page.evaluate('document.activeElement && document.activeElement.textContent');
    for (let i = 0; i < 20 && (await focused()) !== 'Charge $500'; i++) await page.keyboard.press('Tab');
    expect(await focused()).toBe('Charge $500');
    await page.keyboard.press('Enter');
    await settled(page);
    expect(await outcomes(page)).toEqual(['charged']);
    expect(await total(page)).toBe('$500.00');
    const before = await page.locator('#account').textContent();

    for (let i = 0; i < 20 && (await focused()) !== 'Reset'; i++) await page.keyboard.press('Tab');
    expect(await focused()).toBe('Reset');
    await page.keyboard.press('Enter');
    await settled(page);
    await until(() => total(page), '$0.00');
    expect([await intended(page), await rows(page), await outcomes(page)]).toEqual(['$0.00', '0', []]);
    expect(await narration(page)).toMatch(
      /^Reset: deleted 1 charge and moved to a fresh sandbox account, acct_lab_[a-z0-9]{16}, with no charges, records or history\.$/,
    );
    expect(await page.locator('#account').textContent()).not.toBe(before);
    expect(await serverBalance(page, server.url)).toEqual({ object: 'balance', charged: 0, count: 0 });
    await screenshot(page, 'lab-keyboard-reset', VIEWPORTS[0]);
    await page.close();
  });
});
