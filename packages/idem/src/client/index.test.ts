import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createIdempotentFetch,
  idempotentFetch,
  isRetryableStatus,
  type FailedAttempt,
  type IdempotentFetchOptions,
} from './index.js';

type Step = (req: IncomingMessage, res: ServerResponse) => void;

const drop: Step = (req) => req.socket.destroy();
const answer =
  (status: number, headers: Record<string, string> = {}, body = ''): Step =>
  (_req, res) => {
    res.writeHead(status, headers);
    res.end(body);
  };

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A real HTTP server that answers attempt n with script[n] (the last step repeats) and records what it saw. */
async function scripted(...script: Step[]) {
  const seen: Array<{ method: string; key: string | undefined; type: string | undefined; body: string }> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        key: req.headers['idempotency-key'] as string | undefined,
        type: req.headers['content-type'],
        body: Buffer.concat(chunks).toString(),
      });
      const step = script[Math.min(seen.length, script.length) - 1] as Step;
      step(req, res);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`, seen };
}

/** A promise and its resolve, to order events by signals instead of by sleeping. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Deterministic time: sleeps are recorded (and advance the clock) instead of waited. */
function timing(random = 0.5, start = 0) {
  const sleeps: number[] = [];
  let clock = start;
  const options = {
    random: () => random,
    now: () => clock,
    sleep: async (ms: number, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      sleeps.push(ms);
      clock += ms;
    },
  } satisfies IdempotentFetchOptions;
  return { sleeps, options };
}

const charge: RequestInit = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: '{"amount":50000,"currency":"usd"}',
};
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

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

  it('stops retrying when the signal aborts, rejecting with its reason', async () => {
    const server = await scripted(answer(503));
    const controller = new AbortController();
    const reason = new Error('user cancelled');
    const rejected = await idempotentFetch(server.url, charge, {
      ...timing().options,
      signal: controller.signal,
      onFailedAttempt: ({ attemptNumber }) => {
        if (attemptNumber === 2) controller.abort(reason);
      },
    }).catch((e: unknown) => e);
    expect([rejected, server.seen.length]).toEqual([reason, 2]);

    const before = await idempotentFetch(server.url, charge, { signal: AbortSignal.abort(reason) }).catch(
      (e: unknown) => e,
    );
    expect([before, server.seen.length]).toEqual([reason, 2]);
  });

  it('aborts the default sleep between attempts', async () => {
    const server = await scripted(answer(503));
    const controller = new AbortController();
    const reason = new Error('shutting down');
    const pending = idempotentFetch(server.url, charge, {
      minTimeout: 60_000,
      maxTimeout: 60_000,
      random: () => 1,
      signal: controller.signal,
    }).catch((e: unknown) => e);
    await expect.poll(() => server.seen.length).toBe(1);
    controller.abort(reason);
    expect(await pending).toBe(reason);
    expect(server.seen.length).toBe(1);
  });

  describe('honours every abort signal it is given, stopping at once with its reason', () => {
    const sources = {
      'options.signal': (url: string, signal: AbortSignal, options: IdempotentFetchOptions) =>
        idempotentFetch(url, charge, { ...options, signal }),
      'init.signal': (url: string, signal: AbortSignal, options: IdempotentFetchOptions) =>
        idempotentFetch(url, { ...charge, signal }, options),
      "the Request's signal": (url: string, signal: AbortSignal, options: IdempotentFetchOptions) =>
        idempotentFetch(new Request(url, { ...charge, signal }), {}, options),
      "the Request's signal, with another in init": (
        url: string,
        signal: AbortSignal,
        options: IdempotentFetchOptions,
      ) => idempotentFetch(new Request(url, { ...charge, signal }), { signal: new AbortController().signal }, options),
    };

    /** The call's outcome once it settles (its value or its rejection), read by `expect.poll`. */
    function outcome(pending: Promise<unknown>): () => unknown {
      let settled: unknown = 'still pending';
      pending.then(
        (value) => void (settled = value),
        (error: unknown) => void (settled = error),
      );
      return () => settled;
    }

    it.each(Object.entries(sources))(
      '%s, during an attempt: the request is aborted, no retry follows',
      async (_name, call) => {
        const arrived = deferred();
        const closed = deferred();
        const server = await scripted((_req, res) => {
          res.once('close', closed.resolve);
          arrived.resolve(); // and never answer
        });
        const controller = new AbortController();
        const reason = new Error('user cancelled');
        const settled = outcome(call(server.url, controller.signal, timing().options));
        await arrived.promise;
        controller.abort(reason);
        await expect.poll(settled, { timeout: 5_000 }).toBe(reason);
        await closed.promise; // the attempt itself was cancelled on the wire, not left running
        expect(server.seen.length).toBe(1);
      },
    );

    it.each(Object.entries(sources))(
      '%s, during the wait between attempts, even with a sleep that ignores it',
      async (_name, call) => {
        const server = await scripted(answer(503));
        const sleeping = deferred();
        const sleeps: number[] = [];
        const sleep = (ms: number): Promise<void> => {
          sleeps.push(ms);
          sleeping.resolve();
          return new Promise<void>(() => {}); // never wakes: only the abort can end this wait
        };
        const controller = new AbortController();
        const reason = new Error('shutting down');
        const settled = outcome(call(server.url, controller.signal, { ...timing(0.5).options, sleep }));
        await sleeping.promise;
        controller.abort(reason);
        await expect.poll(settled, { timeout: 5_000 }).toBe(reason);
        expect([server.seen.length, sleeps]).toEqual([1, [500]]);
      },
    );
  });

  describe('a 409 for an attempt still in flight', () => {
    const IN_USE = 'urn:idem:problem:idempotency-key-in-use';
    const inUse = (retryAfter: string) =>
      answer(
        409,
        { 'content-type': 'application/problem+json', 'retry-after': retryAfter },
        JSON.stringify({ type: IN_USE, title: 'Request in progress', status: 409 }),
      );

    /**
     * An Idem-like server for one key: the first request runs until the test calls `release`; a duplicate
     * meanwhile gets 409 `idempotency-key-in-use` with `Retry-After: 10` (the lease left); afterwards the stored
     * answer is replayed.
     */
    async function runningFirstAttempt() {
      const arrived = deferred();
      const released = deferred();
      let stored: string | undefined;
      let running = false;
      let conflicts = 0;
      const server = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          if (stored !== undefined) {
            res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replayed': 'true' });
            res.end(stored);
          } else if (running) {
            conflicts++;
            inUse('10')(req, res);
          } else {
            running = true;
            arrived.resolve();
            void released.promise.then(() => {
              stored = '{"id":"ch_1"}';
              res.writeHead(201, { 'content-type': 'application/json' });
              res.end(stored);
            });
          }
        });
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      closers.push(async () => {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      });
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
      return { url, arrived: arrived.promise, release: released.resolve, conflicts: () => conflicts };
    }

    it('is polled for soon, not after its Retry-After, and a small retries budget does not give up on it', async () => {
      const server = await runningFirstAttempt();
      const first = idempotentFetch(server.url, charge, { ...timing().options, key: 'order-7' });
      await server.arrived;
      // The duplicate's waits are recorded; during the fourth (about 2 s after its first 409) the first attempt
      // is released and answers. Before, it waited the whole Retry-After (10 s), or gave up after `retries` 409s.
      const { sleeps, options } = timing(0.5);
      const duplicate = await idempotentFetch(server.url, charge, {
        ...options,
        key: 'order-7',
        retries: 1,
        sleep: async (ms, signal) => {
          await options.sleep(ms, signal);
          if (sleeps.length === 4) {
            server.release();
            await first;
          }
        },
      });
      server.release();
      const original = await first;
      expect([
        duplicate.response.status,
        await duplicate.response.text(),
        duplicate.attempts,
        duplicate.replayed,
      ]).toEqual([201, '{"id":"ch_1"}', 5, true]);
      expect([server.conflicts(), sleeps]).toEqual([4, [250, 375, 563, 844]]);
      expect([original.response.status, await original.response.text(), original.attempts, original.replayed]).toEqual([
        201,
        '{"id":"ch_1"}',
        1,
        false,
      ]);
    });

    it('costs one retry when polling starts and one per maxTimeout of waiting after, so a 409 for ever is given up on', async () => {
      const server = await scripted(inUse('1'));
      const run = async (extra: IdempotentFetchOptions) => {
        const left: number[] = [];
        const { sleeps, options } = timing(0.5);
        const result = await idempotentFetch(server.url, charge, {
          ...options,
          maxTimeout: 1_000,
          onFailedAttempt: ({ retriesLeft }) => void left.push(retriesLeft),
          ...extra,
        });
        return [result.response.status, result.attempts, sleeps, left];
      };
      // 250 + 375 + 563 ms of polling is the first 1 s (1 retry) and part of the second; 844 more would start a third.
      expect(await run({ retries: 2 })).toEqual([409, 4, [250, 375, 563], [2, 1, 1, 0]]);
      expect(await run({ retries: 0 })).toEqual([409, 1, [], [0]]);
      expect(await run({ retries: 2, inFlightPollMs: 600 })).toEqual([409, 3, [600, 900], [2, 1, 0]]);
    });

    it('waits at most Retry-After, but a shorter wait still costs the poll interval; any other 409 waits Retry-After', async () => {
      const now = await scripted(inUse('0'));
      const { sleeps, options } = timing(0.5);
      const result = await idempotentFetch(now.url, charge, { ...options, retries: 1, maxTimeout: 1_000 });
      // Each immediate poll is counted as 250 ms: four fit in the first 1 s of polling (1 retry), the fifth does not.
      expect([result.attempts, sleeps]).toEqual([5, [0, 0, 0, 0]]);

      const lost = await scripted(
        answer(
          409,
          { 'content-type': 'application/problem+json', 'retry-after': '10' },
          '{"type":"urn:idem:problem:idempotency-lease-lost"}',
        ),
        answer(201),
      );
      const other = timing(0.5);
      expect((await idempotentFetch(lost.url, charge, other.options)).attempts).toBe(2);
      expect(other.sleeps).toEqual([10_000]);
    });
  });

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
