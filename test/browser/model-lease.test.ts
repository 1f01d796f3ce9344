/**
 * What the pages say about the lease, checked against what the demo does (issue 28, finding 6). The lab's
 * trade-offs and the model page's design note say the lease is renewed while the work runs, so a slow charge keeps
 * its key (a retry past the first lease end gets 409, and the charge runs once), until `maxHoldMs`; and that the
 * holder goes by its own clock. The server runs with a 1.5 s lease and a 4 s charge, so the first lease end
 * passes while the work runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { VIEWPORTS, chromiumAvailable, ensureBuilt, launch, until, type Browser } from './harness.js';

const LEASE_MS = 1_500;
const API_KEY = 'sk_lab_leasetext000001';
const auth = { authorization: `Bearer ${API_KEY}` };

describe.skipIf(!chromiumAvailable())('the lease, as the pages tell it and as the demo does it', () => {
  const dir = tempDir();
  let server: DemoProcess;
  let browser: Browser;
  beforeAll(async () => {
    await ensureBuilt();
    [server, browser] = await Promise.all([
      startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_LEASE_MS: String(LEASE_MS) }),
      launch(),
    ]);
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    dir.remove();
  });

  it('the texts say the lease is renewed, bounded by maxHoldMs and kept by the holder’s own clock', async () => {
    const page = await browser.page(VIEWPORTS[0]);
    await page.goto(`${server.url}/`);
    const lifecycle = ((await page.locator('li', { hasText: "The key's lifecycle." }).textContent()) ?? '')
      .replace(/\s+/g, ' ')
      .trim();
    expect(lifecycle).toContain('The lease is renewed while the work runs, so slow work keeps its key');
    expect(lifecycle).toContain(
      'for up to maxHoldMs (5 minutes; then the work is aborted and the key recorded failed, retryable)',
    );
    expect(lifecycle).toContain('the holder, going by its own clock, aborts its work before a retry can take over');
    expect(lifecycle).not.toMatch(/ends while slow work|from your slowest processor/);

    await page.goto(`${server.url}/model`);
    const note = ((await page.getByTestId('lease-note').textContent()) ?? '').replace(/\s+/g, ' ').trim();
    expect(note).toBe(
      "A slow charge keeps its key: the engine renews the lease while the work runs (every third of leaseMs by default), so a retry gets 409 for as long as the work runs, up to maxHoldMs. The lease lapses only when renewals stop reaching the store: the process crashed, froze or lost the store. The holder also watches its own clock: if no renewal has been confirmed by leaseMs − leaseMarginMs after the last one, it aborts its work's signal itself, before any retry could take over. And work that never settles is given up after maxHoldMs (5 minutes by default): its signal is aborted and the key is recorded failed, retryable. So size the lease to how fast you want a crash noticed, and maxHoldMs above your slowest processor.",
    );
    expect(page.errors).toEqual([]);
    await page.close();
  });

  it('as they say: past its first lease end a slow charge still holds its key (409), then runs once', async () => {
    const key = `lease-text-${Date.now()}`;
    const charge = () =>
      fetch(`${server.url}/v1/charges`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': key, 'idem-lab-delay-ms': '4000' },
        body: JSON.stringify({ amount: 50000, currency: 'usd', source: 'tok_visa' }),
      });
    const record = async () => {
      const answer = await fetch(`${server.url}/v1/idempotency_records`, { headers: auth });
      const { data } = (await answer.json()) as {
        data: Array<{ key: string; status: string; claimedAt: number; leaseExpiresAt: number }>;
      };
      return data.find((r) => r.key === key) ?? null;
    };
    const first = charge();
    await until(async () => (await record())?.status, 'in_progress');
    const claimed = (await record()) as { claimedAt: number; leaseExpiresAt: number };
    expect(claimed.leaseExpiresAt - claimed.claimedAt).toBe(LEASE_MS);
    // The first lease end passes while the charge runs: the lease was renewed (pushed past it) …
    await until(async () => ((await record())?.leaseExpiresAt ?? 0) > claimed.leaseExpiresAt, true);
    await until(async () => Date.now() > claimed.leaseExpiresAt + 200, true);
    // … so a retry now, past the first lease end, still meets the running attempt.
    const retry = await charge();
    expect([retry.status, (await record())?.status]).toEqual([409, 'in_progress']);
    const done = await first;
    const body = (await done.json()) as { id: string };
    expect(done.status).toBe(201);
    const replay = await charge();
    expect([replay.status, ((await replay.json()) as { id: string }).id]).toEqual([201, body.id]);
    const balance = (await (await fetch(`${server.url}/v1/balance`, { headers: auth })).json()) as { count: number };
    expect(balance.count).toBe(1);
  });
});
