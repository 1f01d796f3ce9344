/**
 * The model page in real Chromium against the real demo server, on SQLite, PostgreSQL and Redis, at desktop and
 * phone sizes: the item and every attribute (nothing clipped), the glossary, the access patterns with full-width
 * outputs and readable times, the seeded rows, and the race of two claims (refused by the write's own condition).
 * The state machine, the crash and expiry have their own files (model-machine, model-expiry).
 */
import { expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir } from '../harness.js';
import { closeChecked, screenshot, until, VIEWPORTS } from './harness.js';
import { eachModelPage, type ModelStore } from './model-kit.js';

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

/** The type each store gives each attribute, in ATTRIBUTES order. */
const TYPES: Record<ModelStore['name'], string[]> = {
  sqlite: 'TEXT TEXT TEXT TEXT TEXT TEXT TEXT INTEGER INTEGER INTEGER INTEGER TEXT INTEGER TEXT BLOB'.split(' '),
  postgres: 'text text text text text text text bigint bigint bigint boolean text integer jsonb bytea'.split(' '),
  redis: Array.from({ length: 15 }, () => 'string'),
};

const BARRIER = ' Both had read the key as free before either wrote.';
/** What the race shows per store: the loser's refusal, where it happened, and each claim's own round trips. */
const RACE: Record<ModelStore['name'], { lost: string; refusedBy: string; both: string; trips: string[] }> = {
  sqlite: {
    lost: "refused by the write's own condition",
    refusedBy:
      "Round trip 2, statement 1: the upsert (INSERT … ON CONFLICT DO UPDATE … WHERE). The winner's row was already there, and its WHERE was false for that live row, so nothing was written and RETURNING gave no row; statement 2 read the winner's row under the same write lock.",
    both: BARRIER,
    trips: ['2', '2'],
  },
  postgres: {
    lost: "refused by the write's own condition",
    refusedBy:
      "Round trip 2: the claim statement. Its snapshot showed no row, so it tried to insert; it waited for the winner's uncommitted row, then the upsert's DO UPDATE … WHERE was false for that row, so nothing was written and RETURNING gave no row. The store sent the statement again and read the winner's row.",
    both: BARRIER,
    // BEGIN, the claim, COMMIT; the loser sends its claim twice.
    trips: ['3', '4'],
  },
  redis: {
    lost: "refused by the write's own condition",
    refusedBy:
      "Round trip 1: the claim script checks and writes in one atomic step; it found the winner's live record, wrote nothing and replied with it.",
    both: '',
    trips: ['1', '1'],
  },
};

/** Texts of the cells of each row of a table body. */
const cells = (page: Page, selector: string) =>
  page
    .locator(`${selector} tbody tr`)
    .evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => (td.textContent ?? '').trim())));
const verdict = async (page: Page, testid: string) =>
  ((await page.getByTestId(testid).locator('.verdict').first().textContent()) ?? '').trim();
/** Cells of the attribute table whose text is cut off (wider than the cell shows) or that scroll sideways. */
const clipped = (page: Page) =>
  page.evaluate(() => [
    ...[...document.querySelectorAll('[data-testid="attributes"] tbody td, [data-testid="attributes"] tbody th')]
      .filter((el) => el.scrollWidth > el.clientWidth + 1)
      .map((el) => el.textContent),
    ...[...document.querySelectorAll('.scroll')]
      .filter((el) => el.scrollWidth > el.clientWidth + 1)
      .map((el) => `scrolls: ${el.querySelector('table')?.getAttribute('data-testid')}`),
  ]);

