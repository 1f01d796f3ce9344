/**
 * The model page in real Chromium against the real demo server, on the SQLite default and on the memory store, at
 * desktop and phone sizes: the item and every attribute, the glossary, the three access patterns with full-width
 * outputs and readable times, the four seeded rows, the race of two claims (refused by the write's own condition)
 * and expiry with its countdown.
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

const ATTRIBUTES = [
  'pk',
  'scope',
  'key',
  'status',
  'fingerprint',
  'id',
  'token',
  'claimedAt',
  'leaseExpiresAt',
  'expiresAt',
  'retryable',
  'resultId',
  'responseStatus',
  'responseHeaders',
  'responseBody',
];

const STORES = [
  {
    name: 'sqlite',
    env: (dir: string) => ({ IDEM_STORE: `sqlite:${dir}/idem.db` }),
    types: [
      'TEXT',
      'TEXT',
      'TEXT',
      'TEXT',
      'TEXT',
      'TEXT',
      'TEXT',
      'INTEGER',
      'INTEGER',
      'INTEGER',
      'INTEGER',
      'TEXT',
      'INTEGER',
      'TEXT',
      'BLOB',
    ],
    raceTrips: ['2', '2'],
    lost: "refused by the write's own condition",
    refusedBy:
      "Round trip 2, statement 1: the upsert (INSERT … ON CONFLICT DO UPDATE … WHERE). The winner's row was already there, and its WHERE was false for that live row, so nothing was written and RETURNING gave no row; statement 2 read the winner's row under the same write lock.",
    both: ' Both had read the key as free before either wrote.',
  },
  {
    name: 'memory',
    env: (dir: string) => ({ IDEM_STORE: 'memory:', IDEM_LEDGER: `${dir}/ledger.db` }),
    types: [
      'string',
      'string',
      'string',
      'string',
      'string',
      'string',
      'string',
      'number',
      'number',
      'number',
      'boolean',
      'string',
      'number',
      'array',
      'Uint8Array',
    ],
    raceTrips: ['1', '1'],
    // Memory has no conditional write: its claim decides in one in-process step, and the page says so.
    lost: "refused inside the claim's one synchronous step",
    refusedBy:
      "The claim checks and sets in one synchronous step (no database, no condition to show): it found the winner's live record and set nothing.",
    both: '',
  },
] as const;

/** Texts of the cells of each row of a table body. */
const cells = (page: Page, selector: string) =>
  page
    .locator(`${selector} tbody tr`)
    .evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => (td.textContent ?? '').trim())));
