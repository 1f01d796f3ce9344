/**
 * One case each adapter's own tests run with its own way of authenticating (a middleware, a hook, a guard): the
 * same key from two accounts is two records, each running its own work.
 */
import { expect } from 'vitest';
import type { IdempotencyRecord } from '../core/record.js';

/** The adapter test app: POST `/v1/charges` runs the `json` work; the `authorization: Bearer <account>` sets the scope. */
export interface AccountScopedApp<Answer> {
  readonly post: (
    path: string,
    init: { key: string; headers: Record<string, string>; body?: { amount: number } },
  ) => Promise<Answer>;
  readonly record: (key: string, scope: string) => Promise<IdempotencyRecord | null>;
  readonly runs: Record<string, number>;
}

/** Posts key `k1` as acct_alice then as acct_bob, and checks both ran, each under its own scope. */
export async function expectScopedByAccount<Answer>(
  app: AccountScopedApp<Answer>,
  text: (answer: Answer) => string | Promise<string>,
): Promise<void> {
  const alice = await app.post('/v1/charges', { key: 'k1', headers: { authorization: 'Bearer acct_alice' } });
  const bob = await app.post('/v1/charges', {
    key: 'k1',
    headers: { authorization: 'Bearer acct_bob' },
    body: { amount: 7 },
  });
  expect([await text(alice), await text(bob)]).toEqual(['{"id":"ch_1","amount":50000}', '{"id":"ch_2","amount":7}']);
  expect([(await app.record('k1', 'acct_alice'))?.scope, (await app.record('k1', 'acct_bob'))?.scope]).toEqual([
    'acct_alice',
    'acct_bob',
  ]);
  expect(app.runs).toEqual({ json: 2 });
}
