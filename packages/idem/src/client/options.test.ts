/**
 * The client's options: maxRetryTime, shouldRetry after onFailedAttempt, a streamed or multipart body re-sent
 * byte for byte, the caller's key or the request's own header, createIdempotentFetch's defaults, and validation.
 */
import { describe, expect, it } from 'vitest';
import { createIdempotentFetch, idempotentFetch, type FailedAttempt, type IdempotentFetchOptions } from './index.js';
import { answer, charge, scripted, timing } from './server.test-kit.js';

describe('idem/client', () => {
  it('stops when the next wait would pass maxRetryTime', async () => {
    const server = await scripted(answer(503));
    const { sleeps, options } = timing(1);
    const result = await idempotentFetch(server.url, charge, { ...options, maxRetryTime: 2_500 });
    // 1st failure: wait 1000 (ends at 1000 ≤ 2500). 2nd failure at t=1000: a 2000 wait would end at 3000 > 2500.
    expect([result.response.status, result.attempts, sleeps]).toEqual([503, 2, [1000]]);
  });

  it('lets shouldRetry veto a retry, after onFailedAttempt saw the failure', async () => {
    const server = await scripted(answer(503), answer(500, {}, 'bug'), answer(201));
    const seen: Array<Omit<FailedAttempt, 'error' | 'response' | 'key'> & { status: number | undefined }> = [];
    const result = await idempotentFetch(server.url, charge, {
      ...timing().options,
      onFailedAttempt: ({ attemptNumber, retriesLeft, retryDelay, response }) =>
        void seen.push({ attemptNumber, retriesLeft, retryDelay, status: response?.status }),
      shouldRetry: ({ response }) => response?.status !== 500,
    });
    expect([result.response.status, await result.response.text(), result.attempts]).toEqual([500, 'bug', 2]);
    expect(seen).toEqual([
      { attemptNumber: 1, retriesLeft: 5, retryDelay: 500, status: 503 },
      { attemptNumber: 2, retriesLeft: 4, retryDelay: 1000, status: 500 },
    ]);
  });

  it('re-sends a streamed or multipart body byte for byte on every attempt', async () => {
    const server = await scripted(answer(503), answer(201));
    const encoded = new TextEncoder().encode('{"amount":1}');
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoded.subarray(0, 5));
        controller.enqueue(encoded.subarray(5));
        controller.close();
      },
    });
    const init = {
      method: 'POST',
      body: stream,
      duplex: 'half',
      headers: { 'content-type': 'application/json' },
    } as RequestInit;
    await idempotentFetch(server.url, init, timing().options);
    expect(server.seen.map((s) => s.body)).toEqual(['{"amount":1}', '{"amount":1}']);

    const multipart = await scripted(answer(503), answer(201));
    const form = new FormData();
    form.set('amount', '1');
    await idempotentFetch(multipart.url, { method: 'POST', body: form }, timing().options);
    const [first, second] = multipart.seen;
    expect(first?.type).toMatch(/^multipart\/form-data; boundary=/);
    expect([second?.type, second?.body, second?.key]).toEqual([first?.type, first?.body, first?.key]);
    expect(first?.body).toContain('name="amount"\r\n\r\n1\r\n');
  });

  it("uses the caller's key, or the request's own Idempotency-Key header", async () => {
    const server = await scripted(answer(503), answer(201));
    const other = await scripted(answer(503), answer(201));
    const given = await idempotentFetch(server.url, charge, { ...timing().options, key: 'order-42-capture' });
    const fromHeader = await idempotentFetch(
      other.url,
      { ...charge, headers: { 'content-type': 'application/json', 'idempotency-key': 'order-43-capture' } },
      timing().options,
    );
    expect([given.key, fromHeader.key]).toEqual(['order-42-capture', 'order-43-capture']);
    expect([...server.seen, ...other.seen].map((s) => s.key)).toEqual([
      'order-42-capture',
      'order-42-capture',
      'order-43-capture',
      'order-43-capture',
    ]);
  });

  it('createIdempotentFetch applies defaults, gives every call its own key, and refuses a default key', async () => {
    const server = await scripted(answer(503), answer(201));
    const { sleeps, options } = timing(1);
    const payments = createIdempotentFetch({ ...options, minTimeout: 250 });
    const one = await payments(server.url, charge);
    const down = await scripted(answer(503));
    const two = await payments(down.url, charge, { retries: 0 });
    expect([one.attempts, two.attempts, two.response.status, sleeps]).toEqual([2, 1, 503, [250]]);
    expect(one.key).not.toBe(two.key);
    expect(() => createIdempotentFetch({ key: 'shared' } as IdempotentFetchOptions)).toThrow(
      'Expected `key` to be given per call (one key per logical operation), not as a default.',
    );
  });

  it('validates its options by name', async () => {
    const cases: Array<[IdempotentFetchOptions, string]> = [
      [{ retries: -1 }, 'Expected `retries` to be a non-negative integer, got -1.'],
      [{ retries: 1.5 }, 'Expected `retries` to be a non-negative integer, got 1.5.'],
      [{ factor: 0.5 }, 'Expected `factor` to be a number of at least 1, got 0.5.'],
      [{ minTimeout: -5 }, 'Expected `minTimeout` to be a non-negative number, got -5.'],
      [
        { minTimeout: 2_000, maxTimeout: 1_000 },
        'Expected `maxTimeout` to be a number of at least minTimeout (2000), got 1000.',
      ],
      [{ maxRetryTime: -1 }, 'Expected `maxRetryTime` to be a non-negative number, got -1.'],
      [{ inFlightPollMs: 0 }, 'Expected `inFlightPollMs` to be a positive number, got 0.'],
      [{ key: '' }, 'Expected `key` to be a non-empty string, got "".'],
      [{ shouldRetry: true as never }, 'Expected `shouldRetry` to be a function, got true.'],
      [{ random: 0.5 as never }, 'Expected `random` to be a function, got 0.5.'],
    ];
    for (const [options, message] of cases) {
      await expect(idempotentFetch('http://127.0.0.1:9/', charge, options)).rejects.toThrow(message);
      if (!('key' in options)) expect(() => createIdempotentFetch(options)).toThrow(message);
    }
  });
});
