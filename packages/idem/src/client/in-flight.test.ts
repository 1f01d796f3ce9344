/**
 * The client and a 409 for an attempt still in flight (`idempotency-key-in-use`): polled for soon rather than
 * after its Retry-After, and what that polling costs of the retries budget; any other 409 waits its Retry-After.
 */
import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { idempotentFetch, type IdempotentFetchOptions } from './index.js';
import { answer, charge, deferred, listening, scripted, timing } from './server.test-kit.js';

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
  const url = await listening(server);
  return { url, arrived: arrived.promise, release: released.resolve, conflicts: () => conflicts };
}

describe('idem/client', () => {
  describe('a 409 for an attempt still in flight', () => {
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
});
