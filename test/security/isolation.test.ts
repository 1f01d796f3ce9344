/**
 * Tenant isolation over TCP against the real server (issue 6, item 4): one account can never read, replay,
 * collide with or expire another account's record, through any endpoint that takes a key or an id —
 * POST /v1/charges, GET /v1/charges/:id, GET /v1/charges, GET /v1/idempotency_records, POST /v1/lab/reset and
 * the lab's model routes (/v1/model/claim, /complete, /read) — and an account name holding `#` cannot forge
 * another account's record key.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { listedInProgress } from '../fixtures/demo.js';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';

const $5 = { amount: 500, currency: 'usd', source: 'tok_visa' };
const $7 = { amount: 700, currency: 'usd', source: 'tok_visa' };

interface Answer {
  readonly status: number;
  readonly replayed: string | null;
  readonly body: string;
}

/** A client for one API key that returns status, replay marker and raw body text. */
function client(url: string, apiKey: string) {
  const auth = { authorization: `Bearer ${apiKey}` };
  const answer = async (response: Response): Promise<Answer> => ({
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    body: await response.text(),
  });
  return {
    charge: async (body: unknown, key?: string, headers: Record<string, string> = {}) =>
      answer(
        await fetch(`${url}/v1/charges`, {
          method: 'POST',
          headers: {
            ...auth,
            'content-type': 'application/json',
            ...(key === undefined ? {} : { 'idempotency-key': key }),
            ...headers,
          },
          body: JSON.stringify(body),
        }),
      ),
    get: async (path: string) => answer(await fetch(`${url}${path}`, { headers: auth })),
    post: async (path: string, body?: unknown) =>
      answer(
        await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        }),
      ),
    records: async () =>
      (
        (await (await fetch(`${url}/v1/idempotency_records`, { headers: auth })).json()) as {
          data: Array<{ key: string; resultId: string | null; status: string }>;
        }
      ).data,
    chargeIds: async () =>
      (
        (await (await fetch(`${url}/v1/charges?limit=100`, { headers: auth })).json()) as {
          data: Array<{ id: string }>;
        }
      ).data.map((c) => c.id),
    balance: async () =>
      (await (await fetch(`${url}/v1/balance`, { headers: auth })).json()) as { charged: number; count: number },
  };
}

const idOf = (answer: Answer): string => (JSON.parse(answer.body) as { id: string }).id;

