/**
 * Hono's `timeout()` (hono/timeout) answers 504 while the handler's promise goes on. Mounted inside the adapter it
 * hides that promise; mounted outside, Hono drops the handler's own response once the 504 is out. Either way the
 * key is abandoned (held until its lease lapses), not freed. Executions are counted, and so are the ones at once.
 */
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, type IdempotencyVariables } from './index.js';
import { timesOutOnce } from './timed.test-kit.js';

describe('idem/hono: hono/timeout answers 504 while the handler runs', () => {
  it.each(['inside', 'outside'] as const)(
    'mounted %s the adapter: the key is abandoned, not freed: 409 while the work runs, then one run at a time',
    (where) => timesOutOnce(where, {}, { status: 504, body: 'Gateway Timeout' }),
  );
});

describe('idem/hono: a handler that never answers', () => {
  it('holds its key at most maxHoldMs: the client then gets 409, and the key ends failed and retryable', async () => {
    const store = memoryStore();
    const guard = idempotency({ store, ttlMs: 86_400_000, leaseMs: 300, maxHoldMs: 400, scope: 'single-tenant' });
    const app = new Hono<{ Variables: IdempotencyVariables }>();
    const signals: AbortSignal[] = [];
    app.post('/v1/charges', guard, async (c) => {
      signals.push(c.get('idempotency').signal);
      await new Promise(() => {});
      return c.text('never');
    });
    const response = await app.request('/v1/charges', { method: 'POST', headers: { 'idempotency-key': 'm1' } });
    const kept = await store.get(recordPk('single-tenant', 'm1'));
    expect([response.status, await response.text(), kept?.status, kept?.retryable, signals[0]?.aborted]).toEqual([
      409,
      expect.stringContaining('idempotency-lease-lost'),
      'failed',
      true,
      true,
    ]);
  });
});

it('takes maxHoldMs as an option, checked by name', () => {
  expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', maxHoldMs: -1 })).toThrow(/maxHoldMs/);
});
