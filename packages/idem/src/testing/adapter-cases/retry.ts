/**
 * @module The conformance cases of failures a retry runs again: a retryable status, a thrown error or a response
 * Node refuses commits nothing and leaves the key to run again.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { created, createdBody, newKey, newRef, summary } from './answers.js';
import type { SuiteKit } from './kit.js';

export function retryCases<Tx, S extends IdempotencyStore<Tx>>(kit: SuiteKit<Tx, S>): void {
  const { serve, post, runs, record, ledger, commit } = kit;
  describe('failures the retry runs again', () => {
    it.each([503, 500, 408, 429])(
      'a %i commits no effects and is retryable; the retry runs and commits once',
      async (status) => {
        const ref = newRef();
        await serve(({ context }, n) => {
          commit(context, ref);
          return n === 1 ? { style: 'json', status, json: { error: 'try_again' } } : created(n, 'json');
        });
        const key = newKey();
        const first = await post({ key, ref });
        expect([first.status, first.text, first.headers.get('idempotent-replayed')]).toEqual([
          status,
          '{"error":"try_again"}',
          null,
        ]);
        const failed = await record(key);
        expect([failed?.status, failed?.retryable, await ledger(ref)]).toEqual(['failed', true, 0]);
        const retry = await post({ key, ref });
        expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        const replay = await post({ key, ref });
        expect(summary(replay)).toEqual([201, createdBody(2), '/v1/charges/ch_2', 'true']);
        expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
      },
    );

    it('a thrown error answers 500 and commits nothing; the retry runs again', async () => {
      const ref = newRef();
      await serve(({ context }, n) => {
        commit(context, ref);
        return n === 1 ? { style: 'throw', message: 'boom' } : created(n, 'json');
      });
      const key = newKey();
      const first = await post({ key, ref });
      expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([500, null]);
      const failed = await record(key);
      expect([failed?.status, failed?.retryable, await ledger(ref)]).toEqual(['failed', true, 0]);
      const retry = await post({ key, ref });
      expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
      expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
    });

    it.skipIf(!kit.harness.supports?.rawEnd).each([
      ['an ArrayBuffer', new ArrayBuffer(3)],
      ['a number', 12_345],
    ])(
      'res.end(%s) answers 500 as the framework would, ends the key retryable, and the server lives on',
      async (_what, value) => {
        const ref = newRef();
        await serve((_input, n) => (n === 1 ? { style: 'raw-end', value } : created(n, 'json')));
        const key = newKey();
        const first = await post({ key, ref });
        expect(first.status).toBe(500);
        const failed = await record(key);
        expect([failed?.status, failed?.retryable]).toEqual(['failed', true]);
        const retry = await post({ key, ref });
        expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        expect(runs(ref)).toBe(2);
      },
    );
  });
}
