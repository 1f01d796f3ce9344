import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeStoreConformance } from 'idem/testing';
import { REDIS_URL, serviceAvailable } from '../../../../../test/services.js';
import { recordPk } from '../../core/key.js';
import type { ClaimRequest, Outcome, RoundTrip } from '../contract.js';
import { createEngine } from '../../core/engine.js';
import { fromNodeRedis, redisStore, type RedisClient, type RedisPipeline, type RedisStore } from './index.js';
import { SCRIPTS } from './scripts.js';

const available = await serviceAvailable('Redis', REDIS_URL);

interface Connection {
  readonly client: RedisClient;
  readonly quit: () => Promise<void>;
}
interface Driver {
  readonly name: string;
  readonly connect: () => Promise<Connection>;
}

const drivers: Driver[] = [
  {
    name: 'ioredis',
    connect: async () => {
      const client = new Redis(REDIS_URL);
      return { client, quit: async () => void (await client.quit()) };
    },
  },
  {
    name: 'node-redis via fromNodeRedis',
    connect: async () => {
      const client = await createClient({ url: REDIS_URL }).connect();
      return { client: fromNodeRedis(client), quit: () => client.close() };
    },
  },
];

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 10_000;
const TTL = 60_000;
const scope = 'acct_redis';

const claimRequest = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => {
  const key = overrides.key ?? randomUUID();
  return {
    pk: recordPk(scope, key),
    scope,
    key,
    fingerprint: 'a'.repeat(64),
    token: randomUUID(),
    id: randomUUID(),
    now: T0,
    leaseMs: LEASE,
    ttlMs: TTL,
    ...overrides,
  };
};

/** Where the store keeps the record `pk` (`IDEMPOTENCY#<scope>#<key>`): `<prefix>{IDEMPOTENCY#<scope>}#<key>`. */
const recordKey = (store: RedisStore, pk: string): string => {
  const end = pk.indexOf('#', 'IDEMPOTENCY#'.length);
  return `${store.prefix}{${pk.slice(0, end)}}${pk.slice(end)}`;
};
/** The sorted set indexing a scope's records: `<prefix>{IDEMPOTENCY#<scope>}:claims`. */
const indexKey = (store: RedisStore, scopeName: string): string =>
  `${store.prefix}{${recordPk(scopeName, '').slice(0, -1)}}:claims`;

/** CRC16-XMODEM, the checksum Redis Cluster uses for hash slots. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The Cluster hash slot of a key: only the first non-empty `{…}` tag is hashed when there is one. */
function keySlot(key: string): number {
  const open = key.indexOf('{');
  const close = open === -1 ? -1 : key.indexOf('}', open + 1);
  const hashed = close > open + 1 ? key.slice(open + 1, close) : key;
  return crc16(Buffer.from(hashed)) % 16_384;
}

