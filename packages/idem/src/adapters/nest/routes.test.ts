/**
 * `idem/nest` per-route decisions: `required`, `classify` and `ttlFor` per route, `@Idempotent(false)`, a guard
 * that refuses before any claim, and controllers inheriting one handler that decide differently about it.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DAY, LiveCharges, SandboxCharges } from './app.test-kit.js';
import { available, newRef, useNestApps } from './serve.test-kit.js';

describe.skipIf(!available)('idem/nest', () => {
  const { start, onEachPlatform } = useNestApps();

  onEachPlatform((served) => {
    it('a route with required: true refuses a keyless request (400 key-missing) before the handler', async () => {
      const ref = newRef();
      const answer = await served.post('/v1/charges', { ref, amount: 500 });
      expect([answer.status, answer.problem, served.work.runs.get(ref)]).toEqual([
        400,
        'urn:idem:problem:idempotency-key-missing',
        undefined,
      ]);
    });

    it("per-route classify releases a 422 (the fixed payload runs with the same key); per-route ttlFor sets the record's life", async () => {
      const ref = newRef();
      const key = randomUUID();
      const invalid = await served.post('/v1/payouts', { ref, amount: 500 }, { 'idempotency-key': key });
      expect([invalid.status, await served.record(key)]).toEqual([422, null]);
      const fixed = await served.post(
        '/v1/payouts',
        { ref, amount: 500, destination: 'ba_1' },
        { 'idempotency-key': key },
      );
      expect([fixed.status, fixed.text]).toEqual([201, '{"id":"po_2","destination":"ba_1","protected":true}']);
      const record = await served.record(key);
      expect([record?.status, (record?.expiresAt ?? 0) - (record?.claimedAt ?? 0)]).toEqual(['succeeded', 2 * DAY]);
    });

    it('@Idempotent(false) leaves a route alone: the same key runs twice and nothing is stored', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/webhooks', { ref, amount: 1 }, { 'idempotency-key': key });
      const second = await served.post('/v1/webhooks', { ref, amount: 1 }, { 'idempotency-key': key });
      expect([first.text, second.text, await served.record(key)]).toEqual(['{"run":1}', '{"run":2}', null]);
    });

    it('a request the guard refuses claims nothing: 403, and no store round trip', async () => {
      const ref = newRef();
      const trips = served.store.roundTrips;
      const answer = await served.post(
        '/v1/charges',
        { ref, amount: 500 },
        { 'idempotency-key': randomUUID(), authorization: 'Bearer nope' },
      );
      expect([answer.status, served.store.roundTrips - trips, served.work.runs.get(ref)]).toEqual([403, 0, undefined]);
    });
  });

  it.each([
    ['express', [SandboxCharges, LiveCharges]],
    ['express', [LiveCharges, SandboxCharges]],
    ['fastify', [SandboxCharges, LiveCharges]],
  ] as const)(
    'controllers that inherit one handler keep their own @Idempotent decision (%s)',
    async (platform, controllers) => {
      const served = await start(platform, { controllers: [...controllers] });
      try {
        const key = randomUUID();
        const live = await served.post('/live/charges', { ref: newRef(), amount: 1 }, { 'idempotency-key': key });
        const keyless = await served.post('/live/charges', { ref: newRef(), amount: 1 });
        const sandbox = await served.post(
          '/sandbox/charges',
          { ref: newRef(), amount: 1 },
          { 'idempotency-key': randomUUID() },
        );
        expect([live.status, live.text, keyless.status, keyless.problem, sandbox.status, sandbox.text]).toEqual([
          201,
          '{"protected":true}',
          400,
          'urn:idem:problem:idempotency-key-missing',
          201,
          '{"protected":null}',
        ]);
      } finally {
        await served.close();
      }
    },
  );
});
