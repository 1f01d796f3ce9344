/** The Redis store with `replicas`: WAIT after every write, one round trip; a write not acknowledged rejects. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  available,
  claimRequest,
  closing,
  drivers,
  indexKey,
  intercept,
  isolated,
  observing,
  recordKey,
  scope,
} from '../../../../../test/fixtures/redis.js';
import type { Outcome, RoundTrip } from '../contract.js';
import { createEngine } from '../../core/engine.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import type { RedisClient, RedisPipeline } from './index.js';

describe.skipIf(!available)('redis store', () => {
  for (const driver of drivers) {
    describe(`redis store (${driver.name})`, () => {
      describe('replicas: WAIT after every write (this server has no replica, so WAIT reaches 0)', () => {
        const wait = { replicas: 1, replicaTimeoutMs: 20 };

        it('a claim that writes is one round trip, EVALSHA and WAIT 1 20, and rejects: written, not acknowledged', () =>
          observing(driver, { replicas: wait }, async (store, trips) => {
            trips.length = 0;
            const req = claimRequest();
            await expect(store.claim(req)).rejects.toThrow(
              `redis claim of ${recordKey(store, req.pk)}: written on the primary, not acknowledged: WAIT reached 0 of 1 replicas in 20 ms`,
            );
            const base = `${store.prefix}{IDEMPOTENCY#${scope}}#`;
            const args = [
              String(T0),
              req.fingerprint,
              req.token,
              req.id,
              String(T0 + LEASE),
              String(T0 + TTL),
              String(TTL),
              scope,
              req.key,
              base,
              req.key,
            ];
            expect(trips).toEqual([
              {
                op: 'claim',
                request: {
                  command: 'EVALSHA',
                  script: 'claim',
                  keys: [recordKey(store, req.pk), indexKey(store, scope)],
                  args,
                  wait: [1, 20],
                },
                response: [[1, req.id], 0],
              },
            ]);
            expect(store.roundTrips).toBe(8 + 1);
            // The primary has the record: a second claim meets it, and a refusal wrote nothing, so WAIT is not checked.
            const again = await store.claim({ ...req, token: randomUUID(), now: T0 + 1 });
            expect([again.kind, again.record.token]).toEqual(['existing', req.token]);
          }));

        it('complete, renew and release that write reject; refused by their condition they answer ok: false', async () => {
          const plain = await isolated(driver);
          const store = await isolated(driver, { prefix: plain.prefix, replicas: wait });
          try {
            const req = claimRequest();
            await plain.claim(req);
            const stale = randomUUID();
            const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
            expect(await store.complete({ pk: req.pk, token: stale, now: T0 + 1, outcome })).toEqual({ ok: false });
            expect(
              await store.renew({ pk: req.pk, token: stale, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL }),
            ).toEqual({ ok: false });
            expect(await store.release({ pk: req.pk, token: stale })).toEqual({ ok: false });
            const unacknowledged = (op: string, pk: string) =>
              `redis ${op} of ${recordKey(store, pk)}: written on the primary, not acknowledged: WAIT reached 0 of 1 replicas in 20 ms`;
            await expect(
              store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL }),
            ).rejects.toThrow(unacknowledged('renew', req.pk));
            await expect(store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome })).rejects.toThrow(
              unacknowledged('complete', req.pk),
            );
            expect((await plain.get(req.pk))?.status).toBe('succeeded');
            const held = claimRequest();
            await plain.claim(held);
            await expect(store.release({ pk: held.pk, token: held.token })).rejects.toThrow(
              unacknowledged('release', held.pk),
            );
            expect(await plain.get(held.pk)).toBeNull();
          } finally {
            await store.close();
            await plain.close();
          }
        });

        it('through the engine: a claim WAIT does not confirm is STORE_UNAVAILABLE and the work never runs', () =>
          closing(isolated(driver, { replicas: wait }), async (store) => {
            const engine = createEngine({ store, leaseMs: LEASE });
            let ran = 0;
            const run = engine.run({ scope, key: randomUUID(), fingerprint: 'a'.repeat(64) }, async () => {
              ran++;
              return { response: { status: 201, headers: [], body: new Uint8Array() } };
            });
            const error = (await run.catch((thrown: unknown) => thrown)) as { code?: string; cause?: Error };
            expect([error.code, error.cause?.message.endsWith('WAIT reached 0 of 1 replicas in 20 ms')]).toEqual([
              'STORE_UNAVAILABLE',
              true,
            ]);
            expect(ran).toBe(0);
            expect(engine.activeLeases).toBe(0);
          }));

        it('NOSCRIPT is retried as EVAL with its own WAIT (two round trips); replicas: 0 sends no WAIT', async () => {
          const trips: RoundTrip[] = [];
          // The pipeline asks for a script the server has never seen, so the NOSCRIPT reply is Redis's own.
          const unknownSha = (client: RedisClient): RedisClient => ({
            ...intercept(client, {}),
            pipeline: () => {
              const inner = (client.pipeline as () => RedisPipeline).call(client);
              const outer: RedisPipeline = {
                evalsha: (_sha, numKeys, ...keysAndArgs) => (
                  inner.evalsha('0'.repeat(40), numKeys, ...keysAndArgs),
                  outer
                ),
                eval: (source, numKeys, ...keysAndArgs) => (inner.eval(source, numKeys, ...keysAndArgs), outer),
                wait: (replicas, timeout) => (inner.wait(replicas, timeout), outer),
                exec: () => inner.exec(),
              };
              return outer;
            },
          });
          const store = await isolated(driver, {
            replicas: wait,
            wrap: unknownSha,
            onRoundTrip: (trip) => void trips.push(trip),
          });
          const plain = await isolated(driver, { prefix: store.prefix, onRoundTrip: (trip) => void trips.push(trip) });
          try {
            trips.length = 0;
            const req = claimRequest();
            await expect(store.claim(req)).rejects.toThrow('WAIT reached 0 of 1 replicas in 20 ms');
            const seen = trips.map((trip) => [
              (trip.request as { command: string }).command,
              trip.error instanceof Error ? trip.error.message.split(' ')[0] : null,
              (trip.response as unknown[] | undefined)?.[1],
            ]);
            expect(seen).toEqual([
              ['EVALSHA', 'NOSCRIPT', undefined],
              ['EVAL', null, 0],
            ]);
            expect(trips.map((trip) => (trip.request as { wait?: unknown }).wait)).toEqual([
              [1, 20],
              [1, 20],
            ]);
            trips.length = 0;
            expect((await plain.claim(claimRequest())).kind).toBe('claimed');
            expect(trips.map((trip) => 'wait' in (trip.request as object))).toEqual([false]);
          } finally {
            await plain.close();
            await store.close();
          }
        });
      });
    });
  }
});
