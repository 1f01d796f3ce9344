/**
 * The client and abort signals: from `options.signal`, `init.signal` or the Request's own, during an attempt or
 * the wait between attempts (even with a sleep that ignores it), it stops at once with the signal's reason.
 */
import { describe, expect, it } from 'vitest';
import { idempotentFetch, type IdempotentFetchOptions } from './index.js';
import { answer, charge, deferred, scripted, timing } from './server.test-kit.js';

describe('idem/client', () => {
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
});
