/**
 * The lab page's past is the server's (issue 28, item 1): after a reload, back/forward, a duplicated tab or cleared
 * storage the page shows exactly what happened to its sandbox account, and with the server stopped it says so and
 * claims nothing. On SQLite, PostgreSQL and Redis; every figure is checked against the API (lab-oracle.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir } from '../harness.js';
import { VIEWPORTS, chromiumAvailable, screenshot, until } from './harness.js';
import { callout, narration, outcomes, paymentRows, readAccount, settled, untrue, type Account } from './lab-oracle.js';
import { labStores, labSuite } from './lab-server.js';

const EMPTY: Account = { charges: [], records: [], balance: { charged: 0, count: 0 } };
const ONE_CHARGE = [['1', '$500.00', '$500.00', 'once']];
const sandboxKey = async (page: Page) => String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));

describe.skipIf(!chromiumAvailable()).each(labStores('lab_history'))('lab page history on $name', (store) => {
  const lab = labSuite(store);

  const open = (account?: string, url?: string) => lab.open(VIEWPORTS[0], account, url);
  const charge = async (page: Page) => {
    await page.getByRole('button', { name: 'Charge $500', exact: true }).click();
    await settled(page);
  };
  /** What the page shows after it was rebuilt from the server: one $500 charge, told as read back. */
  const rebuilt = async (page: Page) => ({
    outcomes: await outcomes(page),
    payments: await paymentRows(page),
    flag: (await callout(page)).flag,
    narration: (await narration(page)).replace(/\(ch_[0-9a-f]{4}…[0-9a-f]{4}\)/, '(ch)'),
    untrue: await untrue(page, lab.url, EMPTY),
  });
  const ONE: Awaited<ReturnType<typeof rebuilt>> = {
    outcomes: ['charged'],
    payments: ONE_CHARGE,
    flag: 'ok',
    narration:
      'Read back from the server: 1 request so far. The last: The server claimed the key, charged $500.00 (ch) and stored the 201 with it. A retry with the same key gets this answer back, with no second charge.',
    untrue: [],
  };

  it('after a keyed $500 charge: a reload, back/forward and a duplicated tab each show that one charge, no warning', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const page = await open();
    await charge(page);
    await page.reload();
    await settled(page);
    // The finding: a warning of a double charge, beside "Nothing sent yet".
    expect((await callout(page)).text).not.toMatch(/more than you meant/);
    expect(await narration(page)).not.toMatch(/^Nothing sent yet/);
    expect(await rebuilt(page)).toEqual(ONE);
    // Lab → Data model → back to the Lab.
    await page.getByRole('link', { name: 'Data model' }).click();
    await page.waitForURL(/\/model$/);
    await page.goBack();
    await settled(page);
    expect(await rebuilt(page)).toEqual(ONE);
    // A duplicated tab keeps the sandbox account: it shows the same past, and its Retry is the same payment's.
    const twin = await open(await sandboxKey(page));
    expect((await callout(twin)).text).not.toMatch(/more than you meant/);
    expect(await rebuilt(twin)).toEqual(ONE);
    await twin.getByRole('button', { name: 'Retry', exact: true }).click();
    await settled(twin);
    expect(await outcomes(twin)).toEqual(['charged', 'replayed']);
    // The first tab reads the twin's retry too, on its next action.
    const before = await readAccount(page, lab.url);
    await charge(page);
    expect(await outcomes(page)).toEqual(['charged', 'replayed', 'replayed']);
    expect(await paymentRows(page)).toEqual(ONE_CHARGE);
    expect(await untrue(page, lab.url, before)).toEqual([]);
    await screenshot(page, `lab-history-twin-${store.name}`, VIEWPORTS[0]);
    expect([...page.errors, ...twin.errors]).toEqual([]);
    await twin.close();
    await page.close();
  });

  it('a reload while a charge runs shows it running, then charged once the server is done', async ({ skip }) => {
    if (!lab.available) skip();
    const page = await open();
    await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('3000');
    await page.getByRole('button', { name: 'Charge $500', exact: true }).click();
    const before = await readAccount(page, lab.url);
    await until(async () => (await readAccount(page, lab.url)).records.map((r) => r.status), ['in_progress']);
    await page.reload();
    await settled(page);
    expect(await outcomes(page)).toEqual(['running']);
    expect(await narration(page)).toBe(
      'Read back from the server: 1 request so far. The last: Still running on the server…',
    );
    expect((await callout(page)).flag).toBe('in-progress');
    await until(() => outcomes(page), ['charged']);
    await until(async () => (await callout(page)).flag, 'ok');
    expect(await narration(page)).toMatch(/^The server claimed the key, charged \$500\.00 \(ch_/);
    expect(await untrue(page, lab.url, before)).toEqual([]);
    await page.close();
  });

  it('cleared storage: a fresh sandbox account, shown empty; the old account keeps its charge', async ({ skip }) => {
    if (!lab.available) skip();
    const page = await open();
    await charge(page);
    const old = await readAccount(page, lab.url);
    await page.evaluate(() => {
      sessionStorage.clear();
      localStorage.clear();
    });
    await page.reload();
    await settled(page);
    expect([await outcomes(page), await paymentRows(page), await callout(page)]).toEqual([
      [],
      [],
      {
        flag: 'none',
        text: 'No payments yet. Each one’s Intended and Charged will be compared here, as the ledger reads them.',
      },
    ]);
    expect(await narration(page)).toBe(
      'Nothing sent yet. Press one of the “Show me” buttons above, or Charge $500 below.',
    );
    expect(await untrue(page, lab.url, EMPTY)).toEqual([]);
    expect(old.balance).toEqual({ object: 'balance', charged: 50_000, count: 1 });
    await page.close();
  });

  it('server stopped: Charge says the server could not be reached and claims nothing', async ({ skip }) => {
    if (!lab.available) skip();
    const own = tempDir();
    const doomed = await startDemo(store.env(own.path));
    try {
      const page = await open(undefined, doomed.url);
      await charge(page);
      await doomed.stop();
      await charge(page);
      expect(await narration(page)).toBe(
        'No answer, and the server could not be reached to read back what happened. This page does not know whether anything was charged, and claims nothing.',
      );
      const claims = JSON.parse((await page.getByTestId('narration').getAttribute('data-claims')) ?? '[]') as Array<{
        kind: string;
        charge: string | null;
      }>;
      expect(claims.map((c) => [c.kind, c.charge])).toEqual([['unknown', null]]);
      expect(await outcomes(page)).toEqual(['charged', 'unknown']);
      expect(await callout(page)).toEqual({
        flag: 'unknown',
        text: 'The server cannot be reached: the figures below are from the last read, and nothing newer is claimed.',
      });
      expect(await page.getByTestId('charged-total').textContent()).toBe('$500.00');
      await screenshot(page, `lab-history-stopped-${store.name}`, VIEWPORTS[0]);
      await page.close();
    } finally {
      await doomed.stop();
      own.remove();
    }
  });
});
