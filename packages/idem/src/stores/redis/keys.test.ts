/** Where the Redis store keeps a record and its scope's index: keys, hash slots, native expiry, sweep and list. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deleteKeysUnder, keysUnder } from '#test/fixtures/redis-keys.js';
import {
  admin,
  available,
  claimRequest,
  closing,
  crc16,
  drivers,
  indexKey,
  intercept,
  ioredis,
  isolated,
  keySlot,
  recordKey,
  scope,
} from '#test/fixtures/redis.js';
import { recordPk } from '../../core/key.js';
import type { Outcome } from '../contract.js';
import { LEASE, T0, TTL, waitFor } from '../../testing/fixtures.js';
import type { RedisClient } from './index.js';
import { SCRIPTS } from './scripts.js';

describe.skipIf(!available)('redis store', () => {
  for (const driver of drivers) {
    describe(`redis store (${driver.name})`, () => {
      it('load() sends one SCRIPT LOAD per script, after which a claim is one EVALSHA', () =>
        closing(isolated(driver, { load: false }), async (store) => {
          await store.load();
          expect(store.roundTrips).toBe(8);
          expect((await store.claim(claimRequest())).kind).toBe('claimed');
          expect(store.roundTrips).toBe(9);
        }));

      it('a record is one hash at <prefix>{IDEMPOTENCY#<scope>}#<key>, filed in its scope’s sorted set', () =>
        closing(isolated(driver), async (store) => {
          const req = claimRequest();
          await store.claim(req);
          const key = recordKey(store, req.pk);
          const index = indexKey(store, scope);
          expect(key).toBe(`${store.prefix}{IDEMPOTENCY#${scope}}#${req.key}`);
          expect(await keysUnder(admin, store.prefix)).toEqual([key, index].sort());
          expect(await admin.zrange(index, '0', '-1', 'WITHSCORES')).toEqual([req.key, String(T0)]);
          // The index has no expiry: it goes with its last member, pruned by list and sweep.
          expect(await admin.pttl(index)).toBe(-1);
          expect(await admin.type(key)).toBe('hash');
          expect(await admin.hgetall(key)).toEqual({
            scope,
            key: req.key,
            status: 'in_progress',
            fingerprint: req.fingerprint,
            id: req.id,
            token: req.token,
            claimedAt: String(T0),
            leaseExpiresAt: String(T0 + LEASE),
            expiresAt: String(T0 + TTL),
            retryable: '0',
          });
        }));

      it('a claim sets native expiry: PTTL within (0, ttlMs]; renew moves it to expiresAt - now; complete leaves it', () =>
        closing(isolated(driver), async (store) => {
          const req = claimRequest();
          await store.claim(req);
          const key = recordKey(store, req.pk);
          const pttl = await admin.pttl(key);
          expect(pttl).toBeGreaterThan(0);
          expect(pttl).toBeLessThanOrEqual(TTL);
          // A renewal past the claim's expiry: the key must live until the new expiresAt, not die at the old one.
          const expiresAt = T0 + 1 + 2 * TTL;
          expect(await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: LEASE, expiresAt })).toEqual({
            ok: true,
          });
          const renewed = await admin.pttl(key);
          expect(renewed).toBeGreaterThan(TTL);
          expect(renewed).toBeLessThanOrEqual(2 * TTL);
          // Shorten the expiry by hand: a completion that reset or dropped it would show up as a PTTL above 30 s or -1.
          expect(await admin.pexpire(key, 30_000)).toBe(1);
          const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
          expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 2, outcome })).toEqual({ ok: true });
          const completed = await admin.pttl(key);
          expect(completed).toBeGreaterThan(0);
          expect(completed).toBeLessThanOrEqual(30_000);
          expect((await store.get(req.pk))?.expiresAt).toBe(expiresAt);
        }));

      it('a body with all 256 byte values round-trips exactly, stored as base64', () =>
        closing(isolated(driver), async (store) => {
          const req = claimRequest();
          await store.claim(req);
          const body = Uint8Array.from({ length: 256 }, (_, i) => i);
          const headers: Array<[string, string]> = [['content-type', 'application/octet-stream']];
          const outcome: Outcome = {
            status: 'succeeded',
            retryable: false,
            resultId: 'ch_bin',
            response: { status: 200, headers, body },
          };
          expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
          const expected = Array.from({ length: 256 }, (_, i) => i);
          const record = await store.get(req.pk);
          expect(record?.response?.status).toBe(200);
          expect(record?.response?.headers).toEqual(headers);
          expect([...(record?.response?.body ?? [])]).toEqual(expected);
          // The refused claim's reply carries the same bytes.
          const again = await store.claim({ ...req, token: randomUUID(), now: T0 + 2 });
          expect(again.kind).toBe('existing');
          expect([...(again.record.response?.body ?? [])]).toEqual(expected);
          expect(await admin.hget(recordKey(store, req.pk), 'responseBody')).toBe(Buffer.from(body).toString('base64'));
        }));

      it('every script call names keys of one hash slot, its scope’s: a record and its index share the tag', async () => {
        const calls: string[][] = [];
        const note = (numKeys: number, keysAndArgs: string[]) => calls.push(keysAndArgs.slice(0, numKeys));
        const wrap = (client: RedisClient) =>
          intercept(client, {
            evalsha: (sha, numKeys, ...keysAndArgs) => (
              note(numKeys, keysAndArgs),
              client.evalsha(sha, numKeys, ...keysAndArgs)
            ),
            eval: (source, numKeys, ...keysAndArgs) => (
              note(numKeys, keysAndArgs),
              client.eval(source, numKeys, ...keysAndArgs)
            ),
          });
        await closing(isolated(driver, { wrap }), async (store) => {
          const a = claimRequest();
          // A scope holding braces: Redis hashes the tag up to its first `}`, the same for the record and the index.
          const odd = 'acct}odd{';
          const b = claimRequest({ scope: odd, key: 'has#hash{and}braces', pk: recordPk(odd, 'has#hash{and}braces') });
          await store.claim(a);
          await store.claim({ ...a, token: randomUUID() });
          await store.renew({ pk: a.pk, token: a.token, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL });
          await store.complete({
            pk: a.pk,
            token: a.token,
            now: T0 + 2,
            outcome: { status: 'failed', retryable: true, resultId: null, response: null },
          });
          await store.get(a.pk);
          await store.claim(b);
          await store.list({ scope, limit: 10 });
          await store.release({ pk: b.pk, token: b.token });
          expect(calls.length).toBe(8);
          // How many script calls a sweep makes depends on how SCAN pages the shared server's whole keyspace.
          await store.sweep({ now: T0 + TTL });
          expect(calls.length).toBeGreaterThan(8);
          const mine = [recordKey(store, a.pk), indexKey(store, scope)];
          const odds = [recordKey(store, b.pk), indexKey(store, odd)];
          expect([...new Set(calls.flat())].sort()).toEqual([...mine, ...odds].sort());
          for (const call of calls) expect(new Set(call.map(keySlot)).size).toBe(1);
          expect(new Set(mine.map(keySlot))).toEqual(new Set([crc16(Buffer.from(`IDEMPOTENCY#${scope}`)) % 16_384]));
          expect(new Set(odds.map(keySlot))).toEqual(new Set([crc16(Buffer.from('IDEMPOTENCY#acct')) % 16_384]));
        });
      });
    });
  }

  it('the slot function matches Redis Cluster’s published values', () => {
    expect(crc16(Buffer.from('123456789'))).toBe(0x31c3);
    expect(keySlot('foo')).toBe(12_182);
    expect(keySlot('{user1000}.following')).toBe(keySlot('{user1000}.followers'));
    expect(keySlot('foo{}{bar}')).toBe(crc16(Buffer.from('foo{}{bar}')) % 16_384);
  });

  it('every script touches only its KEYS and records named base .. member, base being the scope’s tag (one slot)', () => {
    // What each script's redis.call targets resolve to, through its `local x = KEYS[i]` / `ARGV[i]` aliases.
    // ARGV[1] (list, prune) is the base `<prefix>{IDEMPOTENCY#<scope>}#`, as the onRoundTrip tests show the store
    // sending.
    const expected: Record<string, string[]> = {
      claim: ['KEYS[1]', 'KEYS[2]'],
      complete: ['KEYS[1]'],
      renew: ['KEYS[1]'],
      release: ['KEYS[1]', 'KEYS[2]'],
      get: ['KEYS[1]'],
      sweep: ['KEYS[1]', 'KEYS[2]'],
      list: ['ARGV[1] .. member', 'KEYS[1]'],
      prune: ['ARGV[1] .. member', 'KEYS[1]'],
    };
    for (const { name, source } of Object.values(SCRIPTS)) {
      const aliases = new Map(
        [...source.matchAll(/local (\w+) = (KEYS\[\d+\]|ARGV\[\d+\])\n/g)].map((m) => [m[1], m[2]] as const),
      );
      const targets = [...source.matchAll(/redis\.call\('\w+', ([^,)]+)/g)].map((m) =>
        (m[1] as string)
          .split(' .. ')
          .map((part) => aliases.get(part) ?? part)
          .join(' .. '),
      );
      expect({ name, targets: [...new Set(targets)].sort() }).toEqual({ name, targets: expected[name] });
    }
  });

  it('an expired key vanishes natively: get returns null and list skips it', () =>
    closing(isolated(ioredis), async (store) => {
      const live = claimRequest();
      const brief = claimRequest({ ttlMs: 1, leaseMs: 1 });
      await store.claim(live);
      await store.claim(brief);
      const key = recordKey(store, brief.pk);
      await waitFor(`Redis to expire ${key}`, async () => (await admin.exists(key)) === 0, { everyMs: 5 });
      expect(await store.get(brief.pk)).toBeNull();
      expect((await store.list({ scope, limit: 10 })).map((r) => r.key)).toEqual([live.key]);
      // The list met the expired record's index member and removed it.
      expect(await admin.zrange(indexKey(store, scope), '0', '-1')).toEqual([live.key]);
    }));

  it('sweep deletes only logically expired records and leaves foreign keys alone', () =>
    closing(isolated(ioredis), async (store) => {
      const foreign = `${store.prefix}{IDEMPOTENCY#not-a-hash}`;
      const lookalike = `${store.prefix}{IDEMPOTENCY#${scope}}#not-a-hash`;
      await admin.set(foreign, 'x');
      await admin.set(lookalike, 'y');
      const old = claimRequest();
      const fresh = claimRequest({ now: T0 + TTL });
      await store.claim(old);
      await store.claim(fresh);
      expect(await store.sweep({ now: T0 + TTL, limit: 5 })).toBe(1);
      expect(await store.get(old.pk)).toBeNull();
      expect((await store.get(fresh.pk))?.token).toBe(fresh.token);
      expect(await admin.get(foreign)).toBe('x');
      expect(await admin.get(lookalike)).toBe('y');
      expect(await admin.zrange(indexKey(store, scope), '0', '-1')).toEqual([fresh.key]);
    }));

  it('list is one round trip with 10,000 unrelated keys on the server (before the index: 11 SCAN pages + reads)', async () => {
    const store = await isolated(ioredis);
    const noise = `idemtest-noise:${randomUUID()}:`;
    try {
      const mine = [claimRequest({ now: T0 }), claimRequest({ now: T0 + 1 }), claimRequest({ now: T0 + 2 })];
      for (const req of mine) await store.claim(req);
      await store.claim(claimRequest({ scope: 'acct_other', pk: recordPk('acct_other', 'k') }));
      for (let i = 0; i < 10_000; i += 1_000) {
        const pipeline = admin.pipeline();
        for (let j = i; j < i + 1_000; j++) pipeline.set(`${noise}${j}`, 'x', 'EX', 600);
        await pipeline.exec();
      }
      const before = store.roundTrips;
      const listed = await store.list({ scope, limit: 10 });
      expect(store.roundTrips - before).toBe(1);
      expect(listed.map((r) => r.key)).toEqual(mine.map((r) => r.key).reverse());
      expect(listed.map((r) => r.pk)).toEqual(mine.map((r) => r.pk).reverse());
      const two = store.roundTrips;
      expect((await store.list({ scope, limit: 2 })).map((r) => r.key)).toEqual([mine[2]?.key, mine[1]?.key]);
      expect(store.roundTrips - two).toBe(1);
    } finally {
      await deleteKeysUnder(admin, noise);
      await store.close();
    }
  });

  it('the scope index is pruned by list (bounded per call) and sweep, never by a claim; members follow records', () =>
    closing(isolated(ioredis), async (store) => {
      const index = indexKey(store, scope);
      // The newest member, alive throughout.
      const anchor = claimRequest({ now: T0 + 100 });
      await store.claim(anchor);
      const brief = Array.from({ length: 5 }, (_, i) => claimRequest({ now: T0 + i }));
      for (const req of brief) await store.claim(req);
      expect(await admin.zcard(index)).toBe(6);
      // Their records vanish as native expiry would make them (DEL, so no claim below races the clock).
      expect(await admin.del(...brief.map((req) => recordKey(store, req.pk)))).toBe(5);
      // A claim files its key and nothing else: the members of the records gone stay.
      const live = claimRequest({ now: T0 + 10 });
      await store.claim(live);
      expect(await admin.zrange(index, '0', '-1')).toEqual([...brief.map((req) => req.key), live.key, anchor.key]);
      // Sweep removes them (and deletes no live record).
      expect(await store.sweep({ now: T0 + 10 })).toBe(0);
      expect(await admin.zrange(index, '0', '-1')).toEqual([live.key, anchor.key]);
      // 1,200 members without records, newer than both: list prunes 1,000 per call, then calls again.
      const stale = Array.from({ length: 1_200 }, (_, i) => [String(T0 + 200 + i), `gone-${i}`]).flat();
      await admin.zadd(index, ...stale);
      const before = store.roundTrips;
      expect((await store.list({ scope, limit: 10 })).map((r) => r.key)).toEqual([anchor.key, live.key]);
      expect(store.roundTrips - before).toBe(2);
      expect(await admin.zrange(index, '0', '-1')).toEqual([live.key, anchor.key]);
      // Release takes a key out; with the last member gone the index is gone too.
      expect(await store.release({ pk: live.pk, token: live.token })).toEqual({ ok: true });
      expect(await admin.zrange(index, '0', '-1')).toEqual([anchor.key]);
      expect(await store.release({ pk: anchor.pk, token: anchor.token })).toEqual({ ok: true });
      expect(await admin.exists(index)).toBe(0);
    }));

  it('sweep stops at limit', () =>
    closing(isolated(ioredis), async (store) => {
      for (let i = 0; i < 5; i++) await store.claim(claimRequest());
      expect(await store.sweep({ now: T0 + TTL, batchSize: 2, limit: 3 })).toBe(3);
      expect(await store.sweep({ now: T0 + TTL })).toBe(2);
    }));
});
