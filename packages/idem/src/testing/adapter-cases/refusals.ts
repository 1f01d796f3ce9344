/**
 * @module The conformance cases of refusals: keyless and invalid requests, a reused key, an oversized body or
 * response, a duplicate in flight and a store down at the claim, each answered with its problem+json.
 */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { created, createdBody, expectProblem, newKey, newRef, summary, TENANT } from './answers.js';
import { runningFirst, type SuiteKit } from './kit.js';

export function refusalCases<Tx, S extends IdempotencyStore<Tx>>(kit: SuiteKit<Tx, S>): void {
  const { serve, post, runs, record } = kit;
  describe('refusals', () => {
    it('a keyless request runs unprotected every time, and leaves no record', async () => {
      const ref = newRef();
      await serve(({ context }) => ({ style: 'json', status: 201, json: { protected: context?.protected ?? null } }));
      const first = await post({ ref });
      const second = await post({ ref });
      expect([first.status, first.text, second.status, second.text]).toEqual([
        201,
        '{"protected":false}',
        201,
        '{"protected":false}',
      ]);
      expect([runs(ref), (await kit.store.list({ scope: TENANT, limit: 10 })).length]).toEqual([2, 0]);
    });

    it('a keyless request where keys are required: 400 idempotency-key-missing, nothing runs', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'), { required: true });
      expectProblem(await post({ ref }), 400, 'idempotency-key-missing');
      expect(runs(ref)).toBe(0);
    });

    it('an invalid key: 400 idempotency-key-invalid, nothing runs or is stored', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'));
      expectProblem(await post({ key: 'two words', ref }), 400, 'idempotency-key-invalid');
      expect([runs(ref), (await kit.store.list({ scope: TENANT, limit: 10 })).length]).toEqual([0, 0]);
    });

    it('the same key with another body, or the same body and another query: 400 idempotency-key-reused, record untouched', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'));
      const key = newKey();
      await post({ key, ref });
      const done = await record(key);
      expectProblem(await post({ key, body: { ref, amount: 1, currency: 'usd' } }), 400, 'idempotency-key-reused');
      expectProblem(await post({ key, ref, query: '?expand=customer' }), 400, 'idempotency-key-reused');
      expect(await record(key)).toEqual(done);
      expect(runs(ref)).toBe(1);
    });

    it('a body over maxBodyBytes: 413 request-too-large, nothing runs or is stored', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'), { maxBodyBytes: 64 });
      const key = newKey();
      expectProblem(await post({ key, body: { ref, pad: 'x'.repeat(100) } }), 413, 'request-too-large');
      expect([runs(ref), await record(key)]).toEqual([0, null]);
    });

    it('a duplicate while the first runs: 409 idempotency-key-in-use with Retry-After: 1, record untouched', async () => {
      const ref = newRef();
      const key = newKey();
      const { first, open } = await runningFirst(kit, key, ref);
      const running = await record(key);
      const duplicate = await post({ key, ref });
      expectProblem(duplicate, 409, 'idempotency-key-in-use');
      expect(duplicate.headers.get('retry-after')).toBe('1');
      const after = await record(key);
      expect([after?.status, after?.token, after?.id]).toEqual(['in_progress', running?.token, running?.id]);
      open();
      expect(summary(await first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
      expect(runs(ref)).toBe(1);
    });

    it('the store down at the claim: 503 idempotency-store-unavailable, and the handler does not run', async () => {
      const ref = newRef();
      await serve((_input, n) => created(n, 'json'));
      kit.down.claim = true;
      const answer = await post({ key: newKey(), ref });
      expectProblem(answer, 503, 'idempotency-store-unavailable');
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(runs(ref)).toBe(0);
    });

    it('a response over maxResponseBytes: a final 500 response-too-large, replayed byte for byte', async () => {
      const ref = newRef();
      await serve(() => ({ style: 'json', status: 201, json: { id: 'ch_1', pad: 'x'.repeat(1_000) } }), {
        maxResponseBytes: 256,
      });
      const key = newKey();
      const first = await post({ key, ref });
      const retry = await post({ key, ref });
      expectProblem(first, 500, 'response-too-large');
      expectProblem(retry, 500, 'response-too-large');
      expect([retry.text, first.headers.get('idempotent-replayed'), retry.headers.get('idempotent-replayed')]).toEqual([
        first.text,
        null,
        'true',
      ]);
      const stored = await record(key);
      expect([stored?.status, stored?.retryable, runs(ref)]).toEqual(['failed', false, 1]);
    });
  });
}
