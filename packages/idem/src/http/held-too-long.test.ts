import { describe, expect, it } from 'vitest';
import type { IdempotencyEvent } from '../core/events.js';
import { recordPk } from '../core/key.js';
import { memoryStore } from '../stores/memory/index.js';
import { idempotency } from './middleware.js';

// A handler that outlives maxHoldMs: the engine aborts its signal and settles the key failed, retryable. Whatever
// the handler answers after that is not what the record holds, so it must not reach the client as a success.
describe('a handler held past maxHoldMs', () => {
  it('gets the lease-lost problem, never its own 201, and the record says failed, retryable', async () => {
    const store = memoryStore();
    let givenUp!: () => void;
    const settledRetryable = new Promise<void>((resolve) => (givenUp = resolve));
    const onEvent = (event: IdempotencyEvent) => {
      if (event.type === 'executed' && event.outcome === 'failed-retryable') givenUp();
    };
    let runs = 0;
    const handle = idempotency({
      store,
      scope: 'single-tenant',
      ttlMs: 86_400_000,
      leaseMs: 600,
      maxHoldMs: 300,
      onEvent,
    })(async () => {
      runs++;
      // Keeps working past the abort, as a handler that ignores its signal does, until the key was given up.
      await settledRetryable;
      return new Response('{"charge":1}', { status: 201, headers: { 'content-type': 'application/json' } });
    });
    const request = () =>
      new Request('http://api.test/v1/charges', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k-held' },
        body: '{"amount":500}',
      });
    const first = await handle(request());
    expect(first.status).toBe(409);
    expect(((await first.json()) as { type: string }).type).toBe('urn:idem:problem:idempotency-lease-lost');
    const record = await store.get(recordPk('single-tenant', 'k-held'));
    expect([record?.status, record?.retryable, record?.response]).toEqual(['failed', true, null]);
    expect(runs).toBe(1);
  });
});
