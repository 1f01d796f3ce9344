/**
 * Redis has no transaction to commit a route's `effects` with the record: `declare({ effects })` throws at once, in
 * the handler, so the work's outcome is not lost to a refusal in `complete` after the work ran (which answered 503
 * and ran the work again on each retry).
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { available, closing, ioredis, isolated } from '#test/fixtures/redis.js';
import { idempotency } from '../../http/middleware.js';

describe.skipIf(!available)('redis store: declared effects', () => {
  it('declare({ effects }) throws CONFIG_INVALID in the handler; the answer it returns is stored and replayed', () =>
    closing(isolated(ioredis), async (store) => {
      expect(store.acceptsEffects).toBe(false);
      let runs = 0;
      const refusals: string[] = [];
      const handle = idempotency({ store, scope: 'single-tenant' })((_request, context) => {
        runs += 1;
        try {
          context.declare({ effects: () => undefined });
        } catch (error) {
          refusals.push(`${(error as { code: string }).code}: ${(error as Error).message}`);
        }
        context.declare({ resultId: 'ch_1' });
        return Response.json({ charge: 'ch_1' }, { status: 201 });
      });
      const key = randomUUID();
      const post = () =>
        handle(
          new Request('http://idem.test/charges', {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': key },
            body: '{"amount":100}',
          }),
        );
      const first = await post();
      const second = await post();
      expect([first.status, second.status, second.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true']);
      expect(await second.json()).toEqual({ charge: 'ch_1' });
      expect(runs).toBe(1);
      expect(refusals).toEqual([
        'CONFIG_INVALID: Expected `effects` to be absent with the redis store: it has no transaction to commit them with the record (key the work’s own write on the record id instead).',
      ]);
    }));
});
