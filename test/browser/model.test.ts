/**
 * The model page in real Chromium against the real demo server, on the SQLite default and on the memory store (which
 * reports its raw round trips today): the item, the three access patterns, the seeded rows, the race of two claims
 * and expiry.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { VIEWPORTS, chromiumAvailable, ensureBuilt, launch, screenshot, until, type Browser } from './harness.js';

const STORES = [
  { name: 'sqlite', env: (dir: string) => ({ IDEM_STORE: `sqlite:${dir}/idem.db` }), types: ['TEXT', 'TEXT', 'INTEGER', 'INTEGER'] },
  { name: 'memory', env: (dir: string) => ({ IDEM_STORE: 'memory:', IDEM_LEDGER: `${dir}/ledger.db` }), types: ['string', 'string | null', 'number', 'number'] },
] as const;

/** Texts of the cells of each row of a table body. */
const cells = (page: Page, selector: string) =>
  page.locator(`${selector} tbody tr`).evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => (td.textContent ?? '').trim())));

describe.skipIf(!chromiumAvailable())('model page in Chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    await ensureBuilt();
    browser = await launch();
  });
  afterAll(async () => {
    await browser?.close();
  });

  describe.each(STORES)('on the $name store', (store) => {
    const dir = tempDir();
    let server: DemoProcess;
    beforeAll(async () => {
      server = await startDemo(store.env(dir.path));
    });
    afterAll(async () => {
      await server?.stop();
      dir.remove();
    });

    const open = async (viewport: (typeof VIEWPORTS)[number]) => {
      const page = await browser.page(viewport);
      await page.goto(`${server.url}/model`);
      await until(() => page.locator('#store-name').textContent(), store.name);
      await until(() => page.locator('[data-testid="seeded-rows"] tbody tr').count(), 3);
      return page;
    };

    describe.each(VIEWPORTS)('at $width×$height', (viewport) => {
      it('shows the IdempotencyKey item with its stored types and the three seeded states', async () => {
        const page = await open(viewport);
        expect(await page.locator('.item-name').textContent()).toBe('IdempotencyKey');
        expect(await page.locator('dl.pk dd').textContent()).toBe('IDEMPOTENCY#<key>');
        const attributes = await cells(page, '[data-testid="attributes"]');
        expect(attributes.map((row) => row[0])).toEqual(['status', 'resultId', 'claimedAt', 'expiresAt']);
        expect(attributes.map((row) => row[1])).toEqual([...store.types]);
        const seeded = await cells(page, '[data-testid="seeded-rows"]');
        expect(seeded.map((row) => [row[0], row[1], row[2]])).toEqual([
          ['seed-succeeded', 'succeeded', 'no: a retry gets the result replayed'],
          ['seed-failed', 'failed', 'no: final, a retry gets the refusal replayed'],
          ['seed-in-progress', 'in_progress', expect.stringMatching(/^not while its lease holds/)],
        ]);
        for (const name of ['Claim a request key', 'Record the outcome', 'Read a previous outcome']) {
          expect(await page.getByRole('heading', { name, exact: true }).count()).toBe(1);
          expect(await page.getByRole('button', { name: `Run ${name}` }).textContent()).toBe('Run');
        }
        expect(await page.getByRole('heading', { name: 'Design notes' }).count()).toBe(1);
        expect(await page.evaluate('document.documentElement.scrollWidth')).toBe(viewport.width);
        await screenshot(page, `model-${store.name}-item`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });

      it('Race two claims: exactly one wins, the other gets the conditional failure', async () => {
        const page = await open(viewport);
        await page.getByRole('button', { name: 'Race two claims' }).click();
        const result = page.getByTestId('race-result');
        await until(() => result.locator('[data-verdict]').count(), 2);
        const verdicts = await result.locator('[data-verdict]').evaluateAll((els) => els.map((el) => el.getAttribute('data-verdict')).sort());
        expect(verdicts).toEqual(['lost', 'won']);
        expect(await result.locator('[data-verdict="won"] .verdict').textContent()).toMatch(/^claimed: this caller holds the key/);
        expect(await result.locator('[data-verdict="lost"] .verdict').textContent()).toBe(
          'condition failed: the key is taken (the row that stopped it: status in_progress)',
        );
        expect(await result.locator('.race-summary').textContent()).toMatch(/: 1 winner, 1 refused by the condition\.$/);
        const trips = await result.locator('[data-testid="round-trips"]').allTextContents();
        expect(trips).toEqual(['1', '1']);
        if (store.name === 'memory') {
          // The memory store reports its calls: the loser's raw answer is the winner's record, in the same trip.
          expect(await result.locator('[data-verdict="lost"] [data-testid="raw-response"]').textContent()).toContain('kind: "existing"');
        }
        await screenshot(page, `model-${store.name}-race`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });
    });

    it('runs the three patterns in turn: claim, record the outcome, read it back', async () => {
      const viewport = VIEWPORTS[0];
      const page = await open(viewport);
      const key = await page.getByLabel('Key', { exact: true }).first().inputValue();
      await page.getByRole('button', { name: 'Run Claim a request key' }).click();
      await until(async () => ((await page.getByTestId('claim-output').locator('.verdict').textContent()) ?? '').slice(0, 8), 'claimed:');
      expect(await page.locator('#complete-key').inputValue()).toBe(key);
      expect(await page.locator('#complete-token').inputValue()).toMatch(/^[0-9a-f-]{36}$/);

      await page.getByRole('button', { name: 'Run Record the outcome' }).click();
      await until(() => page.getByTestId('complete-output').locator('.verdict').textContent(), 'ok: the outcome is written (the token held and the row was in_progress)');
      // A second completion with the same token finds the row no longer in_progress: the condition refuses it.
      await page.getByRole('button', { name: 'Run Record the outcome' }).click();
      await until(() => page.getByTestId('complete-output').locator('.verdict').textContent(), 'condition failed: no in_progress row held with this token; nothing changed');

      expect(await page.locator('#read-key').inputValue()).toBe(key);
      await page.getByRole('button', { name: 'Run Read a previous outcome' }).click();
      await until(() => page.getByTestId('read-output').locator('.verdict').textContent(), 'found: status succeeded, response 201');
      expect(await page.getByTestId('read-output').locator('[data-testid="round-trips"]').textContent()).toBe('1');

      await page.getByRole('button', { name: 'Read seed-in-progress' }).click();
      await until(() => page.getByTestId('read-output').locator('.verdict').textContent(), 'found: status in_progress');
      await screenshot(page, `model-${store.name}-patterns`, viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });

    it('expiry: a live row refuses the claim; once expired, the claim treats it as absent', async () => {
      const viewport = VIEWPORTS[1];
      const page = await open(viewport);
      await page.getByRole('button', { name: 'Write a row with a 3 s TTL' }).click();
      await until(() => page.getByTestId('expiry-clock').getAttribute('data-state'), 'live');
      await page.getByRole('button', { name: 'Claim its key' }).click();
      await until(() => page.getByTestId('expiry-note').textContent(), 'Refused: the row is still live, so its key is still taken.');
      // Wait for the row's own expiresAt to pass (the page counts down to it), then claim again.
      await until(() => page.getByTestId('expiry-clock').getAttribute('data-state'), 'expired', 10_000);
      await page.getByRole('button', { name: 'Read it' }).click();
      await until(async () => ((await page.getByTestId('expiry-output').locator('.verdict').textContent()) ?? '').endsWith('(expired: a claim would treat it as absent)'), true);
      await page.getByRole('button', { name: 'Claim its key' }).click();
      await until(async () => ((await page.getByTestId('expiry-note').textContent()) ?? '').slice(0, 37), 'The expired row counted as absent: cl');
      await screenshot(page, `model-${store.name}-expiry`, viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  });

  it('refuses the model API outside lab mode', async () => {
    const dir = tempDir();
    const server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_LAB: '0' });
    try {
      const page = await browser.page(VIEWPORTS[0]);
      await page.goto(`${server.url}/model`);
      await until(() => page.locator('#model-error').isVisible(), true);
      expect(await page.locator('#model-error').textContent()).toBe(
        'The model API is off: it runs in lab mode only. Start the demo with IDEM_LAB=1 (npm start does).',
      );
      const answer = await fetch(`${server.url}/v1/model`, { headers: { authorization: 'Bearer sk_test_alice' } });
      expect(answer.status).toBe(404);
      await page.close();
    } finally {
      await server.stop();
      dir.remove();
    }
  });
});
