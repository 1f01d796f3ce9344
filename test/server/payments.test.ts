/**
 * The payments API over real TCP against the real server process on the SQLite default (issue 2, item 7).
 * Every case reads GET /v1/balance before and after.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listedInProgress } from '../fixtures/demo.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';
import { settle } from '../stores/scenarios.js';

const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
/** The balance `before` plus `charges` charges of `cents` in all. */
const plus = (before: { charged: number; count: number }, cents: number, charges = 1) => ({
  object: 'balance',
  charged: before.charged + cents,
  count: before.count + charges,
});

describe('payments API over TCP (SQLite)', () => {
  const dir = tempDir();
  let server: DemoProcess;
  beforeAll(async () => {
    server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_LEASE_MS: '2000' });
  });
  afterAll(async () => {
    await server.stop();
    dir.remove();
  });

  it('drop-after-commit, then retry: the retry gets the committed answer and the ledger grew by one', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const key = randomUUID();
    await expect(alice.charge($500, { 'idempotency-key': key, 'idem-lab-fault': 'drop-after-commit' })).rejects.toThrow(
      'fetch failed',
    );
    const retry = await alice.charge($500, { 'idempotency-key': key });
    const again = await alice.charge($500, { 'idempotency-key': key });
    const body = await retry.text();
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(body);
    const charge = JSON.parse(body) as { id: string };
    expect(await (await alice.get(`/v1/charges/${charge.id}`)).text()).toBe(body);
    expect(await alice.balance()).toEqual(plus(before, 50000));
  });

  it('50 concurrent requests with one key: one charge; every other answer is a 409 or an identical replay', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const key = randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 50 }, () =>
        alice.charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '300' }).then(async (r) => ({
          status: r.status,
          replayed: r.headers.get('idempotent-replayed'),
          retryAfter: r.headers.get('retry-after'),
          body: await r.text(),
        })),
      ),
    );
    const executed = answers.filter((a) => a.status === 201 && a.replayed === null);
    expect(executed.length).toBe(1);
    for (const a of answers) {
      if (a.status === 409) expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      else expect([a.status, a.body]).toEqual([201, executed[0]?.body]);
    }
    expect(await alice.balance()).toEqual(plus(before, 50000));
  });

  it('tamper: the same key with another amount gets 400 and charges nothing', async () => {
    const alice = api(server.url);
    const key = randomUUID();
    await alice.charge($500, { 'idempotency-key': key });
    const before = await alice.balance();
    const tampered = await alice.charge({ ...$500, amount: 500000 }, { 'idempotency-key': key });
    expect(tampered.status).toBe(400);
    expect(tampered.headers.get('content-type')).toBe('application/problem+json');
    expect(((await tampered.json()) as { type: string }).type).toBe('urn:idem:problem:idempotency-key-reused');
    expect(await alice.balance()).toEqual(before);
  });

  it('no key, twice: two charges (the double charge keys prevent)', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    expect((await alice.charge($500)).status).toBe(201);
    expect((await alice.charge($500)).status).toBe(201);
    expect(await alice.balance()).toEqual(plus(before, 100000, 2));
  });

  it("account B sending account A's key gets its own charge, never A's response", async () => {
    const alice = api(server.url);
    const bob = api(server.url, 'sk_test_bob');
    const key = randomUUID();
    const [aliceBefore, bobBefore] = [await alice.balance(), await bob.balance()];
    const first = await (await alice.charge($500, { 'idempotency-key': key })).text();
    const second = await bob.charge({ ...$500, amount: 1234 }, { 'idempotency-key': key });
    const bobBody = await second.text();
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(bobBody).not.toBe(first);
    expect((JSON.parse(bobBody) as { amount: number }).amount).toBe(1234);
    expect(await alice.balance()).toEqual(plus(aliceBefore, 50000));
    expect(await bob.balance()).toEqual(plus(bobBefore, 1234));
  });

  it('a declined card is a final 402, replayed, and charges nothing', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const key = randomUUID();
    const declined = await alice.charge({ ...$500, source: 'tok_chargeDeclined' }, { 'idempotency-key': key });
    const replay = await alice.charge({ ...$500, source: 'tok_chargeDeclined' }, { 'idempotency-key': key });
    expect([declined.status, replay.status, replay.headers.get('idempotent-replayed')]).toEqual([402, 402, 'true']);
    expect(await replay.text()).toBe(await declined.text());
    expect(await alice.balance()).toEqual(before);
  });

  it('a processor failure (Idem-Lab-Fail: 503) stays retryable: the retry charges once', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const key = randomUUID();
    const failed = await alice.charge($500, { 'idempotency-key': key, 'idem-lab-fail': '503' });
    expect(failed.status).toBe(503);
    expect(await alice.balance()).toEqual(before);
    const retry = await alice.charge($500, { 'idempotency-key': key });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect(await alice.balance()).toEqual(plus(before, 50000));
  });

  it('bad input gets a 4xx problem naming the field, and never reaches the ledger', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const records = async () =>
      ((await (await alice.get('/v1/idempotency_records')).json()) as { data: unknown[] }).data;
    const recordsBefore = await records();
    const cases: Array<[unknown, number, string]> = [
      ['{"amount":', 400, 'body-invalid'],
      ['[1,2]', 400, 'body-invalid'],
      [{ currency: 'usd' }, 400, 'amount'],
      [{ amount: 10.5 }, 400, 'amount'],
      [{ amount: '500' }, 400, 'amount'],
      [{ amount: 0 }, 400, 'amount'],
      [{ amount: -5 }, 400, 'amount'],
      [{ amount: 500, currency: 'xyz' }, 400, 'currency'],
      [{ amount: 500, source: 'tok_nope' }, 400, 'source'],
    ];
    for (const [body, status, what] of cases) {
      for (const headers of [{}, { 'idempotency-key': randomUUID() }]) {
        const answer = await alice.charge(body, headers);
        const problem = (await answer.json()) as { type: string; param?: string };
        expect([answer.status, answer.headers.get('content-type')]).toEqual([status, 'application/problem+json']);
        expect(problem.param ?? problem.type.replace('urn:idem:problem:', '')).toBe(what);
      }
    }
    const big = await alice.charge(JSON.stringify({ amount: 500, pad: 'x'.repeat(1_048_576) }), {
      'idempotency-key': randomUUID(),
    });
    expect([big.status, ((await big.json()) as { type: string }).type]).toEqual([
      413,
      'urn:idem:problem:request-too-large',
    ]);
    const anonymous = await fetch(`${server.url}/v1/charges`, { method: 'POST', body: JSON.stringify($500) });
    expect(anonymous.status).toBe(401);
    const stranger = await api(server.url, 'sk_live_unknown').charge($500);
    expect(stranger.status).toBe(401);
    const missing = await alice.get('/v1/nothing');
    expect([missing.status, missing.headers.get('content-type')]).toEqual([404, 'application/problem+json']);
    const invalidKey = await alice.charge($500, { 'idempotency-key': 'a'.repeat(256) });
    expect(invalidKey.status).toBe(400);
    expect(await alice.balance()).toEqual(before);
    expect(await records()).toEqual(recordsBefore);
  });

  it('lists charges newest first with a bounded limit, and shows records without bodies', async () => {
    const alice = api(server.url);
    const key = randomUUID();
    const made = (await (await alice.charge({ ...$500, amount: 777 }, { 'idempotency-key': key })).json()) as {
      id: string;
    };
    const list = (await (await alice.get('/v1/charges?limit=1')).json()) as {
      object: string;
      data: Array<{ id: string }>;
    };
    expect([list.object, list.data.length, list.data[0]?.id]).toEqual(['list', 1, made.id]);
    expect((await alice.get('/v1/charges?limit=101')).status).toBe(400);
    const records = (await (await alice.get('/v1/idempotency_records')).json()) as {
      data: Array<Record<string, unknown>>;
    };
    const mine = records.data.find((r) => r.key === key);
    expect(Object.keys(mine ?? {}).sort()).toEqual(
      [
        'claimedAt',
        'expiresAt',
        'fingerprint',
        'key',
        'leaseExpiresAt',
        'responseStatus',
        'resultId',
        'retryable',
        'status',
      ].sort(),
    );
    expect([mine?.status, mine?.responseStatus, mine?.resultId]).toEqual(['succeeded', 201, made.id]);
  });
});

