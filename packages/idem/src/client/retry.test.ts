/**
 * The client's retries: one key for every attempt of an operation, which answers it retries (a dropped socket, a
 * 503, a 409 with Retry-After) and which it never does, how long it waits, and what it returns when it runs out.
 */
import { describe, expect, it } from 'vitest';
import { idempotentFetch, isRetryableStatus } from './index.js';
import { answer, charge, drop, scripted, timing, UUID } from './server.test-kit.js';

describe('idem/client', () => {
  it('retries a dropped socket, a 503 and a 409 with Retry-After under one key, then returns the answer', async () => {
    const server = await scripted(
      drop,
      answer(503),
      answer(409, { 'retry-after': '1' }),
      answer(201, { 'content-type': 'application/json' }, '{"id":"ch_1"}'),
    );
    const { sleeps, options } = timing(0.5);
    const result = await idempotentFetch(server.url, charge, options);
    expect([result.response.status, await result.response.text(), result.attempts, result.replayed]).toEqual([
      201,
      '{"id":"ch_1"}',
      4,
      false,
    ]);
    expect(result.key).toMatch(UUID);
    expect(server.seen).toEqual(
      Array.from({ length: 4 }, () => ({
        method: 'POST',
        key: result.key,
        type: 'application/json',
        body: '{"amount":50000,"currency":"usd"}',
      })),
    );
    // Backoff with full jitter at random() = 0.5: 0.5 × 1000, 0.5 × 2000; then the server's Retry-After: 1 s.
    expect(sleeps).toEqual([500, 1000, 1000]);
  });

  it('reports a replayed final answer', async () => {
    const server = await scripted(answer(502), answer(201, { 'idempotent-replayed': 'true' }, '{"id":"ch_1"}'));
    const result = await idempotentFetch(server.url, charge, timing().options);
    expect([result.response.status, result.attempts, result.replayed]).toEqual([201, 2, true]);
  });

  it('never retries a final 4xx', async () => {
    for (const status of [400, 401, 402, 403, 404, 413, 422]) {
      const server = await scripted(answer(status, {}, `status ${status}`), answer(201));
      const { sleeps, options } = timing();
      const result = await idempotentFetch(server.url, charge, options);
      expect([
        result.response.status,
        await result.response.text(),
        result.attempts,
        server.seen.length,
        sleeps,
      ]).toEqual([status, `status ${status}`, 1, 1, []]);
    }
    expect([400, 401, 402, 403, 404, 405, 410, 413, 415, 422].map(isRetryableStatus)).toEqual(Array(10).fill(false));
    expect([408, 409, 425, 429, 500, 502, 503, 504].map(isRetryableStatus)).toEqual(Array(8).fill(true));
  });

  it('honours Retry-After given as an HTTP date', async () => {
    const start = Date.UTC(2026, 0, 1, 0, 0, 0);
    const server = await scripted(answer(409, { 'retry-after': 'Thu, 01 Jan 2026 00:00:03 GMT' }), answer(201));
    const { sleeps, options } = timing(0.5, start);
    const result = await idempotentFetch(server.url, charge, options);
    expect([result.attempts, sleeps]).toEqual([2, [3000]]);
  });

  it('caps a Retry-After at maxTimeout', async () => {
    const server = await scripted(answer(503, { 'retry-after': '3600' }), answer(201));
    const { sleeps, options } = timing();
    await idempotentFetch(server.url, charge, { ...options, maxTimeout: 5_000 });
    expect(sleeps).toEqual([5000]);
  });

  it('draws each backoff from 0 up to min(maxTimeout, minTimeout × factor^n) and returns the last answer when retries run out', async () => {
    const server = await scripted(answer(503, {}, 'down'));
    const bounds = { retries: 4, minTimeout: 100, factor: 3, maxTimeout: 1_000 };
    const top = timing(1);
    const last = await idempotentFetch(server.url, charge, { ...top.options, ...bounds });
    expect([last.response.status, await last.response.text(), last.attempts]).toEqual([503, 'down', 5]);
    expect(top.sleeps).toEqual([100, 300, 900, 1000]);
    const bottom = timing(0);
    await idempotentFetch(server.url, charge, { ...bottom.options, ...bounds });
    expect(bottom.sleeps).toEqual([0, 0, 0, 0]);
    expect(server.seen.length).toBe(10);
  });

  it('rethrows the last network error when every attempt fails', async () => {
    const server = await scripted(drop);
    const failures: Array<[number, number, string]> = [];
    const rejected = await idempotentFetch(server.url, charge, {
      ...timing().options,
      retries: 2,
      onFailedAttempt: ({ attemptNumber, retriesLeft, error }) =>
        void failures.push([attemptNumber, retriesLeft, (error as Error).name]),
    }).catch((e: unknown) => e);
    expect([(rejected as Error).name, (rejected as Error).message]).toEqual(['TypeError', 'fetch failed']);
    expect(failures).toEqual([
      [1, 2, 'TypeError'],
      [2, 1, 'TypeError'],
      [3, 0, 'TypeError'],
    ]);
    expect(server.seen.length).toBe(3);
  });
});
