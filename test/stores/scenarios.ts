/**
 * What the cross-process suites do to a demo over any store, written once: a keyed charge, its answer, a retry
 * until the key settles, and the two multi-process scenarios (200 concurrent requests with one key; a process
 * killed while it holds the lease). Each scenario asserts on the servers' answers and on the store and ledger as
 * read directly ({@link Opened}).
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import type { IdempotencyRecord } from 'idem';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { api, type DemoProcess } from '../harness.js';
import type { Opened } from './backings.js';

export const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
/** The lease the demo processes run with: short, so a takeover comes soon. */
export const LEASE_MS = 1500;

/** A keyed `POST /v1/charges` as acct_alice to the demo at `origin` (a server, or any origin for an in-process app). */
export const chargeRequest = (
  origin: string,
  key: string,
  body: unknown = $500,
  headers: Record<string, string> = {},
): Request =>
  new Request(`${origin}/v1/charges`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer sk_test_alice',
      'content-type': 'application/json',
      'idempotency-key': key,
      ...headers,
    },
    body: JSON.stringify(body),
  });

export interface Answer {
  readonly status: number;
  /** The content type. */
  readonly type: string | null;
  /** A problem+json answer's `type`, else null. */
  readonly problem: string | null;
  readonly replayed: string | null;
  readonly retryAfter: string | null;
  readonly body: string;
}

export const answer = async (response: Response): Promise<Answer> => {
  const type = response.headers.get('content-type');
  const body = await response.text();
  return {
    status: response.status,
    type,
    problem: type === 'application/problem+json' ? (JSON.parse(body) as { type: string }).type : null,
    replayed: response.headers.get('idempotent-replayed'),
    retryAfter: response.headers.get('retry-after'),
    body,
  };
};

export const chargeId = (a: Answer): string => (JSON.parse(a.body) as { id: string }).id;

/** The balance `before` plus one $500 charge. */
const oneMore = (before: { charged: number; count: number }) => ({
  object: 'balance',
  charged: before.charged + 50000,
  count: before.count + 1,
});

/** Sends `key` through `server` while its answer's status is one of `retryOn` (for up to 20 s); every status seen. */
export async function settle(
  server: DemoProcess,
  key: string,
  retryOn: readonly number[] = [409, 503],
): Promise<{ final: Answer; statuses: number[] }> {
  const statuses: number[] = [];
  const final = await waitFor(
    `key ${key} to settle`,
    async () => {
      const attempt = await answer(await api(server.url).charge($500, { 'idempotency-key': key }));
      statuses.push(attempt.status);
      return !retryOn.includes(attempt.status) && attempt;
    },
    { everyMs: 100 },
  );
  return { final, statuses };
}

/** Waits until the record for `key` is `in_progress` (a request holds the lease), read directly; returns it. */
export const held = (store: Opened, key: string): Promise<IdempotencyRecord> =>
  waitFor(`the record for ${key} to be in_progress`, async () => {
    const record = await store.record(key);
    return record?.status === 'in_progress' && record;
  });

/** 200 concurrent requests with one key, spread over `servers`: one charge; the rest 409 or a byte-identical replay. */
export async function oneChargeOfTwoHundred(servers: readonly DemoProcess[], store: Opened): Promise<void> {
  const before = await api(servers[1]!.url).balance();
  const key = randomUUID();
  const answers = await Promise.all(
    Array.from({ length: 200 }, (_, i) =>
      api(servers[i % servers.length]!.url)
        .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '300' })
        .then(answer),
    ),
  );
  const executed = answers.filter((a) => a.status === 201 && a.replayed === null);
  expect(executed.length).toBe(1);
  const body = executed[0]!.body;
  for (const a of answers) {
    if (a === executed[0]) continue;
    if (a.status === 409) expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
    else expect([a.status, a.replayed, a.body]).toEqual([201, 'true', body]);
  }
  const charge = chargeId(executed[0]!);
  const stored = await store.record(key);
  expect(stored?.status).toBe('succeeded');
  expect(await store.chargesFor(stored!.id)).toEqual([charge]);
  for (const server of servers) expect(await api(server.url).balance()).toEqual(oneMore(before));
  expect(await (await api(servers[2]!.url).get(`/v1/charges/${charge}`)).text()).toBe(body);
}

/**
 * kill -9 of the first server while a request holds the lease; a retry through the second after the lease takes
 * the record over with the same id and a new token, and charges once; the third replays it.
 */
export async function takeoverAfterKill(servers: readonly DemoProcess[], store: Opened): Promise<void> {
  const [doomedServer, second, third] = servers as [DemoProcess, DemoProcess, DemoProcess];
  const before = await api(second.url).balance();
  const key = randomUUID();
  const doomed = api(doomedServer.url)
    .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '30000' })
    .catch((error: unknown) => error);
  const first = await held(store, key);
  expect(await doomedServer.stop('SIGKILL')).toBe('SIGKILL');
  expect(await doomed).toEqual(new TypeError('fetch failed'));
  const { final: retry, statuses } = await settle(second, key, [409]);
  expect([retry.status, retry.replayed]).toEqual([201, null]);
  expect(new Set(statuses)).toEqual(new Set(statuses.length > 1 ? [409, 201] : [201]));
  const after = await store.record(key);
  expect([after?.status, after?.id]).toEqual(['succeeded', first.id]);
  expect(after?.token).not.toBe(first.token);
  expect(await store.chargesFor(first.id)).toEqual([chargeId(retry)]);
  const replay = await answer(await api(third.url).charge($500, { 'idempotency-key': key }));
  expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', retry.body]);
  expect(await api(third.url).balance()).toEqual(oneMore(before));
}