const verdict = async (page: Page, testid: string) =>
  ((await page.getByTestId(testid).locator('.verdict').first().textContent()) ?? '').trim();

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
      await until(() => page.locator('[data-testid="seeded-rows"] tbody tr').count(), 4);
      await until(() => page.locator('[data-testid="attributes"] tbody tr').count(), ATTRIBUTES.length);
      return page;
    };

    describe.each(VIEWPORTS)('at $width×$height', (viewport) => {
      it('shows every attribute with its stored type, the glossary and four seeded rows, without accessibility violations', async () => {
        const page = await open(viewport);
        expect(await page.locator('.item-name').textContent()).toBe('IdempotencyKey');
        expect(await page.locator('dl.pk dd').textContent()).toBe('IDEMPOTENCY#<key>');
        const attributes = await cells(page, '[data-testid="attributes"]');
        expect(attributes.map((row) => row[0])).toEqual(ATTRIBUTES);
        expect(attributes.map((row) => row[1])).toEqual([...store.types]);
        expect(await page.locator('.glossary dt').allTextContents()).toEqual([
          'scope',
          'fingerprint',
          'token',
          'lease',
          'TTL',
        ]);
        const seeded = await cells(page, '[data-testid="seeded-rows"]');
        expect(seeded.map((row) => [row[0], row[1], row[2]])).toEqual([
          ['seed-succeeded', 'succeeded', 'no: a retry gets the result replayed'],
          ['seed-failed', 'failed', 'no: final, a retry gets the refusal replayed'],
          ['seed-failed-retryable', 'failed', 'yes: a retry runs the work again'],
          ['seed-in-progress', 'in_progress', expect.stringMatching(/^not while its lease holds \(in (59|60) min\)$/)],
        ]);
        // Column names as words, shown as written (no CLAIMEDAT).
        expect(await page.locator('[data-testid="seeded-rows"] thead th').allTextContents()).toEqual([
          'key',
          'status',
          'may a retry run the work again?',
          'result id',
          'claimed at',
          'expires',
          'action',
        ]);
        expect(
          await page
            .locator('[data-testid="seeded-rows"] thead th')
            .first()
            .evaluate((el) => getComputedStyle(el).textTransform),
        ).toBe('none');
        for (const name of ['Claim a request key', 'Record the outcome', 'Read a previous outcome']) {
          expect(await page.getByRole('heading', { name, exact: true }).count()).toBe(1);
          expect(await page.getByRole('button', { name: `Run ${name}` }).textContent()).toBe('Run');
        }
        if (store.name === 'sqlite') {
          // The Claim summary leads with the conditional write; a pre-read is called a shortcut.
          expect(await page.locator('#op-claim').textContent()).toBe(
            'BEGIN IMMEDIATE; INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> RETURNING *: the conditional write. A SELECT of the row first is a shortcut that answers a refusal without the write lock.',
          );
        }
        expect(await page.evaluate('document.documentElement.scrollWidth')).toBe(viewport.width);
        expect(await seriousViolations(page)).toEqual([]);
        await screenshot(page, `model-${store.name}-item`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });

      it('Race two claims: both read before either writes; the loser is refused by the write, and the page says where', async () => {
        const page = await open(viewport);
        await page.getByRole('button', { name: 'Race two claims' }).click();
        const result = page.getByTestId('race-result');
        await until(() => result.locator('[data-verdict]').count(), 2);
        const verdicts = await result
          .locator('[data-verdict]')
          .evaluateAll((els) => els.map((el) => el.getAttribute('data-verdict')).sort());
        expect(verdicts).toEqual(['lost', 'won']);
        expect(await result.locator('[data-verdict="won"] .op-result .verdict').textContent()).toMatch(
          /^claimed: this caller holds the key/,
        );
        expect(await result.locator('[data-verdict="lost"] .race-label').textContent()).toMatch(
          new RegExp(`^Claim [AB]: lost: ${store.lost}$`),
        );
        expect(await result.getByTestId('race-summary').textContent()).toMatch(
          new RegExp(
            `^Key race-[0-9a-f]{12}: 1 winner; the other claim was ${store.lost}\\.${store.both.replace(/\./g, '\\.')}$`,
          ),
        );
        const loser = ((await result.locator('[data-verdict="lost"] .race-label').textContent()) ?? '').slice(6, 7);
        expect(await result.getByTestId('refused-by').textContent()).toBe(`Claim ${loser}: ${store.refusedBy}`);
        expect(await result.locator('[data-testid="round-trips"]').allTextContents()).toEqual([...store.raceTrips]);
        if (store.name === 'sqlite') {
          // The refusing trip is marked, its request is open, and the upsert's condition is highlighted in it.
          const refused = result.locator('[data-verdict="lost"] .trip[data-refused="write"]');
          expect(await refused.locator('.trip-head').textContent()).toBe(
            'round trip 2: claim · the write refused here',
          );
          const condition = (await refused.getByTestId('condition').textContent()) ?? '';
          expect(condition.startsWith('WHERE "idem_records"."expires_at" <= @now')).toBe(true);
          expect(await refused.getByTestId('condition').isVisible()).toBe(true);
          expect(await result.locator('.refused-condition mark').textContent()).toBe(condition);
        } else {
          expect(await result.locator('[data-verdict="lost"] [data-testid="raw-response"]').textContent()).toContain(
            'kind: "existing"',
          );
        }
        expect(await seriousViolations(page)).toEqual([]);
        await page.getByRole('heading', { name: 'Race two claims' }).scrollIntoViewIfNeeded();
        await screenshot(page, `model-${store.name}-race`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });

      it('runs the three patterns: outputs span the panel, times read as clock times, the retryable failed row is reclaimed', async () => {
        const page = await open(viewport);
        const key = await page.locator('#claim-key').inputValue();
        await page.getByRole('button', { name: 'Run Claim a request key' }).click();
        await until(async () => (await verdict(page, 'claim-output')).slice(0, 8), 'claimed:');
        // Full width: the output is as wide as its pattern's content box (no column beside it).
        const widths = await page.getByTestId('claim-output').evaluate((el) => {
          const box = el.parentElement as HTMLElement;
          const style = getComputedStyle(box);
          return [
            el.getBoundingClientRect().width,
            box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
          ];
        });
        expect(widths[0]).toBe(widths[1]);
        // Every epoch-ms time in the raw reply has a clock time beside it.
        const rawText =
          (await page.getByTestId('claim-output').getByTestId('raw-response').first().textContent()) ?? '';
        const times =
          rawText.match(
            /(claimed_at|claimedAt|expires_at|expiresAt): \d{13}( {2}# \d\d:\d\d:\d\d\.\d{3}, (in [\d.]+ (s|min|h)|[\d.]+ (ms|s) ago))?/g,
          ) ?? [];
        expect(times.length).toBeGreaterThan(0);
        expect(times.filter((t) => !t.includes('#'))).toEqual([]);
        expect(await page.locator('#complete-key').inputValue()).toBe(key);
        expect(await page.locator('#complete-token').inputValue()).toMatch(/^[0-9a-f-]{36}$/);

        await page.getByRole('button', { name: 'Run Record the outcome' }).click();
        await until(
          () => verdict(page, 'complete-output'),
          'ok: the outcome is written (the token held and the row was in_progress)',
        );
        await page.getByRole('button', { name: 'Run Record the outcome' }).click();
        await until(
          () => verdict(page, 'complete-output'),
          'condition failed: no in_progress row held with this token; nothing changed',
        );

        expect(await page.locator('#read-key').inputValue()).toBe(key);
        await page.getByRole('button', { name: 'Run Read a previous outcome' }).click();
        await until(() => verdict(page, 'read-output'), 'found: status succeeded, response 201');
        expect(await page.getByTestId('read-output').locator('[data-testid="round-trips"]').textContent()).toBe('1');

        await page.getByRole('button', { name: 'Read seed-failed-retryable' }).click();
        await until(() => verdict(page, 'read-output'), 'found: status failed, retryable, response 503');
        // The retryable failed row really is retryable: the same request claims its key again.
        await page.locator('#claim-key').fill('seed-failed-retryable');
        await page.getByRole('button', { name: 'Run Claim a request key' }).click();
        await until(async () => (await verdict(page, 'claim-output')).slice(0, 8), 'claimed:');
        await screenshot(page, `model-${store.name}-patterns`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });

      it('expiry: a 10 s TTL counted down beside the claim button; live refuses, expired claims afresh; Read it reads that row', async () => {
        const page = await open(viewport);
        await page.getByRole('button', { name: 'Write a row with a 10 s TTL' }).click();
        await until(() => page.getByTestId('expiry-clock').getAttribute('data-state'), 'live');
        const note = (await page.getByTestId('expiry-note').textContent()) ?? '';
        const key = /^Wrote (expiring-[0-9a-f]{12}) with a 10 s TTL\./.exec(note)?.[1] ?? '';
        expect(key).toMatch(/^expiring-[0-9a-f]{12}$/);
        expect(await page.getByTestId('expiry-clock').textContent()).toMatch(/^live: expires in \d+\.\d s$/);
        // Beside the button: on the same line.
        const [button, clock] = await Promise.all([
          page.getByRole('button', { name: 'Claim its key' }).boundingBox(),
          page.getByTestId('expiry-clock').boundingBox(),
        ]);
        expect(
          Math.abs((button?.y ?? 0) + (button?.height ?? 0) / 2 - ((clock?.y ?? 0) + (clock?.height ?? 0) / 2)),
        ).toBeLessThan(4);
        expect((clock?.x ?? 0) > (button?.x ?? 0) + (button?.width ?? 0)).toBe(true);

        await page.getByRole('button', { name: 'Claim its key' }).click();
        await until(
          () => page.getByTestId('expiry-note').textContent(),
          'Refused: the row is still live, so its key is still taken.',
        );
        // Wait for the row's own expiresAt to pass (the page counts down to it), then claim again.
        await until(() => page.getByTestId('expiry-clock').getAttribute('data-state'), 'expired', 20_000);
        await page.getByRole('button', { name: 'Read it' }).click();
        await until(
          async () => (await verdict(page, 'expiry-output')).endsWith('(expired: a claim would treat it as absent)'),
          true,
        );
        await page.getByRole('button', { name: 'Claim its key' }).click();
        await until(
          async () => ((await page.getByTestId('expiry-note').textContent()) ?? '').slice(0, 37),
          'The expired row counted as absent: cl',
        );
        expect(await page.getByTestId('expiry-clock').textContent()).toBe(
          'claimed again: a new lease and TTL from now',
        );
        // After the reclaim, Read it still reads this row (its new in_progress claim), not the key in the read form.
        await page.getByRole('button', { name: 'Read it' }).click();
        await until(() => verdict(page, 'expiry-output'), 'found: status in_progress');
        expect(await page.locator('#read-key').inputValue()).toBe('seed-succeeded');
        expect(await page.getByTestId('expiry-output').locator('details').last().textContent()).toContain(
          `key: "${key}"`,
        );
        await screenshot(page, `model-${store.name}-expiry`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      });
    });
  });

  it('refuses the model API outside lab mode', async () => {
    const dir = tempDir();
    const server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      IDEM_LAB: '0',
      IDEM_API_KEYS: 'sk_model_test:acct_model_test',
    });
    try {
      const page = await browser.page(VIEWPORTS[0]);
      await page.goto(`${server.url}/model`);
      await until(() => page.locator('#model-error').isVisible(), true);
      expect(await page.locator('#model-error').textContent()).toBe(
        'The model API is off: it runs in lab mode only. Start the demo with IDEM_LAB=1 (npm start does).',
      );
      const answer = await fetch(`${server.url}/v1/model`, { headers: { authorization: 'Bearer sk_model_test' } });
      expect(answer.status).toBe(404);
      await page.close();
    } finally {
      await server.stop();
      dir.remove();
    }
  });
});