describe('payments API process lifecycle', () => {
  it('kill -9 while a request holds the lease, restart, retry after the lease: exactly one charge', async () => {
    const dir = tempDir();
    const env = { IDEM_STORE: `sqlite:${dir.path}/idem.db`, IDEM_LEASE_MS: '1000' };
    const first = await startDemo(env);
    const key = randomUUID();
    const before = await api(first.url).balance();
    const doomed = api(first.url)
      .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '30000' })
      .catch((error: unknown) => error);
    await listedInProgress(first.url, key);
    expect(await first.stop('SIGKILL')).toBe('SIGKILL');
    expect(await doomed).toEqual(new TypeError('fetch failed'));

    const second = await startDemo(env);
    try {
      const alice = api(second.url);
      const { final, statuses } = await settle(second, key, [409]);
      expect(final.status).toBe(201);
      expect(new Set(statuses)).toEqual(new Set(statuses.length > 1 ? [409, 201] : [201]));
      const replay = await alice.charge($500, { 'idempotency-key': key });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await alice.balance()).toEqual(plus(before, 50000));
    } finally {
      await second.stop();
      dir.remove();
    }
  });

  it('SIGTERM drains the in-flight request before exiting 0', async () => {
    const dir = tempDir();
    const server = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db` });
    const key = randomUUID();
    const pending = api(server.url).charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '800' });
    await listedInProgress(server.url, key);
    const exited = server.stop('SIGTERM');
    const answer = await pending;
    expect(answer.status).toBe(201);
    expect(await exited).toBe(0);
    dir.remove();
  });

  it('lab fault headers do nothing unless lab mode is on', async () => {
    const dir = tempDir();
    const server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      IDEM_LAB: '0',
      IDEM_API_KEYS: 'sk_live_alice:acct_alice',
    });
    try {
      const alice = api(server.url, 'sk_live_alice');
      const headers = { 'idem-lab-fault': 'drop-after-commit', 'idem-lab-fail': '503', 'idem-lab-delay-ms': '60000' };
      const answer = await alice.charge($500, { ...headers, 'idempotency-key': randomUUID() });
      expect(answer.status).toBe(201);
      expect(await alice.balance()).toEqual({ object: 'balance', charged: 50000, count: 1 });
      expect(
        (
          await fetch(`${server.url}/v1/lab/reset`, {
            method: 'POST',
            headers: { authorization: 'Bearer sk_live_alice' },
          })
        ).status,
      ).toBe(404);
    } finally {
      await server.stop();
      dir.remove();
    }
  });
});
