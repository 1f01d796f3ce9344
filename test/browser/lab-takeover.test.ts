/**
 * The lab's "Processor without keys" switch and its takeover policy (issue 33), in Chromium against the demo server
 * on SQLite, PostgreSQL and Redis (each when its service answers): the guided crash run under 'rerun' shows the
 * double charge the ledger holds, under 'reconcile' one charge replayed from the ledger, under 'quarantine' a 409 operation_state "unknown" and one charge. The guided run
 * waits for the lease to lapse on the records it reads back (a short lease), never a fixed sleep. Every claim is
 * checked against the ledger and the records read through the API (lab-oracle.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { VIEWPORTS, chromiumAvailable, screenshot } from './harness.js';
import { callout, narration, outcomes, paymentRows, truthAfter } from './lab-oracle.js';
import { labStores, labSuite } from './lab-server.js';

const ROW = 'ch_[0-9a-f]{4}…[0-9a-f]{4}';
const ID = '[0-9a-f]{8}…[0-9a-f]{4}';
const CRASH = 'Show me a crash during a charge';
/** The page's sandbox account's charge ids, oldest first, read through the API as that account. */
const charges = async (page: Page, url: string) => {
  const key = String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
  const response = await fetch(`${url}/v1/charges?limit=100`, { headers: { authorization: `Bearer ${key}` } });
  return ((await response.json()) as { data: Array<{ id: string }> }).data.map((c) => c.id).reverse();
};
/** How many rows the ledger holds for the page's account. */
const ledger = async (page: Page, url: string) => (await charges(page, url)).length;
/** The Idempotency-Key of the last request the server's history holds for the page's account. */
const lastKey = async (page: Page) =>
  page.evaluate(async () => {
    const key = sessionStorage.getItem('idem-lab-api-key');
    const response = await fetch('/v1/lab/history', { headers: { authorization: `Bearer ${key}` } });
    return ((await response.json()) as { entries: Array<{ key: string }> }).entries.at(-1)?.key;
  });
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** An exact sentence with `{row}` and `{id}` standing for a ledger row's and a record's shown ids. */
const exactly = (text: string) =>
  new RegExp(`^${escape(text).replaceAll('\\{row\\}', ROW).replaceAll('\\{id\\}', ID)}$`);

const opening = (processor: string, policy: string, charged: boolean) =>
  `${processor}, takeover '${policy}': the first attempt ${charged ? 'charged $500.00 ({row}) and ' : ''}crashed before completing; an early retry got 409. Once the lease lapsed,`;

describe.skipIf(!chromiumAvailable()).each(labStores('lab_takeover'))(
  'lab on $name: processor without keys and the takeover policy, in Chromium',
  (store) => {
    // A short lease: the guided run waits for it to lapse on the records it reads back.
    const lab = labSuite(store, { IDEM_LEASE_MS: '1000' });
    const server = lab;

    /** Runs the guided crash under `policy`; returns what the oracle found untrue (the key's record vs the claims). */
    const crashRun = async (page: Page, policy: string) => {
      await page.getByRole('combobox', { name: 'On takeover' }).selectOption(policy);
      return truthAfter(page, server.url, () => page.getByRole('button', { name: CRASH, exact: true }).click());
    };

    // At both sizes: the oracle also checks that each sentence fits the narration's fixed box.
    it.for(VIEWPORTS)(
      "at $width×$height, keys off at the processor: 'rerun' charges twice for one key, 'reconcile' and 'quarantine' once",
      async (viewport, { skip }) => {
        if (!lab.available) skip();
        const page = await lab.open(viewport);
        const keyless = page.getByRole('checkbox', { name: 'Processor without keys', exact: true });
        expect(await keyless.isChecked()).toBe(false);
        await keyless.check();

        // The oracle holds one charge per key, as the key's record says: the double charge is the one thing it flags.
        const untrue = await crashRun(page, 'rerun');
        const [first, second] = await charges(page, server.url);
        // The crashed attempt's charge is the one the key's record does not hold (it holds the takeover's).
        const defect = `claims ${first} for key ${await lastKey(page)}, whose record holds ${second}`;
        expect(untrue).toEqual([defect, defect]);
        expect(await narration(page)).toMatch(
          exactly(
            `${opening('Processor without keys', 'rerun', true)} a retry took the key over (record {id}): the processor, which takes no keys, charged $500.00 again ({row}). The ledger holds 2 charges for this payment ($1,000.00 for $500.00 meant: a double charge).`,
          ),
        );
        expect(await ledger(page, server.url)).toBe(2);
        expect(await paymentRows(page)).toEqual([['1', '$500.00', '$1,000.00', 'over']]);
        expect(await callout(page)).toEqual({
          flag: 'over',
          text: 'Payment 1 was charged $1,000.00 (2 charges) for the $500.00 you meant: a double charge.',
        });

        // The reconcile hook names the charge it found (resultId): the oracle finds nothing untrue.
        expect(await crashRun(page, 'reconcile')).toEqual([]);
        expect(await narration(page)).toMatch(
          exactly(
            `${opening('Processor without keys', 'reconcile', true)} a retry took the key over; 'reconcile' found {row} in the ledger under record {id} and sent it back (201): nothing ran again. The ledger holds 1 charge for this payment ($500.00).`,
          ),
        );
        expect(await ledger(page, server.url)).toBe(3);

        expect(await crashRun(page, 'quarantine')).toEqual([]);
        expect(await narration(page)).toMatch(
          exactly(
            `${opening('Processor without keys', 'quarantine', true)} a retry got 409 operation_state "unknown" and ran nothing ('quarantine' never re-runs a takeover). The ledger holds 1 charge for this payment ($500.00). An operator resolves the key with \`idem records resolve\`.`,
          ),
        );
        expect(await ledger(page, server.url)).toBe(4);
        expect(await paymentRows(page)).toEqual([
          ['1', '$500.00', '$1,000.00', 'over'],
          ['2', '$500.00', '$500.00', 'once'],
          ['3', '$500.00', '$500.00', 'once'],
        ]);
        expect(await outcomes(page)).toEqual([
          ...['crashed', 'in-flight', 'charged'],
          ...['crashed', 'in-flight', 'reconciled'],
          ...['crashed', 'in-flight', 'quarantined'],
        ]);
        await screenshot(page, `lab-takeover-keyless-${store.name}`, viewport);
        expect(page.errors).toEqual([]);
        await page.close();
      },
    );

    it("the default processor (keyed on the record id) under 'rerun': one charge, told as before", async ({ skip }) => {
      if (!lab.available) skip();
      const page = await lab.open(VIEWPORTS[0]);
      expect(await crashRun(page, 'rerun')).toEqual([]);
      // Ledger in the store's database: the crash committed nothing. Ledger apart (Redis): keyed on the record id, the
      // processor hands the takeover the crashed attempt's charge.
      const how =
        store.name === 'redis'
          ? 'the processor returned the charge it had made before the crash ({row})'
          : 'the crash had committed nothing, so it charged $500.00 ({row})';
      expect(await narration(page)).toMatch(
        exactly(
          `The first attempt crashed mid-charge, leaving its record in_progress, so an early retry got 409. Once the lease lapsed, a retry took the key over under the same record id ({id}), which the processor uses as its own key: ${how}. One charge.`,
        ),
      );
      expect(await ledger(page, server.url)).toBe(1);
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$500.00', 'once']]);
      expect(page.errors).toEqual([]);
      await page.close();
    });
  },
);