describe.skipIf(!available)('redis store', () => {
  let admin: Redis;
  beforeAll(() => {
    admin = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    await admin.quit();
  });

  /** Deletes every key under `prefix` (SCAN + DEL); returns how many. */
  async function dropPrefix(prefix: string): Promise<number> {
    let cursor = '0';
    let deleted = 0;
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1_000);
      cursor = next;
      if (keys.length > 0) deleted += await admin.del(...keys);
    } while (cursor !== '0');
    return deleted;
  }

  /** Keys under `prefix`, sorted. */
  async function keysUnder(prefix: string): Promise<string[]> {
    const keys = new Set<string>();
    let cursor = '0';
    do {
      const [next, page] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1_000);
      cursor = next;
      for (const key of page) keys.add(key);
    } while (cursor !== '0');
    return [...keys].sort();
  }

  /**
   * A loaded store on its own connection under a fresh random prefix. Its `close` also deletes the prefix's
   * keys and quits the connection. `wrap` lets a test interpose on the client; `onRoundTrip` observes the store.
   */
  async function isolated(
    driver: Driver,
    {
      prefix = `idemtest:${randomUUID()}:`,
      wrap = (client: RedisClient) => client,
      load = true,
      onRoundTrip,
      replicas,
    }: {
      prefix?: string;
      wrap?: (client: RedisClient) => RedisClient;
      load?: boolean;
      onRoundTrip?: (trip: RoundTrip) => void;
      /** `replicas` and `replicaTimeoutMs`: this server has no replica, so every WAIT reaches 0. */
      replicas?: { replicas: number; replicaTimeoutMs: number };
    } = {},
  ): Promise<RedisStore> {
    const connection = await driver.connect();
    const store = redisStore({
      client: wrap(connection.client),
      prefix,
      ...(onRoundTrip ? { onRoundTrip } : {}),
      ...replicas,
    });
    if (load) await store.load();
    return Object.create(store, {
      close: {
        value: async () => {
          await store.close();
          await dropPrefix(prefix);
          await connection.quit();
        },
      },
    }) as RedisStore;
  }

  for (const driver of drivers) {
    describeStoreConformance({ name: `redis (${driver.name})`, create: () => isolated(driver) });

    describe(`redis store (${driver.name})`, () => {
      it('load() sends one SCRIPT LOAD per script, after which a claim is one EVALSHA', async () => {
        const store = await isolated(driver, { load: false });
        try {
          await store.load();
          expect(store.roundTrips).toBe(8);
          expect((await store.claim(claimRequest())).kind).toBe('claimed');
          expect(store.roundTrips).toBe(9);
        } finally {
          await store.close();
        }
      });

      it('a record is one hash at <prefix>{IDEMPOTENCY#<scope>}#<key>, filed in its scope’s sorted set', async () => {
        const store = await isolated(driver);
        try {
          const req = claimRequest();
          await store.claim(req);
          const key = recordKey(store, req.pk);
          const index = indexKey(store, scope);
          expect(key).toBe(`${store.prefix}{IDEMPOTENCY#${scope}}#${req.key}`);
          expect(await keysUnder(store.prefix)).toEqual([key, index].sort());
          expect(await admin.zrange(index, '0', '-1', 'WITHSCORES')).toEqual([req.key, String(T0)]);
          // The index lives at least as long as the record it names.
          expect(await admin.pttl(index)).toBeGreaterThanOrEqual((await admin.pttl(key)) - 5);
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
        } finally {
          await store.close();
        }
      });

      it('a claim sets native expiry: PTTL within (0, ttlMs]; renew moves it to expiresAt - now; complete leaves it', async () => {
        const store = await isolated(driver);
        try {
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
        } finally {
          await store.close();
        }
      });

      it('a body with all 256 byte values round-trips exactly, stored as base64', async () => {
        const store = await isolated(driver);
        try {
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
        } finally {
          await store.close();
        }
      });

      it('every script call names keys of one hash slot, its scope’s: a record and its index share the tag', async () => {
        const calls: string[][] = [];
        const note = (numKeys: number, keysAndArgs: string[]) => calls.push(keysAndArgs.slice(0, numKeys));
        const store = await isolated(driver, {
          wrap: (client) => ({
            evalsha: (sha, numKeys, ...keysAndArgs) => (
              note(numKeys, keysAndArgs),
              client.evalsha(sha, numKeys, ...keysAndArgs)
            ),
            eval: (source, numKeys, ...keysAndArgs) => (
              note(numKeys, keysAndArgs),
              client.eval(source, numKeys, ...keysAndArgs)
            ),
            script: (load, source) => client.script(load, source),
            scan: (...args) => client.scan(...args),
          }),
        });
        try {
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
        } finally {
          await store.close();
        }
      });

      describe('onRoundTrip', () => {
        /** The claim script's arguments for `req`, as the store sends them. */
        const claimArgs = (store: RedisStore, req: ClaimRequest) => [
          String(req.now),
          req.fingerprint,
          req.token,
          req.id,
          String(req.now + req.leaseMs),
          String(req.now + req.ttlMs),
          String(req.ttlMs),
          req.scope,
          req.key,
          `${store.prefix}{IDEMPOTENCY#${req.scope}}#`,
          req.key,
        ];
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

        it('load() reports one SCRIPT LOAD per script, answered with its SHA', async () => {
          const trips: RoundTrip[] = [];
          const store = await isolated(driver, { load: false, onRoundTrip: (trip) => void trips.push(trip) });
          try {
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
          } finally {
            await store.close();
          }
        });

        it('a fresh claim is one EVALSHA of the claim script, answered [1, the id]: the rest is the request’s', async () => {
          const trips: RoundTrip[] = [];
          const store = await isolated(driver, { onRoundTrip: (trip) => void trips.push(trip) });
          try {
            trips.length = 0;
            const req = claimRequest();
            expect((await store.claim(req)).kind).toBe('claimed');
            expect(trips).toEqual([
              {
                op: 'claim',
                request: {
                  command: 'EVALSHA',
                  script: 'claim',
                  keys: [recordKey(store, req.pk), indexKey(store, scope)],
                  args: claimArgs(store, req),
                },
                response: [1, req.id],
              },
            ]);
          } finally {
            await store.close();
          }
        });

        it('a losing claim is one EVALSHA answered [0, the fields of the record in the way]', async () => {
          const trips: RoundTrip[] = [];
          const store = await isolated(driver, { onRoundTrip: (trip) => void trips.push(trip) });
          try {
            const winner = claimRequest();
            await store.claim(winner);
            trips.length = 0;
            const loser = claimRequest({ key: winner.key, token: randomUUID(), id: randomUUID(), now: T0 + 1 });
            expect((await store.claim(loser)).kind).toBe('existing');
            expect(trips).toEqual([
              {
                op: 'claim',
                request: {
                  command: 'EVALSHA',
                  script: 'claim',
                  keys: [recordKey(store, winner.pk), indexKey(store, scope)],
                  args: claimArgs(store, loser),
                },
                response: [0, claimedFields(winner)],
              },
            ]);
          } finally {
            await store.close();
          }
        });

        it('a resend meeting its own token answers the record as it stands, renewed or completed since', async () => {
          const store = await isolated(driver);
          try {
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
          } finally {
            await store.close();
          }
        });

        it('reports as many trips as roundTrips counts: claim, complete, get, and list’s one script call', async () => {
          const trips: RoundTrip[] = [];
          const store = await isolated(driver, { onRoundTrip: (trip) => void trips.push(trip) });
          try {
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
          } finally {
            await store.close();
          }
        });

        it('an observer that throws changes nothing: same results and round trips', async () => {
          let calls = 0;
          const store = await isolated(driver, {
            onRoundTrip: () => {
              calls++;
              throw new Error('observer broke');
            },
          });
          try {
            const req = claimRequest();
            const won = await store.claim(req);
            expect([won.kind, won.record.token]).toEqual(['claimed', req.token]);
            const lost = await store.claim(claimRequest({ key: req.key, token: randomUUID() }));
            expect([lost.kind, lost.record.token]).toEqual(['existing', req.token]);
            const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
            expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
            expect((await store.get(req.pk))?.status).toBe('succeeded');
            expect((await store.list({ scope, limit: 10 })).map((r) => r.pk)).toEqual([req.pk]);
            expect(calls).toBe(store.roundTrips); // load ×6 included
          } finally {
            await store.close();
          }
        });
      });

      describe('replicas: WAIT after every write (this server has no replica, so WAIT reaches 0)', () => {
        const wait = { replicas: 1, replicaTimeoutMs: 20 };

        it('a claim that writes is one round trip, EVALSHA and WAIT 1 20, and rejects: written, not acknowledged', async () => {
          const trips: RoundTrip[] = [];
          const store = await isolated(driver, { replicas: wait, onRoundTrip: (trip) => void trips.push(trip) });
          try {
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
          } finally {
            await store.close();
          }
        });

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

        it('through the engine: a claim WAIT does not confirm is STORE_UNAVAILABLE and the work never runs', async () => {
          const store = await isolated(driver, { replicas: wait });
          try {
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
          } finally {
            await store.close();
          }
        });

        it('NOSCRIPT is retried as EVAL with its own WAIT (two round trips); replicas: 0 sends no WAIT', async () => {
          const trips: RoundTrip[] = [];
          // The pipeline asks for a script the server has never seen, so the NOSCRIPT reply is Redis's own.
          const unknownSha = (client: RedisClient): RedisClient => ({
            evalsha: (...args) => client.evalsha(...args),
            eval: (...args) => client.eval(...args),
            script: (load, source) => client.script(load, source),
            scan: (...args) => client.scan(...args),
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

  it('the slot function matches Redis Cluster’s published values', () => {
    expect(crc16(Buffer.from('123456789'))).toBe(0x31c3);
    expect(keySlot('foo')).toBe(12_182);
    expect(keySlot('{user1000}.following')).toBe(keySlot('{user1000}.followers'));
    expect(keySlot('foo{}{bar}')).toBe(crc16(Buffer.from('foo{}{bar}')) % 16_384);
  });

  it('every script touches only its KEYS and records named base .. member, base being the scope’s tag (one slot)', () => {
    // What each script's redis.call targets resolve to, through its `local x = KEYS[i]` / `ARGV[i]` aliases and
    // the argument it passes to keepIndex. ARGV[10] (claim) and ARGV[1] (list, prune) are the base
    // `<prefix>{IDEMPOTENCY#<scope>}#`, as the onRoundTrip tests show the store sending.
    const expected: Record<string, string[]> = {
      claim: ['ARGV[10] .. oldest', 'KEYS[1]', 'KEYS[2]'],
      complete: ['KEYS[1]'],
      renew: ['KEYS[1]', 'KEYS[2]'],
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
      const kept = /^keepIndex\((\w+|KEYS\[\d+\]),/m.exec(source)?.[1];
      if (kept !== undefined) aliases.set('index', aliases.get(kept) ?? kept);
      const targets = [...source.matchAll(/redis\.call\('\w+', ([^,)]+)/g)].map((m) =>
        (m[1] as string)
          .split(' .. ')
          .map((part) => aliases.get(part) ?? part)
          .join(' .. '),
      );
      expect({ name, targets: [...new Set(targets)].sort() }).toEqual({ name, targets: expected[name] });
    }
  });

  it('200 concurrent claims of one key across 3 connections: exactly one is claimed', async () => {
    const prefix = `idemtest:${randomUUID()}:`;
    const ioredis = drivers[0] as Driver;
    const stores = await Promise.all([1, 2, 3].map(() => isolated(ioredis, { prefix })));
    try {
      const base = claimRequest();
      const before = stores.map((s) => s.roundTrips);
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          (stores[i % 3] as RedisStore).claim({ ...base, token: randomUUID(), id: randomUUID() }),
        ),
      );
      const winners = results.filter((r) => r.kind === 'claimed');
      expect(winners.length).toBe(1);
      const token = winners[0]?.record.token;
      expect(results.filter((r) => r.record.token === token).length).toBe(200);
      expect(stores.reduce((sum, s, i) => sum + s.roundTrips - (before[i] as number), 0)).toBe(200);
      expect((await (stores[0] as RedisStore).get(base.pk))?.token).toBe(token);
    } finally {
      for (const store of stores) await store.close();
    }
  });

  it('an EVALSHA answered NOSCRIPT falls back to EVAL and both count as round trips', async () => {
    const ioredis = drivers[0] as Driver;
    // Ask the real server for a script it has never seen, so the NOSCRIPT reply is Redis's own.
    const store = await isolated(ioredis, {
      wrap: (client) => ({
        evalsha: (_sha, numKeys, ...keysAndArgs) => client.evalsha('0'.repeat(40), numKeys, ...keysAndArgs),
        eval: (source, numKeys, ...keysAndArgs) => client.eval(source, numKeys, ...keysAndArgs),
        script: (load, source) => client.script(load, source),
        scan: (...args) => client.scan(...args),
      }),
    });
    try {
      const before = store.roundTrips;
      const req = claimRequest();
      expect((await store.claim(req)).kind).toBe('claimed');
      expect(store.roundTrips - before).toBe(2);
      expect((await store.get(req.pk))?.token).toBe(req.token);
      expect(store.roundTrips - before).toBe(4);
    } finally {
      await store.close();
    }
  });

  it('onRoundTrip sees the EVALSHA answered NOSCRIPT as an error, then the EVAL that followed', async () => {
    const ioredis = drivers[0] as Driver;
    const trips: RoundTrip[] = [];
    const store = await isolated(ioredis, {
      load: false,
      onRoundTrip: (trip) => void trips.push(trip),
      wrap: (client) => ({
        evalsha: (_sha, numKeys, ...keysAndArgs) => client.evalsha('0'.repeat(40), numKeys, ...keysAndArgs),
        eval: (source, numKeys, ...keysAndArgs) => client.eval(source, numKeys, ...keysAndArgs),
        script: (load, source) => client.script(load, source),
        scan: (...args) => client.scan(...args),
      }),
    });
    try {
      const req = claimRequest();
      await store.get(req.pk);
      const request = { script: 'get', keys: [recordKey(store, req.pk)], args: [] };
      expect(trips).toEqual([
        { op: 'get', request: { command: 'EVALSHA', ...request }, error: trips[0]?.error },
        { op: 'get', request: { command: 'EVAL', ...request }, response: [] },
      ]);
      expect(String(trips[0]?.error)).toMatch(/^ReplyError: NOSCRIPT/);
      expect(store.roundTrips).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('an expired key vanishes natively: get returns null and list skips it', async () => {
    const store = await isolated(drivers[0] as Driver);
    try {
      const live = claimRequest();
      const brief = claimRequest({ ttlMs: 1, leaseMs: 1 });
      await store.claim(live);
      await store.claim(brief);
      const key = recordKey(store, brief.pk);
      while ((await admin.exists(key)) === 1) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(await store.get(brief.pk)).toBeNull();
      expect((await store.list({ scope, limit: 10 })).map((r) => r.key)).toEqual([live.key]);
      // The list met the expired record's index member and removed it.
      expect(await admin.zrange(indexKey(store, scope), '0', '-1')).toEqual([live.key]);
    } finally {
      await store.close();
    }
  });

  it('sweep deletes only logically expired records and leaves foreign keys alone', async () => {
    const store = await isolated(drivers[0] as Driver);
    try {
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
    } finally {
      await store.close();
    }
  });

  it('list is one round trip with 10,000 unrelated keys on the server (before the index: 11 SCAN pages + reads)', async () => {
    const store = await isolated(drivers[0] as Driver);
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
      await dropPrefix(noise);
      await store.close();
    }
  });

  it('the scope index is pruned: by claims (two oldest), by list (bounded per call), by sweep; members follow records', async () => {
    const store = await isolated(drivers[0] as Driver);
    try {
      const index = indexKey(store, scope);
      // The newest member, alive throughout.
      const anchor = claimRequest({ now: T0 + 100 });
      await store.claim(anchor);
      const brief = Array.from({ length: 5 }, (_, i) => claimRequest({ now: T0 + i }));
      for (const req of brief) await store.claim(req);
      expect(await admin.zcard(index)).toBe(6);
      // Their records vanish as native expiry would make them (DEL, so no claim below races the clock).
      expect(await admin.del(...brief.map((req) => recordKey(store, req.pk)))).toBe(5);
      // A claim files its key and removes the two oldest members whose records are gone.
      const live = claimRequest({ now: T0 + 10 });
      await store.claim(live);
      expect(await admin.zrange(index, '0', '-1')).toEqual([
        brief[2]?.key,
        brief[3]?.key,
        brief[4]?.key,
        live.key,
        anchor.key,
      ]);
      // Sweep removes the rest (and deletes no live record).
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
    } finally {
      await store.close();
    }
  });

  it('a script resent after its reply was lost (the same arguments again) counts as applied: claim, complete, release', async () => {
    // What ioredis's autoResendUnfulfilledCommands (on by default) does after a dropped connection: the server
    // runs the same EVALSHA twice.
    const store = await isolated(drivers[0] as Driver);
    try {
      const req = claimRequest();
      const first = await store.claim(req);
      expect(await store.claim(req)).toEqual({ kind: 'claimed', record: first.record });
      expect((await store.claim({ ...req, token: randomUUID() })).kind).toBe('existing');
      const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
      const completion = { pk: req.pk, token: req.token, now: T0 + 1, outcome };
      expect(await store.complete(completion)).toEqual({ ok: true });
      expect(await store.complete(completion)).toEqual({ ok: true });
      expect(await store.complete({ ...completion, outcome: { ...outcome, status: 'failed' } })).toEqual({ ok: false });
      expect(await store.complete({ ...completion, token: randomUUID() })).toEqual({ ok: false });
      const held = claimRequest();
      await store.claim(held);
      expect(await store.release({ pk: held.pk, token: held.token })).toEqual({ ok: true });
      expect(await store.release({ pk: held.pk, token: held.token })).toEqual({ ok: true });
      expect(await store.get(held.pk)).toBeNull();
    } finally {
      await store.close();
    }
  });

  it('sweep stops at limit', async () => {
    const store = await isolated(drivers[0] as Driver);
    try {
      for (let i = 0; i < 5; i++) await store.claim(claimRequest());
      expect(await store.sweep({ now: T0 + TTL, batchSize: 2, limit: 3 })).toBe(3);
      expect(await store.sweep({ now: T0 + TTL })).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('complete refuses effects (Redis cannot commit them with the record) and changes nothing', async () => {
    const store = await isolated(drivers[0] as Driver);
    try {
      const req = claimRequest();
      await store.claim(req);
      const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: null, response: null };
      await expect(
        store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome, effects: () => 1 }),
      ).rejects.toMatchObject({
        code: 'CONFIG_INVALID',
      });
      expect((await store.get(req.pk))?.status).toBe('in_progress');
    } finally {
      await store.close();
    }
  });

  it('a closed store rejects calls and leaves the client open', async () => {
    const client = new Redis(REDIS_URL);
    try {
      const store = redisStore({ client, prefix: `idemtest:${randomUUID()}:` });
      await store.close();
      await expect(store.get(recordPk(scope, 'k'))).rejects.toThrow('redis store is closed');
      expect(store.roundTrips).toBe(0);
      expect(await client.ping()).toBe('PONG');
    } finally {
      await client.quit();
    }
  });

  it('options are validated at once, naming the option', () => {
    expect(() => redisStore({ client: admin, onRoundTrip: 'log' as never })).toThrow(
      'Expected `onRoundTrip` to be a function, got "log".',
    );
    expect(() => redisStore({ client: {} as RedisClient })).toThrow(
      'Expected `client` to be a Redis client with evalsha, eval, script and scan (an ioredis client, or fromNodeRedis(client)).',
    );
    expect(() => redisStore({ client: admin, prefix: 'a{b' })).toThrow(
      'Expected `prefix` to be a string without `{` or `}`, got "a{b".',
    );
    expect(() => redisStore({ client: admin, scanCount: 0 })).toThrow(
      'Expected `scanCount` to be a positive integer, got 0.',
    );
    expect(() => redisStore({ client: admin, replicas: 1.5 })).toThrow(
      'Expected `replicas` to be a non-negative integer, got 1.5.',
    );
    expect(() => redisStore({ client: admin, replicas: 1, replicaTimeoutMs: 0 })).toThrow(
      'Expected `replicaTimeoutMs` to be a positive integer (WAIT 0 would wait forever), got 0.',
    );
    // A node-redis client without multi(): fromNodeRedis offers no pipeline.
    const noPipeline = fromNodeRedis({
      evalSha: async () => null,
      eval: async () => null,
      scriptLoad: async () => null,
      scan: async () => ({ cursor: '0', keys: [] }),
    });
    expect('pipeline' in noPipeline).toBe(false);
    expect(() => redisStore({ client: noPipeline, replicas: 1 })).toThrow(
      'Expected `client` to be a client with pipeline() when `replicas` is set (an ioredis client, or fromNodeRedis(client) of one with multi()).',
    );
    expect(redisStore({ client: noPipeline, replicas: 0 }).name).toBe('redis');
  });
});
