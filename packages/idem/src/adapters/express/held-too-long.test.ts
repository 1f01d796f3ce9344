import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { describe, expect, it } from 'vitest';
import type { IdempotencyEvent } from '../../core/events.js';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency as webIdempotency } from '../../http/index.js';
import { idempotency } from './index.js';

// A handler that outlives maxHoldMs: the engine aborts its signal and settles the key failed, retryable. Whatever
// the handler answers after that is not what the record holds, so it must not reach the client as a success.
// Express cannot see its handler settle (the gate must refuse the late answer); the Web layer answers at the abort.
function heldTooLong() {
  const store = memoryStore();
  let givenUp!: () => void;
  const settledRetryable = new Promise<void>((resolve) => (givenUp = resolve));
  const onEvent = (event: IdempotencyEvent) => {
    if (event.type === 'executed' && event.outcome === 'failed-retryable') givenUp();
  };
  const options = { store, scope: 'single-tenant' as const, ttlMs: 86_400_000, leaseMs: 600, maxHoldMs: 300, onEvent };
  const runs = { count: 0 };
  const init = {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'k-held' },
    body: '{"amount":500}',
  };
  /** The first answer must be the lease-lost problem, the record failed and retryable, the work run once. */
  const check = async (first: Response) => {
    expect(first.status).toBe(409);
    expect(((await first.json()) as { type: string }).type).toBe('urn:idem:problem:idempotency-lease-lost');
    const record = await store.get(recordPk('single-tenant', 'k-held'));
    expect([record?.status, record?.retryable, record?.response]).toEqual(['failed', true, null]);
    expect(runs.count).toBe(1);
  };
  return { options, settledRetryable, runs, init, check };
}

describe('a handler held past maxHoldMs gets the lease-lost problem, never its own 201', () => {
  it('Express', async () => {
    const { options, settledRetryable, runs, init, check } = heldTooLong();
    const app = express();
    app.use(idempotency<undefined>(options));
    app.post('/v1/charges', (_req, res) => {
      runs.count++;
      void settledRetryable.then(() => res.status(201).json({ charge: runs.count }));
    });
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      await check(await fetch(`http://127.0.0.1:${port}/v1/charges`, init));
    } finally {
      server.close();
    }
  });

  it('the Web layer', async () => {
    const { options, settledRetryable, runs, init, check } = heldTooLong();
    const handle = webIdempotency(options)(async () => {
      runs.count++;
      await settledRetryable;
      return new Response('{"charge":1}', { status: 201, headers: { 'content-type': 'application/json' } });
    });
    await check(await handle(new Request('http://api.test/v1/charges', init)));
  });
});

describe('Express: what a handler sends after the lease-lost 409 is dropped (node/hold.ts heldAbort), not thrown', () => {
  it('res.status(201).json() once the client has its 409 does not throw', async () => {
    const { options, init } = heldTooLong();
    let late!: () => void;
    const app = express();
    app.use(idempotency<undefined>(options));
    app.post('/v1/charges', (_req, res) => void (late = () => void res.status(201).json({ charge: 1 })));
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      const first = await fetch(`http://127.0.0.1:${port}/v1/charges`, init);
      let thrown: unknown = 'nothing';
      try {
        late();
      } catch (error) {
        thrown = (error as { code?: string }).code;
      }
      expect([first.status, thrown]).toEqual([409, 'nothing']);
    } finally {
      server.close();
    }
  });
});
