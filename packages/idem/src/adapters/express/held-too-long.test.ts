import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { describe, expect, it } from 'vitest';
import type { IdempotencyEvent } from '../../core/events.js';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

// Express cannot see its handler settle: a handler that outlives maxHoldMs answers into a key the engine has
// already settled failed, retryable. That late 201 is not what the record holds, so the client must not get it.
describe('an Express handler held past maxHoldMs', () => {
  it('answers the lease-lost problem, never its own 201, and the record says failed, retryable', async () => {
    const store = memoryStore();
    let givenUp!: () => void;
    const settledRetryable = new Promise<void>((resolve) => (givenUp = resolve));
    const onEvent = (event: IdempotencyEvent) => {
      if (event.type === 'executed' && event.outcome === 'failed-retryable') givenUp();
    };
    let runs = 0;
    const app = express();
    app.use(
      idempotency<undefined>({
        store,
        scope: 'single-tenant',
        ttlMs: 86_400_000,
        leaseMs: 600,
        maxHoldMs: 300,
        onEvent,
      }),
    );
    app.post('/v1/charges', (_req, res) => {
      runs++;
      void settledRetryable.then(() => res.status(201).json({ charge: runs }));
    });
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    try {
      const first = await fetch(`http://127.0.0.1:${port}/v1/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k-held' },
        body: '{"amount":500}',
      });
      expect(first.status).toBe(409);
      expect(((await first.json()) as { type: string }).type).toBe('urn:idem:problem:idempotency-lease-lost');
      const record = await store.get(recordPk('single-tenant', 'k-held'));
      expect([record?.status, record?.retryable, record?.response]).toEqual(['failed', true, null]);
      expect(runs).toBe(1);
    } finally {
      server.close();
    }
  });
});