eachModelPage(
  'model page in Chromium',
  (store, demo, viewport) => {
    it.skipIf(store.skip)(
      'shows every attribute with its stored type, the glossary and four seeded rows, without accessibility violations',
      async () => {
        const page = await demo.open(viewport);
        expect(await page.locator('.item-name').textContent()).toBe('IdempotencyKey');
        expect(await page.locator('dl.pk dd').textContent()).toBe('IDEMPOTENCY#<scope>#<key>');
        const attributes = await cells(page, '[data-testid="attributes"]');
        expect(attributes.map((row) => row[0])).toEqual(ATTRIBUTES);
        expect(attributes.map((row) => row[1])).toEqual(TYPES[store.name]);
        // Nothing clipped: every cell shows all of its text (Redis's descriptions are the longest).
        expect(await clipped(page)).toEqual([]);
        expect(await page.locator('.glossary dt').allTextContents()).toEqual([
          'scope',
          'fingerprint',
          'id',
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
        for (const name of [
          'Claim a request key',
          'Record the outcome',
          'Renew the lease',
          'Release the key',
          'Read a previous outcome',
        ]) {
          expect(await page.getByRole('heading', { name, exact: true }).count()).toBe(1);
          expect(await page.getByRole('button', { name: `Run ${name}` }).textContent()).toBe('Run');
        }
        if (store.name === 'sqlite') {
          // The Claim summary leads with the conditional write; a pre-read is called a shortcut.
          expect(await page.locator('#op-claim').textContent()).toBe(
            'BEGIN IMMEDIATE; INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> AND token IS <the token read> RETURNING *: the conditional write. A SELECT of the row first is a shortcut that answers a refusal without the write lock.',
          );
        }
        // The fingerprint and the id say what they are (issue 28, finding 7).
        expect(await page.locator('.glossary dd').nth(1).textContent()).toMatch(
          /method, path, query \(pairs sorted\) and body \(JSON in canonical form/,
        );
        expect(await page.locator('.glossary dd').nth(2).textContent()).toMatch(
          /hands it to the processor as the processor's idempotency key/,
        );
        expect(await page.evaluate('document.documentElement.scrollWidth')).toBe(viewport.width);
        await closeChecked(page, `model-${store.name}-item`, viewport);
      },
    );

    it.skipIf(store.skip)(
      'Race two claims: both read before either writes; the loser is refused by the write, and the page says where',
      async () => {
        const page = await demo.open(viewport);
        await page.getByRole('button', { name: 'Race two claims' }).click();
        const result = page.getByTestId('race-result');
        await until(() => result.locator('[data-verdict]').count(), 2);
        const verdicts = await result
          .locator('[data-verdict]')
          .evaluateAll((els) => els.map((el) => el.getAttribute('data-verdict')).sort());
        expect(verdicts).toEqual(['lost', 'won']);
        expect(await result.locator('[data-verdict="won"] .op-result .verdict').textContent()).toMatch(
          /^claimed: no row under this key, so the claim wrote one: in_progress with a new id/,
        );
        expect(await result.locator('[data-verdict="lost"] .race-label').textContent()).toMatch(
          new RegExp(`^Claim [AB]: lost: ${RACE[store.name].lost}$`),
        );
        expect(await result.getByTestId('race-summary').textContent()).toMatch(
          new RegExp(
            `^Key race-[0-9a-f]{12}: 1 winner; the other claim was ${RACE[store.name].lost}\\.${RACE[store.name].both.replace(/\./g, '\\.')}$`,
          ),
        );
        const loser = ((await result.locator('[data-verdict="lost"] .race-label').textContent()) ?? '').slice(6, 7);
        expect(await result.getByTestId('refused-by').textContent()).toBe(
          `Claim ${loser}: ${RACE[store.name].refusedBy}`,
        );
        // Each claim's own round trips (PostgreSQL's barrier polls are not the claim's), from the first race on.
        expect((await result.locator('[data-testid="round-trips"]').allTextContents()).sort()).toEqual(
          RACE[store.name].trips,
        );
        // PostgreSQL's barrier polls are shown apart, on the winner (who waits for the loser to block on its row).
        expect(await result.locator('[data-verdict="won"] [data-testid="barrier-polls"]').count()).toBe(
          store.name === 'postgres' ? 1 : 0,
        );
        expect(await result.locator('[data-verdict="lost"] [data-testid="barrier-polls"]').count()).toBe(0);
        // The winner's fresh claim is lit on the state machine.
        expect(await page.getByTestId('machine-status').getAttribute('data-transition')).toBe('fresh-claim');
        if (store.name === 'sqlite') {
          // The refusing trip is marked, its request is open, and the upsert's condition is highlighted in it.
          const refused = result.locator('[data-verdict="lost"] .trip[data-refused="write"]');
          expect(await refused.locator('.trip-head').textContent()).toBe(
            'round trip 2: claim · the write refused here',
          );
          const condition = (await refused.getByTestId('condition').textContent()) ?? '';
          expect(condition.startsWith('WHERE ("idem_records"."expires_at" <= @now')).toBe(true);
          expect(await refused.getByTestId('condition').isVisible()).toBe(true);
          expect(await result.locator('.refused-condition mark').textContent()).toBe(condition);
        }
        // What the loser's store.claim() returned: the winner's record, as a value.
        expect(await result.locator('[data-verdict="lost"] details').last().locator('pre').textContent()).toMatch(
          /^kind: "existing"/,
        );
        await closeChecked(page, `model-${store.name}-race`, viewport, 'Race two claims');
      },
    );

    it.skipIf(store.skip)('runs the patterns: outputs span the panel, times read as clock times', async () => {
      const page = await demo.open(viewport);
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
      // Every epoch-ms time in the raw reply (and in what the claim returned) has a clock time beside it.
      const output = page.getByTestId('claim-output');
      const rawText = [
        (await output.getByTestId('raw-response').first().textContent()) ?? '',
        (await output.locator('details').last().locator('pre').textContent()) ?? '',
      ].join('\n');
      const times =
        rawText.match(
          /(claimed_at|claimedAt|expires_at|expiresAt|leaseExpiresAt|lease_expires_at): "?\d{13}"?( {2}# \d\d:\d\d:\d\d\.\d{3}, (in [\d.]+ (s|min|h)|[\d.]+ (ms|s) ago))?/g,
        ) ?? [];
      expect(times.length).toBeGreaterThanOrEqual(3);
      expect(times.filter((t) => !t.includes('#'))).toEqual([]);
      expect(await page.locator('#complete-key').inputValue()).toBe(key);
      expect(await page.locator('#complete-token').inputValue()).toMatch(/^[0-9a-f-]{36}$/);

      await screenshot(page, `model-${store.name}-patterns`, viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  },
  (browser) => {
    it('refuses the model API outside lab mode', async () => {
      const dir = tempDir();
      const server = await startDemo({
        IDEM_STORE: `sqlite:${dir.path}/idem.db`,
        IDEM_LAB: '0',
        IDEM_API_KEYS: 'sk_model_test:acct_model_test',
      });
      try {
        const page = await browser().page(VIEWPORTS[0]);
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
  },
);
