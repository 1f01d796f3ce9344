/**
 * The model page's expiry section in real Chromium, on SQLite, PostgreSQL and Redis, at desktop and phone sizes: a
 * row with a 10 s TTL (and a 5 s lease) is refused while live and claimed once expired, and every sentence, the
 * countdown's "still stored" or "no longer stored" included, matches the record read through the API.
 */
import { expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { closeChecked, until } from './harness.js';
import { eachModelPage, keyFromNote, lit, rowOf, step as checked } from './model-kit.js';

/** The note's sentence that names the key the section wrote. */
const WROTE = /^Wrote (expiring-[0-9a-f]{12}) /;

eachModelPage('model page expiry in Chromium', (store, demo, viewport) => {
  const step = (page: Page, key: string, button: string) => checked(page, demo.url(), 'expiry-output', key, button);

  it.skipIf(store.skip)(
    'a 10 s TTL counted down beside the claim button; live refuses; expired says whether the store still holds it, then claims afresh',
    async () => {
      const page = await demo.open(viewport);
      await page.getByRole('button', { name: 'Write a row with a 10 s TTL' }).click();
      await until(() => page.getByTestId('expiry-clock').getAttribute('data-state'), 'live');
      const note = (await page.getByTestId('expiry-note').textContent()) ?? '';
      const key = /^Wrote (expiring-[0-9a-f]{12}) with a 10 s TTL\./.exec(note)?.[1] ?? '';
      expect(key).toMatch(/^expiring-[0-9a-f]{12}$/);
      const written = await rowOf(page, demo.url(), key);
      // TTL > lease, for the row this section writes (issue 28, finding 7).
      expect([
        (written?.leaseExpiresAt ?? 0) - (written?.claimedAt ?? 0),
        (written?.expiresAt ?? 0) - (written?.claimedAt ?? 0),
      ]).toEqual([5_000, 10_000]);
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

      const live = await step(page, key, 'Claim its key');
      expect(live.message).toMatch(
        /^refused: nothing written\. The row is succeeded: a retry gets its stored 201 replayed\.$/,
      );
      expect(await page.getByTestId('expiry-note').textContent()).toBe(
        'Refused: the row is still live, so its key is still taken.',
      );

      // Past the row's own expiresAt, the page reads the store and says whether it still holds the row; the
      // API must agree (issue 28, finding 5: on Redis the key is gone).
      await until(
        async () =>
          /; the store (still|no longer) holds it \(read at /.test(
            (await page.getByTestId('expiry-clock').textContent()) ?? '',
          ),
        true,
        20_000,
      );
      const said = (await page.getByTestId('expiry-clock').textContent()) ?? '';
      const stored = await rowOf(page, demo.url(), key);
      expect(said.includes('still holds it')).toBe(stored !== null);
      expect(stored === null).toBe(store.name === 'redis');

      const read = await step(page, key, 'Read it');
      expect(read.message).toEqual(
        store.name === 'redis'
          ? 'no row: the store holds nothing under this key.'
          : expect.stringMatching(
              /^found: status succeeded, response 201; expired \d+(\.\d)? m?s ago and still stored: a claim treats it as absent\.$/,
            ),
      );
      expect((await lit(page)).edges).toEqual([store.name === 'redis' ? 'delete' : 'expire']);

      const again = await step(page, key, 'Claim its key');
      expect(
        again.message.startsWith(
          store.name === 'redis' ? 'claimed: no row under this key' : 'claimed: the row under this key had expired',
        ),
      ).toBe(true);
      expect(await page.getByTestId('expiry-note').textContent()).toMatch(
        store.name === 'redis'
          ? /^The store no longer held the row \(deleted at its TTL\): a fresh claim, with a new record id \(/
          : /^The expired row, still stored, counted as absent: claimed afresh with a new record id \(/,
      );
      expect(await lit(page)).toEqual({
        edges: [store.name === 'redis' ? 'fresh-claim' : 'reclaim-expired'],
        states: ['in_progress'],
        status: store.name === 'redis' ? 'fresh-claim' : 'reclaim-expired',
      });
      expect(await page.getByTestId('expiry-clock').textContent()).toBe('claimed again: a new lease and TTL from now');
      // After the reclaim, Read it still reads this row (its new in_progress claim), not the key in the read form.
      const after = await step(page, key, 'Read it');
      expect(after.message).toMatch(/^found: status in_progress; its lease holds for another/);
      expect(await page.locator('#read-key').inputValue()).toBe('seed-succeeded');
      await closeChecked(page, `model-${store.name}-expiry`, viewport, 'Expiry');
    },
  );

  it.skipIf(store.skip)(
    'after the countdown, the clock says whether the store still holds the row, as the API finds it (issue 28, finding 5)',
    async () => {
      const page = await demo.open(viewport);
      const key = await keyFromNote(page, 'Write a row with a 10 s TTL', 'expiry-note', WROTE);
      const clock = page.getByTestId('expiry-clock');
      // Wait for the countdown to pass expiresAt and for the clock to say something about the row being stored.
      await until(
        async () =>
          (await clock.getAttribute('data-state')) === 'expired' &&
          /stored|holds it/.test((await clock.textContent()) ?? ''),
        true,
        20_000,
      );
      const said = (await clock.textContent()) ?? '';
      const held = (await rowOf(page, demo.url(), key)) !== null;
      expect([held, /no longer/.test(said) ? false : /still/.test(said) ? true : null]).toEqual([held, held]);
      await page.close();
    },
  );
});
