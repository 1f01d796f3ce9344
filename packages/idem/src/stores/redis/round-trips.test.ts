/**
 * The Redis store's round trips, as `onRoundTrip` sees them: each script call, its keys, arguments and reply; with
 * `replicas`, the WAIT sent with every write in the same round trip, and a write not acknowledged rejected.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  available,
  claimRequest,
  closing,
  drivers,
  indexKey,
  intercept,
  ioredis,
  isolated,
  observing,
  recordKey,
  scope,
  unknownScripts,
} from '#test/fixtures/redis.js';
import { losingClaim, oneKeyThrough } from '#test/fixtures/stores.js';
import type { ClaimRequest, Outcome, RoundTrip } from '../contract.js';
import { createEngine } from '../../core/engine.js';
import { LEASE, T0, TTL } from '../../testing/fixtures.js';
import type { RedisClient, RedisPipeline } from './index.js';
import { SCRIPTS } from './scripts.js';

describe.skipIf(!available)('redis store', () => {
  for (const driver of drivers) {
    describe(`redis store (${driver.name})`, () => {
      /** The claim script's arguments for `req`, as the store sends them. */
      const claimArgs = (req: ClaimRequest) => [
        String(req.now),
        req.fingerprint,
        req.token,
        req.id,
        String(req.now + req.leaseMs),
        String(req.now + req.ttlMs),
        String(req.ttlMs),
        req.scope,
        req.key,
        req.key,
      ];
      /** The claim's EVALSHA for `req` as `onRoundTrip` reports it. */
      const claimCall = (store: Parameters<typeof recordKey>[0], req: ClaimRequest) => ({
        command: 'EVALSHA',
        script: 'claim',
        keys: [recordKey(store, req.pk), indexKey(store, scope)],
        args: claimArgs(req),
      });

      describe('onRoundTrip', () => {
        /** The HGETALL part of a claim's reply for a record `req` claimed: fields in the order the script wrote them. */
        const claimedFields = (req: ClaimRequest) => [
          'scope',
          req.scope,
          'key',
          req.key,
          'status',
          'in_progress',
          'fingerprint',
          req.fingerprint,
          'id',
          req.id,
          'token',
          req.token,
          'claimedAt',
          String(req.now),
          'leaseExpiresAt',
          String(req.now + req.leaseMs),
          'expiresAt',
          String(req.now + req.ttlMs),
          'retryable',
          '0',
        ];

        it('load() reports one SCRIPT LOAD per script, answered with its SHA', () =>
          observing(driver, { load: false }, async (store, trips) => {
            await store.load();
            const byScript = [...trips].sort((a, b) =>
              String((a.request as { script: string }).script).localeCompare(
                String((b.request as { script: string }).script),
              ),
            );
            expect(byScript).toEqual(
              Object.values(SCRIPTS)
                .map(({ name, sha }) => ({
                  op: 'load',
                  request: { command: 'SCRIPT LOAD', script: name },
                  response: sha,
                }))
                .sort((a, b) => a.request.script.localeCompare(b.request.script)),
            );
            expect(trips.length).toBe(store.roundTrips);
          }));

        it('a fresh claim is one EVALSHA of the claim script, answered [1, the id, 0 (no takeover)]: the rest is the request’s', () =>
          observing(driver, {}, async (store, trips) => {
            trips.length = 0;
            const req = claimRequest();
            expect((await store.claim(req)).kind).toBe('claimed');
            expect(trips).toEqual([{ op: 'claim', request: claimCall(store, req), response: [1, req.id, 0] }]);
          }));

        it('a losing claim is one EVALSHA answered [0, the fields of the record in the way]', () =>
          observing(driver, {}, async (store, trips) => {
            const { winner, loser } = await losingClaim(store, claimRequest, trips);
            expect(winner.pk).toBe(loser.pk);
            expect(trips).toEqual([
              { op: 'claim', request: claimCall(store, loser), response: [0, claimedFields(winner)] },
            ]);
          }));

        it('a resend meeting its own token answers the record as it stands, renewed or completed since', () =>
          closing(isolated(driver), async (store) => {
            const req = claimRequest();
            await store.claim(req);
            await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL + 1 });
            const renewed = await store.claim(req); // the client resending the first claim after a lost reply
            expect([renewed.kind, renewed.record]).toEqual(['claimed', await store.get(req.pk)]);
            expect(renewed.record.leaseExpiresAt).toBe(T0 + 1 + LEASE);
            const outcome = { status: 'failed', retryable: true, resultId: null, response: null } as const;
            await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome });
            const completed = await store.claim(req);
            expect([completed.record.status, completed.record.retryable]).toEqual(['failed', true]);
            expect(completed.record).toEqual(await store.get(req.pk));
          }));

        it('reports as many trips as roundTrips counts: claim, complete, get, and list’s one script call', () =>
          observing(driver, {}, async (store, trips) => {
            const before = store.roundTrips;
            trips.length = 0;
            const req = claimRequest();
            const key = recordKey(store, req.pk);
            const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
            await store.claim(req);
            await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome });
            await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome }); // its own resend: 1
            await store.complete({
              pk: req.pk,
              token: req.token,
              now: T0 + 2,
              outcome: { ...outcome, status: 'failed' },
            });
            await store.get(req.pk);
            await store.list({ scope, limit: 10 });
            expect(trips.length).toBe(store.roundTrips - before);
            const args = [req.token, 'succeeded', '0', '1', 'ch_1', '0', '', '', ''];
            const completion = { command: 'EVALSHA', script: 'complete', keys: [key], args };
            const fields = [
              ...claimedFields(req).map((v) => (v === 'in_progress' ? 'succeeded' : v)),
              'resultId',
              'ch_1',
            ];
            expect(trips.slice(1)).toEqual([
              { op: 'complete', request: completion, response: 1 },
              { op: 'complete', request: completion, response: 1 },
              {
                op: 'complete',
                request: { ...completion, args: [req.token, 'failed', ...args.slice(2)] },
                response: 0,
              },
              { op: 'get', request: { command: 'EVALSHA', script: 'get', keys: [key], args: [] }, response: fields },
              {
                op: 'list',
                request: {
                  command: 'EVALSHA',
                  script: 'list',
                  keys: [indexKey(store, scope)],
                  args: [`${store.prefix}{IDEMPOTENCY#${scope}}#`, '10', '1000'],
                },
                response: [0, [fields]],
              },
            ]);
          }));

        it('an observer that throws changes nothing: same results and round trips', async () => {
          let calls = 0;
          const onRoundTrip = () => {
            calls++;
            throw new Error('observer broke');
          };
          await closing(isolated(driver, { onRoundTrip }), async (store) => {
            const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
            await oneKeyThrough(store, claimRequest, { outcome });
            expect(calls).toBe(store.roundTrips); // load ×6 included
          });
        });
      });

      describe('replicas: WAIT after every write (this server has no replica, so WAIT reaches 0)', () => {
        const wait = { replicas: 1, replicaTimeoutMs: 20 };

        it('a claim that writes is one round trip, EVALSHA and WAIT 1 20, and rejects: written, not acknowledged', () =>
          observing(driver, { replicas: wait }, async (store, trips) => {
            trips.length = 0;
            const req = claimRequest();
            await expect(store.claim(req)).rejects.toThrow(
              `redis claim of ${recordKey(store, req.pk)}: written on the primary, not acknowledged: WAIT reached 0 of 1 replicas in 20 ms`,
            );
            expect(trips).toEqual([
              {
                op: 'claim',
                request: { ...claimCall(store, req), wait: [1, 20] },
                response: [[1, req.id, 0], 0],
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

  it('an EVALSHA answered NOSCRIPT falls back to EVAL and both count as round trips', () =>
    closing(isolated(ioredis, { wrap: unknownScripts }), async (store) => {
      const before = store.roundTrips;
      const req = claimRequest();
      expect((await store.claim(req)).kind).toBe('claimed');
      expect(store.roundTrips - before).toBe(2);
      expect((await store.get(req.pk))?.token).toBe(req.token);
      expect(store.roundTrips - before).toBe(4);
    }));

  it('onRoundTrip sees the EVALSHA answered NOSCRIPT as an error, then the EVAL that followed', () =>
    observing(ioredis, { load: false, wrap: unknownScripts }, async (store, trips) => {
      const req = claimRequest();
      await store.get(req.pk);
      const request = { script: 'get', keys: [recordKey(store, req.pk)], args: [] };
      expect(trips).toEqual([
        { op: 'get', request: { command: 'EVALSHA', ...request }, error: trips[0]?.error },
        { op: 'get', request: { command: 'EVAL', ...request }, response: [] },
      ]);
      expect(String(trips[0]?.error)).toMatch(/^ReplyError: NOSCRIPT/);
      expect(store.roundTrips).toBe(2);
    }));
});
