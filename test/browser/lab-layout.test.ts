/**
 * Nothing moves under the pointer (issue 28, item 3): on the lab page, at desktop and phone sizes and on SQLite,
 * PostgreSQL and Redis, each control is clicked twice in quick succession — the second click once the page has
 * redrawn after the first — and no control's box moves, the second click lands on the same control, "Use
 * idempotency keys" keeps its state, and every claim the page then makes is true (lab-oracle.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { VIEWPORTS, chromiumAvailable, screenshot } from './harness.js';
import { GUIDED, listen, readAccount, settled, untrue } from './lab-oracle.js';
import { labStores, labSuite } from './lab-server.js';

/** Every control's box, in page and in viewport coordinates, by a stable name. */
const boxes = (page: Page) =>
  page.evaluate(() =>
    Object.fromEntries(
      [
        ...document.querySelectorAll<HTMLElement>('.guide button, .controls button, .controls input, .controls select'),
      ].map((el) => {
        const r = el.getBoundingClientRect();
        const page = [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round);
        return [el.id, { page, viewport: [Math.round(r.left), Math.round(r.top)] }];
      }),
    ),
  );

/** The controls clicked twice, in order: the one the finding was about first, Reset last. */
const CONTROLS = [
  'charge',
  'retry',
  'race',
  'tamper',
  'new-key',
  'use-keys',
  'auto-retry',
  'flaky',
  'fail',
  'show-double',
  'show-replay',
  'show-409',
  'show-failed',
  'show-mismatch',
  'show-declined',
  'show-crash',
  'reset',
];

/** Resolves once the page has drawn two more frames: what a person would see before their second click. */
const redrawn = (page: Page) =>
  page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));

describe.skipIf(!chromiumAvailable()).each(labStores('lab_layout'))('lab page layout on $name', (store) => {
  const lab = labSuite(store, { IDEM_LEASE_MS: '2000' });

  it.each(VIEWPORTS)(
    'at $width×$height: a double click on each control moves nothing and lands twice',
    async (viewport) => {
      if (!lab.available) return;
      const { url } = lab;
      const page = await lab.open(viewport);
      // The finding's state: a red flag line above the controls.
      await page.getByRole('button', { name: GUIDED[0] }).click();
      await settled(page);
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('0');
      for (const id of CONTROLS) {
        const control = page.locator(`#${id}`);
        if (await control.isDisabled()) continue;
        await control.evaluate((el) => el.scrollIntoView({ block: 'center' }));
        const before = await boxes(page);
        const account = await readAccount(page, url);
        await listen(page);
        const box = (await control.boundingBox())!;
        const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
        await page.mouse.click(x, y);
        await redrawn(page);
        const during = await boxes(page);
        const under = await page.evaluate(
          ([px, py]) =>
            document
              .elementFromPoint(px as number, py as number)
              ?.closest('button, label, select')
              ?.textContent?.trim(),
          [x, y],
        );
        await page.mouse.click(x, y);
        await settled(page);
        const after = await boxes(page);
        const moved: string[] = [];
        for (const [when, now] of [
          ['during', during],
          ['after', after],
        ] as const)
          for (const [name, was] of Object.entries(before))
            if (JSON.stringify(now[name]) !== JSON.stringify(was))
              moved.push(`${name} ${when}: ${JSON.stringify(was)} → ${JSON.stringify(now[name])}`);
        const label = await control.evaluate((el) => (el.closest('label') ?? el).textContent?.trim());
        expect({ id, moved, under, keys: await page.locator('#use-keys').isChecked() }).toEqual({
          id,
          moved: [],
          under: label,
          keys: true,
        });
        expect([id, await untrue(page, url, account)]).toEqual([id, []]);
      }
      await screenshot(page, `lab-layout-${store.name}`, viewport);
      expect(page.errors).toEqual([]);
      await page.close();
    },
  );
});
