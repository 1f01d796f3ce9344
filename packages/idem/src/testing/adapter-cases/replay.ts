/**
 * @module The conformance cases of replay: a retry answers the first outcome byte for byte, marked as replayed,
 * in one store round trip; scopes stay apart, and nothing a client sends forces a replay.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { tripMeter } from '../fixtures.js';
import { created, createdBody, expectProblem, newKey, newRef, REPLAYED_HEADERS, summary, TENANT } from './answers.js';
import { runningFirst, type SuiteKit } from './kit.js';

export function replayCases<Tx, S extends IdempotencyStore<Tx>>(kit: SuiteKit<Tx, S>): void {
  const { serve, post, runs, record, ledger, commit } = kit;
  describe('replay', () => {
    it.each(['json', 'stream'] as const)(
      'a new key runs once; the retry replays status, exact bytes and every stored header, marked as replayed (%s)',
      async (style) => {
        const ref = newRef();
        await serve(({ context }, n) => {
          commit(context, ref);
          return created(n, style);
        });
        const key = newKey();
        const first = await post({ key, ref });
        const retry = await post({ key, ref });
        expect(summary(first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
        expect(summary(retry)).toEqual([201, createdBody(1), '/v1/charges/ch_1', 'true']);
        expect(retry.bytes).toEqual(first.bytes);
        for (const name of REPLAYED_HEADERS) expect(retry.headers.get(name), name).toBe(first.headers.get(name));
        expect([runs(ref), await ledger(ref)]).toEqual([1, 1]);
        const stored = await record(key);
        expect([stored?.status, stored?.response?.status]).toEqual(['succeeded', 201]);
      },
    );

    it('replays an empty 201 and a 204 as empty', async () => {
      const ref = newRef();
      await serve(({ body }) => ({ style: 'empty', status: (body as { status: number }).status }));
      for (const status of [201, 204]) {
        const key = newKey();
        const body = { ref, status };
        const first = await post({ key, body });
        const retry = await post({ key, body });
        expect([first.status, first.text, first.headers.get('idempotent-replayed')]).toEqual([status, '', null]);
        expect([retry.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([status, '', 'true']);
      }
      expect(runs(ref)).toBe(2);
    });

    it('a 303 See Other is final: the retry replays it with its Location, and the handler ran once', async () => {
      const ref = newRef();
      await serve(() => ({ style: 'empty', status: 303, headers: { location: '/v1/charges/ch_1' } }));
      const key = newKey();
      const first = await post({ key, ref });
      const retry = await post({ key, ref });
      expect(summary(first)).toEqual([303, '', '/v1/charges/ch_1', null]);
      expect(summary(retry)).toEqual([303, '', '/v1/charges/ch_1', 'true']);
      expect(runs(ref)).toBe(1);
      const stored = await record(key);
      expect([stored?.status, stored?.response?.status]).toEqual(['succeeded', 303]);
    });

    it('keeps scopes apart: the same key under another tenant runs its own work', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'));
      const key = newKey();
      await post({ key, ref });
      const other = await post({ key, ref, tenant: 'acct_suite_other' });
      expect(summary(other)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
      expect([(await record(key))?.scope, (await record(key, 'acct_suite_other'))?.scope]).toEqual([
        TENANT,
        'acct_suite_other',
      ]);
      expect(runs(ref)).toBe(2);
    });

    it('lets nothing the client sends force a replay or skip the claim', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'));
      const forged = { 'idempotent-replayed': 'true', 'x-idempotent-replayed': 'true' };
      const key = newKey();
      const first = await post({ key, ref, headers: forged });
      expect(summary(first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
      const other = await post({ key, body: { ref, amount: 2 }, headers: forged });
      expectProblem(other, 400, 'idempotency-key-reused');
      await post({ ref, headers: forged });
      await post({ ref, headers: forged });
      expect(runs(ref)).toBe(3);
    });

    it('costs 2 store round trips for a new key, 1 for a replay, a conflict or a mismatch', async () => {
      const ref = newRef();
      const key = newKey();
      const measure = tripMeter(kit.store);
      const { first, open } = await runningFirst(kit, key, ref);
      const fresh = measure();
      await post({ key, ref });
      const conflict = measure();
      open();
      await first;
      const completion = measure();
      await post({ key, ref });
      const replay = measure();
      await post({ key, body: { ref, amount: 1 } });
      const mismatch = measure();
      expect({ fresh: fresh + completion, replay, conflict, mismatch }).toEqual({
        fresh: 2,
        replay: 1,
        conflict: 1,
        mismatch: 1,
      });
    });
  });
}
