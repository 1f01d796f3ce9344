/**
 * The lab page across a server stop and restart, and its client policy (issue 28, after the hostile review): a
 * request the server was killed under reads back as interrupted — never "running" for ever — with its record and
 * ledger row as they are; while the server is down the page claims nothing; Auto-retry switched off stops the
 * client's retries; and the flag line advises a retry only where one would charge. On SQLite.
 */
import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { startDemo, tempDir } from '../harness.js';
import { VIEWPORTS, chromiumAvailable, until } from './harness.js';
import { callout, narration, outcomes, paymentRows, readAccount, settled, untrue } from './lab-oracle.js';
import { labStores, labSuite } from './lab-server.js';

const [sqlite] = labStores('lab_restart');
const box = (page: Page, name: string) => page.getByRole('checkbox', { name, exact: true });
const button = (page: Page, name: string) => page.getByRole('button', { name, exact: true });

describe.skipIf(!chromiumAvailable())('lab page across a restart, on SQLite', () => {
  const lab = labSuite(sqlite as NonNullable<typeof sqlite>);

  it('killed mid-request: claims nothing while down; after the restart the request reads back as interrupted', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const own = tempDir();
    const env = { ...sqlite?.env(own.path), IDEM_LEASE_MS: '2000' };
    let server = await startDemo(env);
    try {
      const page = await lab.open(VIEWPORTS[0], undefined, server.url);
      await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('3000');
      await button(page, 'Charge $500').click();
      // The signal: the server's history holds the request, running (the processor takes 3 s).
      const key = String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
      const history = async (url: string) =>
        (await (await fetch(`${url}/v1/lab/history`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
          entries: Array<{ state: string }>;
        };
      const url = server.url;
      await until(async () => (await history(url)).entries.map((e) => e.state), ['running']);
      expect(await server.stop('SIGKILL')).toBe('SIGKILL');
      await settled(page);
      // Down: the page does not say "still running", and claims nothing.
      expect([
        'No answer yet, and the server cannot be reached to read back what happened. This page does not know whether it ran or charged, and claims nothing.',
        'No answer, and the server could not be reached to read back what happened. This page does not know whether anything was charged, and claims nothing.',
      ]).toContain(await narration(page));
      expect((await callout(page)).flag).toBe('unknown');
      // Back on the same port and database: the request is told as interrupted, its record as it is now.
      server = await startDemo({ ...env, PORT: new URL(url).port });
      await page.reload();
      await settled(page);
      expect(await outcomes(page)).toEqual(['interrupted']);
      expect(await narration(page)).toBe(
        "Read back from the server: 1 request so far. The last: The server stopped while this request ran, so no answer was sent. The ledger holds no charge under its key's record. The key's record says in_progress: a retry gets 409 until it is settled.",
      );
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$0.00', 'in-progress']]);
      expect(await untrue(page, server.url, await readAccount(page, server.url))).toEqual([]);
      expect((await history(server.url)).entries.map((e) => e.state)).toEqual(['interrupted']);
      // Once the lease has lapsed (read from the API), nothing holds the key: a retry would take it over.
      const lapsed = async () =>
        (
          (await (
            await fetch(`${server.url}/v1/idempotency_records`, { headers: { authorization: `Bearer ${key}` } })
          ).json()) as { data: Array<{ leaseExpiresAt: number }> }
        ).data.every((r) => r.leaseExpiresAt < Date.now());
      await until(lapsed, true);
      await page.reload();
      await settled(page);
      expect(await narration(page)).toMatch(
        /^Read back from the server: 1 request so far\. The last: The server stopped while this request ran, so no answer was sent\. The ledger holds no charge under its key's record\. The key's record says in_progress, but its lease lapsed at \d\d:\d\d:\d\d(\.\d+)?: a retry takes the key over under the same record id\.$/,
      );
      expect(await paymentRows(page)).toEqual([['1', '$500.00', '$0.00', 'unpaid']]);
      expect(page.errors).toEqual([]);
      await page.close();
    } finally {
      await server.stop();
      own.remove();
    }
  });

  it('Auto-retry switched off while the first attempt runs: no retry leaves', async ({ skip }) => {
    if (!lab.available) skip();
    const page = await lab.open(VIEWPORTS[0]);
    await box(page, 'Auto-retry').check();
    await box(page, 'Processor fails').check();
    await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('1000');
    await button(page, 'Charge $500').click();
    await until(async () => (await outcomes(page)).length, 1);
    await box(page, 'Auto-retry').uncheck();
    await settled(page);
    expect(await outcomes(page)).toEqual(['processor-failed']);
    await page.close();
  });

  it('the flag line advises a retry only where one would charge: not after a mismatch, not without a key', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const page = await lab.open(VIEWPORTS[0]);
    await page.getByRole('combobox', { name: 'Slow processor' }).selectOption('0');
    await box(page, 'Processor fails').check();
    await button(page, 'Charge $500').click();
    await settled(page);
    expect(await callout(page)).toEqual({
      flag: 'unpaid',
      text: 'Payment 1: meant, but nothing charged yet. Retry with the same key to charge once.',
    });
    // Tamper: the same key with another amount meets 400, and so would a Retry of it.
    await button(page, 'Tamper').click();
    await settled(page);
    expect(await outcomes(page)).toEqual(['processor-failed', 'mismatch']);
    expect(await callout(page)).toEqual({ flag: 'unpaid', text: 'Payment 1: meant, but nothing charged yet.' });
    await button(page, 'Reset').click();
    await settled(page);
    await box(page, 'Use idempotency keys').uncheck();
    await button(page, 'Charge $500').click();
    await settled(page);
    expect(await callout(page)).toEqual({ flag: 'unpaid', text: 'Payment 1: meant, but nothing charged yet.' });
    await page.close();
  });

  it('a full account: a charge and a guided run are told as refused, and nothing is called unknown', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const page = await lab.open(VIEWPORTS[0]);
    const key = String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
    const send = () =>
      fetch(`${lab.url}/v1/charges`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 100, source: 'tok_visa' }),
      }).then((r) => r.status);
    for (let i = 0; i < 10; i++)
      expect(await Promise.all(Array.from({ length: 50 }, send))).toEqual(Array(50).fill(201));
    await page.reload();
    await settled(page);
    await button(page, 'Show me a 409 while the first attempt runs').click();
    await settled(page);
    const refused =
      'This sandbox account has sent as many requests as the lab keeps, so the server refused this one with 409 before running it: nothing was charged. Reset starts a fresh account.';
    expect(await narration(page)).toBe(`${refused} ${refused}`);
    expect((await outcomes(page)).slice(-2)).toEqual(['refused', 'refused']);
    expect(await callout(page)).toEqual({ flag: 'unpaid', text: 'Payment 501: meant, but nothing charged yet.' });
    expect(page.errors).toEqual([]);
    await page.close();
  });

  it('a keyless crash sent by another client is told without a key or a record', async ({ skip }) => {
    if (!lab.available) skip();
    const page = await lab.open(VIEWPORTS[0]);
    const key = String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
    const cut = await fetch(`${lab.url}/v1/charges`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idem-lab-fault': 'crash' },
      body: JSON.stringify({ amount: 100, source: 'tok_visa' }),
    }).then(
      (r) => r.status,
      () => 'cut',
    );
    expect(cut).toBe('cut');
    await page.reload();
    await settled(page);
    expect(await narration(page)).toMatch(
      /^Read back from the server: 1 request so far\. The last: The attempt called the processor and crashed before answering\. It had charged \$1\.00 \(ch_[0-9a-f]{4}…[0-9a-f]{4}\)\. Without a key no record was kept: a retry runs the charge again\.$/,
    );
    expect(await untrue(page, lab.url, await readAccount(page, lab.url))).toEqual([]);
    await page.close();
  });

  it('Reset in another tab: this tab drops what the server no longer holds, and advises no retry that replays', async ({
    skip,
  }) => {
    if (!lab.available) skip();
    const a = await lab.open(VIEWPORTS[0]);
    await a.getByRole('combobox', { name: 'Slow processor' }).selectOption('0');
    await button(a, 'Charge $500').click();
    await settled(a);
    const key = String(await a.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
    const b = await lab.open(VIEWPORTS[0], key);
    await button(b, 'Reset').click();
    await settled(b);
    // Back in the first tab: Retry replays the stored 201 (the record outlives the ledger's rows).
    await button(a, 'Retry').click();
    await settled(a);
    expect(await outcomes(a)).toEqual(['replayed']);
    expect(await callout(a)).toEqual({ flag: 'unpaid', text: 'Payment 1: meant, but nothing charged yet.' });
    expect(await untrue(a, lab.url, await readAccount(a, lab.url))).toEqual([]);
    await Promise.all([a.close(), b.close()]);
  });
});
