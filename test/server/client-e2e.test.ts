/**
 * The retrying client against the real demo server (issue 5, item 3): drop-after-commit on a random 30% of first
 * attempts, 100 logical charges → exactly 100 charges in the ledger and 100 answers, each the charge that was made.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotentFetch } from 'idem/client';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';

/** A small seeded PRNG (mulberry32), so the dropped attempts are the same on every run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

describe('idem/client against the demo server', () => {
  const dir = tempDir();
  let server: DemoProcess;
  beforeAll(async () => {
    server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db` });
  });
  afterAll(async () => {
    await server.stop();
    dir.remove();
  });

  it('100 logical charges with 30% of first attempts dropped after commit: 100 charges, 100 answers', async () => {
    const random = prng(20261130);
    const alice = api(server.url);
    const before = await alice.balance();
    let dropped = 0;
    const results = [];
    for (let i = 0; i < 100; i++) {
      const drop = random() < 0.3;
      if (drop) dropped++;
      let attempt = 0;
      const result = await idempotentFetch(
        `${server.url}/v1/charges`,
        {
          method: 'POST',
          headers: { authorization: 'Bearer sk_test_alice', 'content-type': 'application/json' },
          body: JSON.stringify({ amount: 100 + i, currency: 'usd', source: 'tok_visa' }),
        },
        {
          retries: 5,
          minTimeout: 5,
          maxTimeout: 50,
          // The flaky network: this operation's first attempt commits, then loses its answer.
          fetch: (input, init) => {
            const headers = new Headers(init.headers);
            if (drop && attempt++ === 0) headers.set('idem-lab-fault', 'drop-after-commit');
            return fetch(input, { ...init, headers });
          },
        },
      );
      const body = (await result.response.json()) as { id: string; amount: number };
      results.push({
        status: result.response.status,
        attempts: result.attempts,
        replayed: result.replayed,
        body,
        drop,
      });
    }
    expect(dropped).toBe(results.filter((r) => r.drop).length);
    expect(dropped).toBeGreaterThan(15);
    expect(results.map((r) => r.status)).toEqual(Array(100).fill(201));
    // A dropped first attempt is answered by the retry's replay; the others by their only attempt.
    expect(results.map((r) => [r.attempts, r.replayed])).toEqual(results.map((r) => (r.drop ? [2, true] : [1, false])));
    expect(results.map((r) => r.body.amount)).toEqual(Array.from({ length: 100 }, (_, i) => 100 + i));

    const charged = results.reduce((sum, r) => sum + r.body.amount, 0);
    expect(await alice.balance()).toEqual({
      object: 'balance',
      charged: before.charged + charged,
      count: before.count + 100,
    });
    const ledger = await alice.charges();
    const ids = new Set(ledger.data.map((c) => c.id));
    for (const r of results) expect(ids.has(r.body.id)).toBe(true);
  });
});
