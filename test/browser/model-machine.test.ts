/**
 * The model page's state machine in real Chromium, on SQLite, PostgreSQL and Redis, at desktop and phone sizes:
 * every operation a reader runs says only what the store did (each sentence's claim is checked against the record
 * read through the API right after) and lights exactly the transition it made.
 */
import { expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { closeChecked, until } from './harness.js';
import { acted, eachModelPage, keyFromNote, lit, rowOf, step as checked, untrue } from './model-kit.js';

/** The note's sentence that names the key the section wrote. */
const HOLDS = /^Attempt A holds (crash-[0-9a-f]{8}) /;

eachModelPage('model page state machine in Chromium', (store, demo, viewport) => {
  const step = (page: Page, output: string, key: string, button: string) =>
    checked(page, demo.url(), output, key, button);
  /** The lit edges and states, and the status line's transition. */
  const expectLit = async (page: Page, edge: string | null, state: string) =>
    expect(await lit(page)).toEqual({ edges: edge ? [edge] : [], states: [state], status: edge ?? 'none' });

  it.skipIf(store.skip)(
    'claim, renew, complete, complete again, release, reclaim: each sentence holds and lights its transition',
    async () => {
      const page = await demo.open(viewport);
      const key = await page.locator('#claim-key').inputValue();
      const claimed = await step(page, 'claim-output', key, 'Run Claim a request key');
      expect(claimed.message.startsWith('claimed: no row under this key')).toBe(true);
      await expectLit(page, 'fresh-claim', 'in_progress');

      const renewed = await step(page, 'complete-output', key, 'Run Renew the lease');
      expect(renewed.message.startsWith('renewed: the lease now runs for another')).toBe(true);
      await expectLit(page, 'renew', 'in_progress');

      const done = await step(page, 'complete-output', key, 'Run Record the outcome');
      expect(done.message).toBe(
        'written: in_progress → succeeded, because the token still held and the row was in_progress; a retry gets this 201 replayed.',
      );
      await expectLit(page, 'complete', 'succeeded');
      // Issue 28, finding 5: a second completion with the same token wrote nothing, and says so on every store
      // (Redis answers ok to it: a resend of its own write).
      const again = await step(page, 'complete-output', key, 'Run Record the outcome');
      expect(again.message).toBe(
        store.name === 'redis'
          ? 'nothing written: the store answered ok, but the row is unchanged: it was already succeeded under this token. Redis answers ok to a completion that finds its own token already settled with the same status: it takes the call for a resend of a write whose reply was lost.'
          : 'refused: nothing written. The row is already succeeded: its outcome is written once.',
      );
      await expectLit(page, null, 'succeeded');
      expect(await page.getByTestId('machine-status').textContent()).toBe(
        `Record the outcome: succeeded (201) on ${key}: no transition, nothing written; the row is succeeded.`,
      );
      const read = await step(page, 'read-output', key, 'Run Read a previous outcome');
      expect(read.message).toBe('found: status succeeded, response 201.');

      // A fresh key, claimed and released: the row is deleted, and a read says so.
      const next = await page.locator('#claim-key').inputValue();
      expect(next).not.toBe(key);
      await step(page, 'claim-output', next, 'Run Claim a request key');
      const released = await step(page, 'complete-output', next, 'Run Release the key');
      expect(released.message).toBe(
        'released: the row is deleted and the key is free: the next claim is a fresh one, with a new id.',
      );
      await expectLit(page, 'release', 'absent');
      expect((await step(page, 'read-output', next, 'Run Read a previous outcome')).message).toBe(
        'no row: the store holds nothing under this key.',
      );

      // The seeded retryable failure: a claim of its key reclaims it under the same id.
      await page.locator('#claim-key').fill('seed-failed-retryable');
      const reclaimed = await step(page, 'claim-output', 'seed-failed-retryable', 'Run Claim a request key');
      expect(reclaimed.message.startsWith('reclaimed: the last attempt failed and may be retried')).toBe(true);
      await expectLit(page, 'reclaim', 'in_progress');
      // And a retry meets the live claim: refused, nothing written, no transition.
      const refused = await step(page, 'claim-output', 'seed-failed-retryable', 'Run Claim a request key');
      expect(refused.message).toMatch(
        /^refused: nothing written\. The row is in_progress, its lease holds for another (59|60)\.\d s: a retry gets 409 and comes back later\.$/,
      );
      await expectLit(page, null, 'in_progress');

      expect(await page.evaluate('document.documentElement.scrollWidth')).toBe(viewport.width);
      await closeChecked(page, `model-${store.name}-machine`, viewport, 'The state machine');
    },
  );

  it.skipIf(store.skip)(
    'a second Record the outcome with the same token wrote nothing, and never says it wrote (issue 28, finding 5)',
    async () => {
      const page = await demo.open(viewport);
      const key = await page.locator('#claim-key').inputValue();
      await page.getByRole('button', { name: 'Run Claim a request key' }).click();
      await until(async () => (await page.locator('#complete-token').inputValue()).length, 36);
      const complete = () => page.getByRole('button', { name: 'Run Record the outcome' }).click();
      await acted(page, demo.url(), 'complete-output', key, complete);
      const again = await acted(page, demo.url(), 'complete-output', key, complete);
      // The store wrote nothing the second time (Redis still answers ok); the sentence must not say otherwise.
      expect(again.after).toEqual(again.before);
      expect(again.message).toMatch(/nothing (written|changed)/);
      expect(again.message).not.toMatch(/^ok|^written|the outcome is written/);
      await page.close();
    },
  );

  it.skipIf(store.skip)(
    'a crash mid-charge: refused while the lease holds, taken over with the same id once it lapses, the late write refused',
    async () => {
      const page = await demo.open(viewport);
      const key = await keyFromNote(page, 'Attempt A: claim with a 3 s lease', 'lapse-note', HOLDS);
      expect(key).toMatch(/^crash-[0-9a-f]{8}$/);
      // The key was new: the claim's sentence is checked against no row before and the row now.
      const first = await rowOf(page, demo.url(), key);
      const message = ((await page.getByTestId('lapse-output').locator('.verdict').last().textContent()) ?? '').trim();
      expect(untrue(message, null, first), message).toEqual([]);
      expect(message.startsWith('claimed: no row under this key')).toBe(true);
      expect(await page.getByTestId('lapse-clock').getAttribute('data-state')).toBe('live');

      const early = await step(page, 'lapse-output', key, 'Attempt B: retry the claim');
      expect(early.message).toMatch(/^refused: nothing written\. The row is in_progress, its lease holds for another/);
      await expectLit(page, null, 'in_progress');

      // Nothing renews A's lease: the page counts down to the row's own leaseExpiresAt.
      await until(() => page.getByTestId('lapse-clock').getAttribute('data-state'), 'lapsed', 10_000);
      const taken = await step(page, 'lapse-output', key, 'Attempt B: retry the claim');
      expect(taken.message.startsWith("taken over: the holder's lease had lapsed")).toBe(true);
      expect(taken.after?.id).toBe(first?.id);
      await expectLit(page, 'takeover', 'in_progress');
      expect(await page.getByTestId('lapse-clock').textContent()).toBe('taken over by attempt B: same id, new token');

      const late = await step(page, 'lapse-output', key, 'Attempt A: record its outcome late');
      expect(late.message).toBe(
        'refused: nothing written. The row is in_progress under another token: the key was taken over, and only its current holder may write.',
      );
      await expectLit(page, null, 'in_progress');
      await closeChecked(page, `model-${store.name}-lapse`, viewport, /^A crash mid-charge/);
    },
  );
});