describe('tenant isolation over TCP (SQLite, lab mode on)', () => {
  const dir = tempDir('idem-security-');
  let server: DemoProcess;
  let alice: ReturnType<typeof client>;
  let bob: ReturnType<typeof client>;
  beforeAll(async () => {
    server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      // `acct_alice#x` tries to forge alice's record keys: its pk must never equal one of hers.
      IDEM_API_KEYS: 'sk_test_alice:acct_alice,sk_test_bob:acct_bob,sk_test_hash:acct_alice#x',
      IDEM_LEASE_MS: '5000',
    });
    alice = client(server.url, 'sk_test_alice');
    bob = client(server.url, 'sk_test_bob');
  });
  afterAll(async () => {
    await server.stop();
    dir.remove();
  });

  it('POST /v1/charges: the same key in two accounts is two records — no replay, no mismatch, no 409 across accounts', async () => {
    const key = randomUUID();
    const first = await alice.charge($5, key);
    expect([first.status, first.replayed]).toEqual([201, null]);
    // Bob's other body is not a mismatch against Alice's record: he has none.
    const bobs = await bob.charge($7, key);
    expect([bobs.status, bobs.replayed, (JSON.parse(bobs.body) as { amount: number }).amount]).toEqual([
      201,
      null,
      700,
    ]);
    expect(idOf(bobs)).not.toBe(idOf(first));
    // Bob's own record now decides for Bob: Alice's body is a mismatch against *his* record.
    const bobAgain = await bob.charge($5, key);
    expect([bobAgain.status, (JSON.parse(bobAgain.body) as { type: string }).type]).toEqual([
      400,
      'urn:idem:problem:idempotency-key-reused',
    ]);
    // And Alice still gets exactly her first answer back.
    const replay = await alice.charge($5, key);
    expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', first.body]);
    const tampered = await alice.charge($7, key);
    expect(tampered.status).toBe(400);
  });

  it("POST /v1/charges: Bob is never refused with 409 while Alice's request with the same key is in flight", async () => {
    const key = randomUUID();
    const slow = alice.charge($5, key, { 'idem-lab-delay-ms': '1500' });
    await listedInProgress(server.url, key);
    const inFlight = await alice.charge($5, key);
    const bobs = await bob.charge($5, key);
    expect(inFlight.status).toBe(409);
    expect([bobs.status, bobs.replayed]).toEqual([201, null]);
    const done = await slow;
    expect(done.status).toBe(201);
    expect(idOf(done)).not.toBe(idOf(bobs));
  });

  it("POST /v1/charges: a retryable failure or a takeover in Bob's account leaves Alice's record as it is", async () => {
    const key = randomUUID();
    const first = await alice.charge($5, key);
    const failed = await bob.charge($5, key, { 'idem-lab-fail': '503' });
    expect(failed.status).toBe(503);
    const bobRetry = await bob.charge($5, key);
    expect([bobRetry.status, bobRetry.replayed]).toEqual([201, null]);
    const replay = await alice.charge($5, key);
    expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', first.body]);
  });

  it("GET /v1/charges/:id and GET /v1/charges: Bob can neither read nor list Alice's charge", async () => {
    const made = await alice.charge($5, randomUUID());
    const id = idOf(made);
    expect((await alice.get(`/v1/charges/${id}`)).body).toBe(made.body);
    for (const path of [
      `/v1/charges/${id}`,
      `/v1/charges/${encodeURIComponent(id)}`,
      `/v1/charges/${id.replace('ch_', 'ch%5F')}`,
    ]) {
      const read = await bob.get(path);
      expect([
        path,
        read.status,
        (JSON.parse(read.body) as { type: string }).type,
        read.body.includes('"object":"charge"'),
      ]).toEqual([path, 404, 'urn:idem:problem:not-found', false]);
    }
    expect(await bob.chargeIds()).not.toContain(id);
    expect(await alice.chargeIds()).toContain(id);
  });

  it("GET /v1/idempotency_records shows the caller's rows only", async () => {
    const key = randomUUID();
    const a = await alice.charge($5, key);
    const b = await bob.charge($5, key);
    const bobOnly = randomUUID();
    await bob.charge($7, bobOnly);
    const bobRows = await bob.records();
    const aliceRows = await alice.records();
    const bobCharges = new Set(await bob.chargeIds());
    // Every row Bob sees points at one of Bob's charges; none at Alice's.
    expect(bobRows.filter((row) => row.resultId !== null && !bobCharges.has(row.resultId))).toEqual([]);
    expect(bobRows.find((row) => row.key === key)?.resultId).toBe(idOf(b));
    expect(aliceRows.find((row) => row.key === key)?.resultId).toBe(idOf(a));
    expect(aliceRows.some((row) => row.key === bobOnly)).toBe(false);
    expect(bobRows.some((row) => row.resultId === idOf(a))).toBe(false);
  });

  it("POST /v1/lab/reset clears the caller's charges only; Alice's charges and her replay survive Bob's reset", async () => {
    const key = randomUUID();
    const first = await alice.charge($5, key);
    await bob.charge($5, randomUUID());
    const aliceBefore = await alice.balance();
    const reset = await bob.post('/v1/lab/reset');
    expect(reset.status).toBe(200);
    expect((await bob.balance()).count).toBe(0);
    expect(await alice.balance()).toEqual(aliceBefore);
    const replay = await alice.charge($5, key);
    expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', first.body]);
  });

  it("an account whose name holds '#' cannot reach another account's record (the scope is escaped in the pk)", async () => {
    const hash = client(server.url, 'sk_test_hash'); // account `acct_alice#x`
    const key = `k-${randomUUID()}`;
    // pk IDEMPOTENCY#acct_alice#x#<key> (Alice, key "x#<key>") vs IDEMPOTENCY#acct_alice%23x#<key> (the other).
    const aliceFirst = await alice.charge($5, `x#${key}`);
    const forged = await hash.charge($7, key);
    expect([aliceFirst.status, forged.status, forged.replayed]).toEqual([201, 201, null]);
    expect((JSON.parse(forged.body) as { amount: number }).amount).toBe(700);
    const replay = await alice.charge($5, `x#${key}`);
    expect([replay.replayed, replay.body]).toEqual(['true', aliceFirst.body]);
    expect((await hash.records()).map((row) => row.key)).toEqual([key]);
  });

  it("the model routes (claim, complete, read) are scoped to the caller's lab account: no read, no completion, no expiry of another's key", async () => {
    const one = client(server.url, `sk_lab_${randomUUID().replaceAll('-', '').slice(0, 12)}`);
    const two = client(server.url, `sk_lab_${randomUUID().replaceAll('-', '').slice(0, 12)}`);
    const key = `m-${randomUUID()}`;
    const claimed = await one.post('/v1/model/claim', { key });
    expect(claimed.status).toBe(200);
    const mine = JSON.parse(claimed.body) as { result: { kind: string; record: { token: string; status: string } } };
    expect([mine.result.kind, mine.result.record.status]).toEqual(['claimed', 'in_progress']);
    // Two reads the same key: its own (absent) record, not One's.
    const read = JSON.parse((await two.get(`/v1/model/read?key=${encodeURIComponent(key)}`)).body) as {
      result: unknown;
    };
    expect(read.result).toBeNull();
    // Two completes the key with One's token: nothing of One's changes.
    const forged = JSON.parse(
      (await two.post('/v1/model/complete', { key, token: mine.result.record.token, outcome: 'succeeded' })).body,
    ) as { result: unknown };
    expect(forged.result).toEqual({ ok: false });
    // Two claims the key with the shortest TTL (its lease the shortest, 1 s, under it), and it lapses: One's record neither expires nor changes.
    const short = JSON.parse((await two.post('/v1/model/claim', { key, ttlMs: 2000 })).body) as {
      result: { kind: string };
    };
    expect(short.result.kind).toBe('claimed');
    // Until Two's own read says its record has expired (2 s of server time).
    await waitFor("Two's 2 s record to expire", async () => {
      const own = JSON.parse((await two.get(`/v1/model/read?key=${encodeURIComponent(key)}`)).body) as {
        expired: boolean;
      };
      return own.expired;
    });
    const still = JSON.parse((await one.get(`/v1/model/read?key=${encodeURIComponent(key)}`)).body) as {
      result: { status: string; token: string };
      expired: boolean;
    };
    expect([still.result.status, still.result.token, still.expired]).toEqual([
      'in_progress',
      mine.result.record.token,
      false,
    ]);
    // A configured (non-lab) account is refused the model routes altogether.
    expect((await alice.post('/v1/model/claim', { key })).status).toBe(403);
  });
});
