/**
 * @module The conformance cases of the outcome recorded before the client has it: a store down at completion,
 * a lost lease and a client that goes away never leave the client with an answer the store does not hold.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { created, createdBody, expectProblem, newKey, newRef, SHORT_LEASE_MS, summary } from './answers.js';
import type { SuiteKit } from './kit.js';

export function recordedFirstCases<Tx, S extends IdempotencyStore<Tx>>(kit: SuiteKit<Tx, S>): void {
  const { serve, post, runs, started, gate, inBackground, record, ledger, commit, claimable } = kit;
  describe('the outcome must be recorded before the client has it', () => {
    it.each(['json', 'stream'] as const)(
      'store down at completion: 503 store-unavailable, never the 201; the retry runs the work and commits once (%s)',
      async (style) => {
        const ref = newRef();
        await serve(
          ({ context }, n) => {
            commit(context, ref);
            return created(n, style);
          },
          { leaseMs: SHORT_LEASE_MS },
        );
        const key = newKey();
        kit.down.complete = true;
        const first = await post({ key, ref });
        expectProblem(first, 503, 'idempotency-store-unavailable');
        expect(first.headers.get('location')).toBeNull();
        expect(await ledger(ref)).toBe(0);
        kit.down.complete = false;
        await claimable(key);
        const retry = await post({ key, ref });
        expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
      },
    );

    it.each(['json', 'stream'] as const)(
      'a lost lease: the attempt taken over answers 409 lease-lost, never its 201; one ledger row (%s)',
      async (style) => {
        const ref = newRef();
        const hold = gate();
        await serve(
          async ({ context }, n) => {
            commit(context, ref);
            if (n === 1) await hold.wait;
            return created(n, style);
          },
          { leaseMs: SHORT_LEASE_MS },
        );
        const key = newKey();
        kit.down.renew = true;
        const begun = started(ref);
        const first = inBackground(post({ key, ref }));
        await begun;
        await claimable(key);
        const takeover = await post({ key, ref });
        expect(summary(takeover)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        kit.down.renew = false;
        hold.open();
        const late = await first;
        expectProblem(late, 409, 'idempotency-lease-lost');
        expect(late.headers.get('location')).toBeNull();
        const replay = await post({ key, ref });
        expect(summary(replay)).toEqual([201, createdBody(2), '/v1/charges/ch_2', 'true']);
        expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
      },
    );

    it('a client that disconnects does not release the key: the work finishes, is recorded and replayed', async () => {
      const ref = newRef();
      const hold = gate();
      await serve(async ({ context }, n) => {
        commit(context, ref);
        if (n === 1) await hold.wait;
        return created(n, 'json');
      });
      const key = newKey();
      const abort = new AbortController();
      const begun = started(ref);
      const attempt = post({ key, ref, signal: abort.signal }).then(
        () => 'answered',
        (error: unknown) => error,
      );
      await begun;
      abort.abort();
      expect(await attempt).toBeInstanceOf(Error);
      // Answered after the server has seen the first connection close: the key is still held.
      const probe = await post({ key, ref });
      expectProblem(probe, 409, 'idempotency-key-in-use');
      hold.open();
      await expect
        .poll(async () => (await record(key))?.status, { timeout: 5_000, interval: 20 })
        .not.toBe('in_progress');
      const done = await record(key);
      expect([done?.status, done?.response?.status]).toEqual(['succeeded', 201]);
      const retry = await post({ key, ref });
      expect(summary(retry)).toEqual([201, createdBody(1), '/v1/charges/ch_1', 'true']);
      expect([runs(ref), await ledger(ref)]).toEqual([1, 1]);
    });
  });
}
