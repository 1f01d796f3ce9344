/**
 * The lab page says only what the server confirms (issue 28), on SQLite, PostgreSQL and Redis: after every action —
 * each guided run, the controls under faults, a race, the client's own retries — every claim on the page is checked
 * against the ledger and the records read through the API (lab-oracle.ts). axe: no serious or critical violation at
 * either size once the page is full.
 */
import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { VIEWPORTS, chromiumAvailable, screenshot, seriousViolations, type Viewport } from './harness.js';
import { GUIDED, callout, narration, outcomes, paymentRows, truthAfter } from './lab-oracle.js';
import { labStores, labSuite } from './lab-server.js';

const button = (page: Page, name: string) => page.getByRole('button', { name, exact: true });
const box = (page: Page, name: string) => page.getByRole('checkbox', { name, exact: true });

describe.skipIf(!chromiumAvailable()).each(labStores('lab_truth'))('lab page truth on $name', (store) => {
  const lab = labSuite(store, { IDEM_LEASE_MS: '2000' });

  const open = (viewport: Viewport) => lab.open(viewport);

  it('every guided run: each claim matches the ledger and the records, the problem first', async ({ skip }) => {
    if (!lab.available) skip();
    const page = await open(VIEWPORTS[0]);
    const { url } = lab;
    expect(await page.getByRole('button', { name: /^Show me/ }).allTextContents()).toEqual([...GUIDED]);
    for (const name of GUIDED)
      expect([name, await truthAfter(page, url, () => button(page, name).click())]).toEqual([name, []]);
    expect(await outcomes(page)).toEqual([
      ...['dropped', 'charged'],
      ...['dropped', 'replayed'],
      ...['charged', 'in-flight'],
      ...['processor-failed', 'charged'],
      ...['charged', 'mismatch'],
      ...['declined', 'replayed'],
      ...['crashed', 'in-flight', 'charged'],
    ]);
    expect(await paymentRows(page)).toEqual([
      ['1', '$500.00', '$1,000.00', 'over'],
      ['2', '$500.00', '$500.00', 'once'],
      ['3', '$500.00', '$500.00', 'once'],
      ['4', '$500.00', '$500.00', 'once'],
      ['5', '$500.00', '$500.00', 'once'],
      ['6', '$500.00', '$0.00', 'declined'],
      ['7', '$500.00', '$500.00', 'once'],
    ]);
    expect(await callout(page)).toEqual({
      flag: 'over',
      text: 'Payment 1 was charged $1,000.00 (2 charges) for the $500.00 you meant: a double charge.',
    });
    expect(await narration(page)).toMatch(
      /^The first attempt crashed mid-charge, leaving its record in_progress, so an early retry got 409\. Once the lease lapsed, a retry took the key over under the same record id \([0-9a-f]{8}…[0-9a-f]{4}\), which the processor uses as its own key: /,
    );
    for (const viewport of VIEWPORTS) {
      await page.setViewportSize(viewport);
      expect([viewport.name, await seriousViolations(page)]).toEqual([viewport.name, []]);
      await screenshot(page, `lab-truth-guided-${store.name}`, viewport);
    }
    expect(page.errors).toEqual([]);
    await page.close();
  });

  it.each(VIEWPORTS)(
    'at $width×$height, faults and controls: flaky + failing processor, keys off retries, a race, the client retrying by itself',
    async (viewport) => {
      if (!lab.available) return;
      const page = await open(viewport);
      const { url } = lab;
      const truth = (action: () => Promise<unknown>) => truthAfter(page, url, action);
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('0');
      // Flaky connection + Processor fails: the processor failed, nothing was charged, and the page says so.
      await box(page, 'Flaky connection').check();
      await box(page, 'Processor fails').check();
      expect(await truth(() => button(page, 'Charge $500').click())).toEqual([]);
      expect(await narration(page)).toBe(
        "The server charged nothing, then the connection was cut before the answer reached you. The key's record says failed 503, retryable: a retry with the same key runs the charge again.",
      );
      await box(page, 'Processor fails').uncheck();
      expect(await truth(() => button(page, 'Retry').click())).toEqual([]);
      expect(await narration(page)).toMatch(
        /^The key's last attempt had failed and was marked retryable, so this retry reclaimed the key under the same record id and charged \$500\.00 \(ch_/,
      );
      // Keys off, the processor failing: neither the charge nor its retry charged anything.
      await box(page, 'Flaky connection').uncheck();
      await box(page, 'Use idempotency keys').uncheck();
      await box(page, 'Processor fails').check();
      expect(await truth(() => button(page, 'Charge $500').click())).toEqual([]);
      expect(await truth(() => button(page, 'Retry').click())).toEqual([]);
      expect(await narration(page)).toBe(
        'The processor failed and the server answered 503: nothing was charged, and without a key no record was kept.',
      );
      expect((await paymentRows(page)).at(-1)).toEqual(['2', '$500.00', '$0.00', 'unpaid']);
      // Keys back on, a fresh key, a slow processor: a race of 5, one charge.
      await box(page, 'Processor fails').uncheck();
      await box(page, 'Use idempotency keys').check();
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('1000');
      await button(page, 'New key').click();
      expect(await truth(() => button(page, 'Race').click())).toEqual([]);
      // The log lists answers as they arrive: the winner's 201 may come after some 409s, so count them.
      expect((await outcomes(page)).slice(-5).sort()).toEqual([
        'charged',
        'in-flight',
        'in-flight',
        'in-flight',
        'in-flight',
      ]);
      expect(await truth(() => button(page, 'Tamper').click())).toEqual([]);
      // Auto-retry: the client's own retries turn the 409s of a race into replays, without a click.
      await box(page, 'Auto-retry').check();
      await button(page, 'New key').click();
      expect(await truth(() => button(page, 'Race').click())).toEqual([]);
      const raced = (await outcomes(page)).slice(10);
      expect([raced.filter((o) => o === 'charged').length, raced.filter((o) => o === 'replayed').length]).toEqual([
        1, 4,
      ]);
      expect(await narration(page)).toMatch(
        /^5 identical requests with one key left together \(\d+ with the client's retries\): 1 ran the charge \(ch_[0-9a-f]{4}…[0-9a-f]{4}\), \d+ got 409 while it held the key, 4 got the stored answer back\. The ledger holds 1 charge for this payment: \$500\.00\.$/,
      );
      // Auto-retry after a dropped connection: the client retried, and the retry replayed the stored 201.
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('0');
      await box(page, 'Flaky connection').check();
      await button(page, 'New key').click();
      expect(await truth(() => button(page, 'Charge $500').click())).toEqual([]);
      expect((await outcomes(page)).slice(-2)).toEqual(['dropped', 'replayed']);
      expect(await narration(page)).toMatch(
        /^Auto-retry sent 2 attempts \(charged, answer dropped → 201 replayed\)\. The first attempt charged \$500\.00 \(ch_[0-9a-f]{4}…[0-9a-f]{4}\), but its answer was lost\. Last: The key was already completed/,
      );
      expect((await paymentRows(page)).map((row) => row[3])).toEqual(['once', 'unpaid', 'once', 'once', 'once']);
      expect(page.errors).toEqual([]);
      await page.close();
    },
  );

  it('a double charge is flagged on its payment even when the totals match (a failed payment beside it)', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const page = await open(VIEWPORTS[0]);
    const { url } = lab;
    await box(page, 'Processor fails').check();
    const failed = await truthAfter(page, url, () => button(page, 'Charge $500').click());
    await box(page, 'Processor fails').uncheck();
    const doubled = await truthAfter(page, url, () => button(page, GUIDED[0]).click());
    // The finding: the totals match, yet payment 2 was charged twice. It is flagged on its own row and by name.
    expect([
      await page.getByTestId('intended-total').textContent(),
      await page.getByTestId('charged-total').textContent(),
    ]).toEqual(['$1,000.00', '$1,000.00']);
    expect(await callout(page)).toEqual({
      flag: 'over',
      text: 'Payment 2 was charged $1,000.00 (2 charges) for the $500.00 you meant: a double charge.',
    });
    expect(await paymentRows(page)).toEqual([
      ['1', '$500.00', '$0.00', 'unpaid'],
      ['2', '$500.00', '$1,000.00', 'over'],
    ]);
    expect([failed, doubled]).toEqual([[], []]);
    await screenshot(page, `lab-truth-totals-${store.name}`, VIEWPORTS[0]);
    await page.close();
  });
});
