/**
 * Redis Cluster, for real (issue 17, item 1): a local cluster of 3 primaries and 3 replicas (test/redis-cluster.ts).
 *
 * - The store conformance suite through ioredis `Cluster` and node-redis's cluster client (`fromNodeRedis`), each
 *   also with `replicas: 1` (every write script followed by `WAIT 1`, in one pipeline).
 * - Every key a claim, completion, renewal, release, get and list touches — the script's KEYS and the keys the
 *   scripts themselves build — is read off `MONITOR` on the primary and put to `CLUSTER KEYSLOT`: one slot.
 * - The demo through `IDEM_STORE=redis-cluster://…`: charge, replay, 409 and mismatch; 200 concurrent requests
 *   with one key over three server processes; a process killed (-9) holding the lease, taken over after it.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeStoreConformance } from 'idem/testing';
import {
  fromNodeRedis,
  redisStore,
  type RedisClient,
  type RedisStore,
  type RedisStoreOptions,
} from 'idem/stores/redis';
import type { Outcome } from '../../packages/idem/src/core/record.js';
import { claimRequests, waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { idem } from '../cli/helpers.js';
import { deleteKeysUnder } from '../fixtures/redis-keys.js';
import { api, startDemo, type DemoProcess } from '../harness.js';
import { redisClusterAvailable, startRedisCluster, type LocalRedisCluster } from '../redis-cluster.js';
import { ledgerApart, opened, type Opened } from './backings.js';
import { $500, answer, held, LEASE_MS, oneChargeOfTwoHundred, takeoverAfterKill } from './scenarios.js';

const available = redisClusterAvailable();
const BASE_PORT = 7101;

describe.skipIf(!available)('Redis Cluster: 3 primaries, 3 replicas on 127.0.0.1', () => {
  let cluster: LocalRedisCluster;
  const closers: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    cluster = await startRedisCluster({ basePort: BASE_PORT });
  }, 90_000);
  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {});
    await cluster?.stop();
  });

  /** Clients opened once per driver, on first use (the cluster exists by then), closed after the file. */
  const clients = new Map<string, Promise<RedisClient>>();
  const drivers: Record<string, () => Promise<RedisClient>> = {
    ioredis: async () => {
      const client = new Cluster([...cluster.startupNodes], { lazyConnect: true });
      await client.connect();
      closers.push(() => client.quit());
      return client;
    },
    'node-redis': async () => {
      const client = await createCluster({
        rootNodes: cluster.startupNodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
      }).connect();
      closers.push(() => client.close());
      return fromNodeRedis(client);
    },
  };
  const clientOf = (driver: string): Promise<RedisClient> => {
    let client = clients.get(driver);
    if (!client) clients.set(driver, (client = (drivers[driver] as () => Promise<RedisClient>)()));
    return client;
  };

  /** Deletes every key under `prefix` on every primary (one key per UNLINK: keys of different slots). */
  async function dropPrefix(prefix: string): Promise<void> {
    const primaries = (await cluster.topology()).filter((node) => node.role === 'master' && node.slots.length > 0);
    for (const { port } of primaries) {
      await cluster.withNode(port, (node) => deleteKeysUnder(node, prefix, { one: true }));
    }
  }

  /** A loaded store under a fresh prefix; its `close` also deletes the prefix's keys. */
  async function isolated(driver: string, options: Partial<RedisStoreOptions> = {}): Promise<RedisStore> {
    const prefix = `idemtest:${randomUUID()}:`;
    const store = redisStore({ client: await clientOf(driver), prefix, ...options });
    await store.load();
    return Object.create(store, {
      close: {
        value: async () => {
          await store.close();
          await dropPrefix(prefix);
        },
      },
    }) as RedisStore;
  }

  describeStoreConformance({ name: 'redis cluster (ioredis Cluster)', create: () => isolated('ioredis') });
  describeStoreConformance({
    name: 'redis cluster (node-redis createCluster via fromNodeRedis)',
    create: () => isolated('node-redis'),
  });
  for (const driver of ['ioredis', 'node-redis']) {
    describeStoreConformance({
      name: `redis cluster (${driver}, replicas: 1 — WAIT after every write)`,
      create: () => isolated(driver, { replicas: 1, replicaTimeoutMs: 1_000 }),
    });
  }

  describe('one hash slot per scope', () => {
    const T0 = Date.parse('2026-01-01T00:00:00Z');
    const scope = 'acct_cluster';
    const requests = claimRequests({ scope, fingerprint: 'c'.repeat(64) });
    const request = (key: string, now: number) => requests({ key, now });

    it('every key a claim, complete, renew, release, get and list touches — MONITORed on the primary — has the scope’s CLUSTER KEYSLOT', async () => {
      const store = await isolated('ioredis');
      const tag = `${store.prefix}{IDEMPOTENCY#${scope}}`;
      const recordKeyOf = (key: string) => `${tag}#${key}`;
      const primary = await cluster.primaryFor(`${tag}:claims`);
      // Every command the primary runs, scripts' own redis.call()s included (MONITOR shows them as source "lua").
      const seen: Array<{ args: string[]; source: string }> = [];
      const monitor = await cluster.withNode(primary.port, async (node) => node.duplicate().monitor());
      monitor.on('monitor', (_time: string, args: string[], source: string) => void seen.push({ args, source }));
      const sentinel = `sentinel-${randomUUID()}`;
      try {
        // Several keys, so the list walks other records (and prunes a member whose record is gone).
        const [a, b, c] = [request('k-a', T0), request('k-b', T0 + 1), request('k-c', T0 + 2)] as const;
        for (const req of [a, b, c]) expect((await store.claim(req)).kind).toBe('claimed');
        // b's record vanishes behind the store's back: its index member stays until the list meets it.
        await cluster.withNode(primary.port, (node) => node.unlink(recordKeyOf(b.key)));
        expect((await store.claim(request('k-d', T0 + 3))).kind).toBe('claimed');
        expect(
          await store.renew({ pk: a.pk, token: a.token, now: T0 + 4, leaseMs: 10_000, expiresAt: T0 + 70_000 }),
        ).toEqual({ ok: true });
        const outcome: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response: null };
        expect(await store.complete({ pk: a.pk, token: a.token, now: T0 + 5, outcome })).toEqual({ ok: true });
        expect((await store.get(a.pk))?.status).toBe('succeeded');
        // The list prunes k-b's member (its record is gone) and reads the rest, newest claim first.
        expect((await store.list({ scope, limit: 10 })).map((record) => record.key)).toEqual(['k-d', 'k-c', 'k-a']);
        expect(await store.release({ pk: c.pk, token: c.token })).toEqual({ ok: true });
      } catch (error) {
        monitor.disconnect();
        throw error;
      }
      // The sentinel marks the end: MONITOR delivers in order, so once it arrives everything before it has.
      await cluster.withNode(primary.port, (node) => node.echo(sentinel));
      await waitFor('the sentinel on MONITOR', async () => seen.some(({ args }) => args[1] === sentinel));
      monitor.disconnect();

      const mine = seen.filter(({ args }) => args.some((arg) => arg.startsWith(store.prefix)));
      const scripts = mine.filter(({ args }) => /^(evalsha|eval)$/i.test(args[0] ?? ''));
      const fromLua = mine.filter(({ source }) => source === 'lua');
      const declared = scripts.flatMap(({ args }) => args.slice(3, 3 + Number(args[2])));
      const built = fromLua.map(({ args }) => args[1] as string);
      const touched = [...new Set([...declared, ...built])].sort();
      // The scripts' own commands, read off the wire rather than assumed.
      expect([...new Set(fromLua.map(({ args }) => (args[0] as string).toUpperCase()))].sort()).toEqual(
        ['DEL', 'HGETALL', 'HMGET', 'HSET', 'PERSIST', 'PEXPIRE', 'PTTL', 'ZADD', 'ZREM', 'ZREVRANGE'].sort(),
      );
      expect(touched).toEqual([`${tag}#k-a`, `${tag}#k-b`, `${tag}#k-c`, `${tag}#k-d`, `${tag}:claims`].sort());
      const slots = await cluster.withNode(primary.port, (node) =>
        Promise.all(touched.map(async (key) => Number(await node.call('CLUSTER', 'KEYSLOT', key)))),
      );
      const expected = Number(
        await cluster.withNode(primary.port, (node) => node.call('CLUSTER', 'KEYSLOT', `IDEMPOTENCY#${scope}`)),
      );
      expect(new Set(slots)).toEqual(new Set([expected]));
      await store.close();
    });

    it('Redis 7.0 refuses a script key on another node, not one of another slot on the same node: hence the proof above', async () => {
      const client = (await clientOf('ioredis')) as Cluster;
      const script = "return redis.call('EXISTS', KEYS[1]) + redis.call('EXISTS', ARGV[1])";
      const home = (await cluster.primaryFor('{a}')).port;
      const tagOn = async (wanted: (port: number) => boolean) => {
        for (let i = 0; ; i++) if (wanted((await cluster.primaryFor(`{b${i}}`)).port)) return `{b${i}}`;
      };
      const elsewhere = await tagOn((port) => port !== home);
      const sameNode = await tagOn((port) => port === home);
      await expect(client.eval(script, 1, '{a}x', `${elsewhere}y`)).rejects.toThrow(
        /Script attempted to access a non local key in a cluster node/,
      );
      // Another slot on the same primary runs: a store whose scripts strayed would pass on a cluster until resharding.
      expect(await client.eval(script, 1, '{a}x', `${sameNode}y`)).toBe(0);
    });
  });

  describe('the demo with IDEM_STORE=redis-cluster://…, three server processes', () => {
    let servers: DemoProcess[] = [];
    const ledger = ledgerApart();
    const prefix = `idem_e2e_${randomBytes(5).toString('hex')}:`;
    let store: Opened;

    beforeAll(async () => {
      const env = { IDEM_STORE: `${cluster.url}?prefix=${prefix}`, ...ledger.env };
      store = opened(env, env, ledger.view, async () => {
        await dropPrefix(prefix).catch(() => {});
        ledger.remove();
      });
      const withLease = { ...env, IDEM_LEASE_MS: String(LEASE_MS) };
      servers = await Promise.all([startDemo(withLease), startDemo(withLease), startDemo(withLease)]);
    }, 90_000);
    afterAll(async () => {
      await Promise.all(servers.map((server) => server.stop()));
      await store?.cleanup();
    });

    it('the server says where its records are', () => {
      expect(servers[0]?.output()).toContain(`Redis Cluster ${cluster.url} prefix ${prefix}`);
    });

    it('charge 201, replay byte for byte, 409 while it runs, 400 on another payload: one charge', async () => {
      const [first, second] = servers as [DemoProcess, DemoProcess];
      const alice = api(first.url);
      const before = await alice.balance();
      const key = randomUUID();
      const slow = alice.charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '3000' }).then(answer);
      await held(store, key);
      const busy = await answer(await api(second.url).charge($500, { 'idempotency-key': key }));
      expect([busy.status, busy.problem, busy.retryAfter]).toEqual([
        409,
        'urn:idem:problem:idempotency-key-in-use',
        '1',
      ]);
      const charged = await slow;
      expect([charged.status, charged.replayed]).toEqual([201, null]);
      const replay = await answer(await api(second.url).charge($500, { 'idempotency-key': key }));
      expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', charged.body]);
      const tampered = await answer(await alice.charge({ ...$500, amount: 1 }, { 'idempotency-key': key }));
      expect([tampered.status, tampered.problem]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
      expect(await alice.balance()).toEqual({
        object: 'balance',
        charged: before.charged + 50000,
        count: before.count + 1,
      });
    });

    it('idem records list and show --store redis-cluster://… read the records the servers wrote', async () => {
      const key = randomUUID();
      const charged = await api(servers[0]!.url).charge($500, { 'idempotency-key': key });
      const { id } = (await charged.json()) as { id: string };
      const url = `${cluster.url}?prefix=${prefix}`;
      const listed = await idem(['records', 'list', '--store', url, '--scope', 'acct_alice', '--json']);
      expect([listed.code, listed.stderr]).toEqual([0, '']);
      const records = JSON.parse(listed.stdout) as Array<{ key: string; status: string; resultId: string }>;
      const mine = records.find((record) => record.key === key);
      expect([mine?.status, mine?.resultId]).toEqual(['succeeded', id]);
      const shown = await idem(['records', 'show', key, '--store', url, '--scope', 'acct_alice', '--json']);
      expect([shown.code, (JSON.parse(shown.stdout) as { resultId: string }).resultId]).toEqual([0, id]);
    });

    it('200 concurrent requests with one key over the three: one charge; the rest 409 or a byte-identical replay', async () => {
      await oneChargeOfTwoHundred(servers, store);
    });

    it('kill -9 while a request holds the lease; a retry through another process after the lease charges once', async () => {
      await takeoverAfterKill(servers, store);
    });
  });
});
