/**
 * Redis Cluster failover, measured (issue 17, item 2). A local cluster of 3 primaries and 3 replicas with
 * `cluster-node-timeout 1000`. Each round:
 *
 * 1. 16 workers on 4 ioredis `Cluster` clients (four connections to each node, as four app processes would have)
 *    run the real engine on fresh keys of one scope — one hash slot, so one primary — each execution written to a
 *    ledger (key → the record ids the work ran with; 8 KiB responses). The store is wrapped to note every claim
 *    it acknowledged (`claimed`) and every completion (`ok`).
 * 2. After 150 acknowledged completions, the scope's primary is killed (-9) — in the second experiment after its
 *    replica has been stopped (SIGSTOP) for 700 ms, and the replica is let go right after the kill: a replica that
 *    had fallen behind when its primary crashed. The workers keep going; the test polls CLUSTER NODES until the
 *    replica is primary, restarts the dead node (it rejoins as a replica and syncs), and stops the workers once
 *    50 more completions are acknowledged.
 * 3. Audit, through the new primary: every acknowledged claim whose record is gone, every acknowledged completion
 *    whose record is not `succeeded` under its token.
 * 4. Every key is retried once, by an engine whose clock is a minute ahead (leases of dead attempts have lapsed):
 *    a replay runs nothing; a record left `in_progress` is taken over with the same id; a record that is gone
 *    runs the work with a fresh id. A key whose work ran under two ids is a double execution that a downstream
 *    keyed on the id cannot catch.
 *
 * Rounds alternate `replicas: 0` (Redis's asynchronous replication as is) and `replicas: 1` (WAIT after every
 * write script). Before them, WAIT's cost on a healthy cluster: claim latency with and without it, interleaved in
 * one run. Everything is printed; the assertions are what must hold whatever the timing. `IDEM_FAILOVER_ROUNDS`
 * sets the rounds per mode and experiment (default 5).
 */
import { randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../packages/idem/src/core/clock.js';
import { createEngine } from '../../packages/idem/src/core/engine.js';
import { recordPk } from '../../packages/idem/src/core/key.js';
import type { IdempotencyRecord, IdempotencyStore } from '../../packages/idem/src/core/record.js';
import { claimRequests, waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { redisStore, type RedisStore } from 'idem/stores/redis';
import { redisClusterAvailable, startRedisCluster, type LocalRedisCluster } from '../redis-cluster.js';

const available = redisClusterAvailable();
const BASE_PORT = 7111;
const ROUNDS = Number(process.env.IDEM_FAILOVER_ROUNDS ?? 5);
const WORKERS = 16;
const CLIENTS = 4;
const KILL_AFTER = 150;
const AFTER_RECOVERY = 50;
const LEASE_MS = 2_000;
const REPLICA_TIMEOUT_MS = 500;
/** How long the replica is stalled before its primary dies, in the second experiment: under cluster-node-timeout. */
const LAG_MS = 700;
/** Each response's body: big enough that a stalled replica falls megabytes behind, as a busy one would. */
const BODY_BYTES = 8_192;

interface Round {
  readonly mode: 'async' | 'WAIT 1';
  readonly killed: number;
  readonly promoted: number;
  readonly promotedMs: number;
  /** How far the replica's acknowledged offset was behind the primary's when it was killed, in bytes. */
  readonly lagBytes: number;
  readonly claimsAcked: number;
  readonly claimsLost: number;
  readonly completionsAcked: number;
  readonly completionsLost: number;
  /** Store calls that failed (the engine's 503s), and how many of those were WAIT's refusals. */
  readonly storeErrors: number;
  readonly waitRefusals: number;
  /**
   * The failed calls by cause: WAIT's refusal, a command timeout, the client's redirections exhausted, other (with
   * WAIT: CLUSTERDOWN or a closed connection, which ioredis retries for a lone command but not for a pipeline whose
   * two replies differ).
   */
  readonly errorKinds: Readonly<Record<'WAIT' | 'timeout' | 'redirections' | 'other', number>>;
  /** Keys whose work ran twice or more with one id (a takeover: a downstream keyed on the id dedupes it). */
  readonly rerunSameId: number;
  /** Keys whose work ran under two ids (the record was lost: nothing downstream can tell). */
  readonly rerunFreshId: number;
  /** Keys executed before the audit whose record the audit did not find. */
  readonly executedThenLost: number;
  readonly keys: number;
}

const percentile = (sorted: readonly number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;

describe.skipIf(!available)('Redis Cluster failover: kill -9 of the primary under load, with and without WAIT', () => {
  let cluster: LocalRedisCluster;
  const clients: Cluster[] = [];

  beforeAll(async () => {
    cluster = await startRedisCluster({ basePort: BASE_PORT, nodeTimeoutMs: 1_000 });
    for (let i = 0; i < CLIENTS; i++) {
      // As the demo configures its Cluster client: fail a command rather than queue it; per-node timeouts.
      const client = new Cluster([...cluster.startupNodes], {
        lazyConnect: true,
        enableOfflineQueue: false,
        redisOptions: {
          connectTimeout: 1_000,
          commandTimeout: 2_500,
          maxRetriesPerRequest: 0,
          autoResendUnfulfilledCommands: false,
        },
      });
      client.on('error', () => {});
      client.on('node error', () => {});
      await client.connect();
      clients.push(client);
    }
  }, 90_000);
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await cluster?.stop();
  });

  const storesFor = async (replicas: number): Promise<RedisStore[]> => {
    const prefix = `failover:${randomUUID().slice(0, 8)}:`;
    const stores = clients.map((client) =>
      redisStore({ client, prefix, replicas, replicaTimeoutMs: REPLICA_TIMEOUT_MS }),
    );
    for (const store of stores) await store.load();
    return stores;
  };

  it('WAIT’s cost on a healthy cluster: claim latency p50/p99 with and without it, interleaved in one run', async () => {
    const [plain, waiting] = [await storesFor(0), await storesFor(1)] as const;
    const samples: Record<'async' | 'WAIT 1', number[]> = { async: [], 'WAIT 1': [] };
    const scope = 'acct_latency';
    const request = claimRequests({ scope });
    const claim = () => request({ now: Date.now(), leaseMs: LEASE_MS, ttlMs: 60_000 });
    // 10 alternating batches of 200 claims per mode, 8 at a time: machine load drifts over both alike.
    for (let batch = 0; batch < 20; batch++) {
      const mode = batch % 2 === 0 ? 'async' : 'WAIT 1';
      const stores = mode === 'async' ? plain : waiting;
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async (_, worker) => {
          while (next < 200) {
            next++;
            const store = stores[worker % stores.length] as RedisStore;
            const started = performance.now();
            const result = await store.claim(claim());
            samples[mode].push(performance.now() - started);
            expect(result.kind).toBe('claimed');
          }
        }),
      );
    }
    const rows = (['async', 'WAIT 1'] as const).map((mode) => {
      const sorted = [...samples[mode]].sort((a, b) => a - b);
      return {
        mode,
        claims: sorted.length,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        max: sorted.at(-1) ?? NaN,
      };
    });
    console.log(
      [
        'claim latency, 8 concurrent, 4 clients (ms):',
        ...rows.map(
          (r) =>
            `  ${r.mode.padEnd(7)} n=${r.claims}  p50 ${r.p50.toFixed(2)}  p99 ${r.p99.toFixed(2)}  max ${r.max.toFixed(2)}`,
        ),
      ].join('\n'),
    );
    expect(rows.map((r) => r.claims)).toEqual([2_000, 2_000]);
  }, 120_000);

  /** Prints the rounds, one line each and a total per mode; asserts what must hold whatever the timing. */
  function report(title: string, rounds: readonly Round[]): void {
    const table = [
      title,
      'round  mode     killed→promoted  promoted after  replica behind  keys  claims acked/lost  completions acked/lost  store errors (WAIT)  reruns same id / fresh id',
      ...rounds.map(
        (r, i) =>
          `${String(i + 1).padStart(5)}  ${r.mode.padEnd(7)}  ${r.killed}→${r.promoted}        ${String(r.promotedMs).padStart(6)} ms  ${`${(r.lagBytes / 1024).toFixed(0)} KiB`.padStart(14)}  ${String(r.keys).padStart(4)}  ${`${r.claimsAcked}/${r.claimsLost}`.padStart(17)}  ${`${r.completionsAcked}/${r.completionsLost}`.padStart(22)}  ${`${r.storeErrors} (${r.waitRefusals})`.padStart(19)}  ${`${r.rerunSameId} / ${r.rerunFreshId}`.padStart(25)}`,
      ),
    ];
    for (const mode of ['async', 'WAIT 1'] as const) {
      const of = rounds.filter((r) => r.mode === mode);
      const sum = (field: keyof Round) => of.reduce((total, r) => total + (r[field] as number), 0);
      const kinds = (['WAIT', 'timeout', 'redirections', 'other'] as const).map(
        (kind) => `${kind} ${of.reduce((n, r) => n + r.errorKinds[kind], 0)}`,
      );
      table.push(
        `total  ${mode.padEnd(7)}  claims acked ${sum('claimsAcked')}, lost ${sum('claimsLost')}; completions acked ${sum('completionsAcked')}, lost ${sum('completionsLost')}; store errors ${sum('storeErrors')} (${kinds.join(', ')}); reruns same id ${sum('rerunSameId')}, fresh id ${sum('rerunFreshId')}; promoted after ${of.map((r) => r.promotedMs).join('/')} ms`,
      );
    }
    console.log(table.join('\n'));
    for (const round of rounds) {
      // What the audit saw and what the ledger saw agree: a fresh-id rerun is exactly a key executed, then lost.
      expect(round.rerunFreshId).toBe(round.executedThenLost);
      // With one replica, the one WAIT reached is the one promoted: nothing acknowledged is lost.
      if (round.mode === 'WAIT 1')
        expect([round.claimsLost, round.completionsLost, round.rerunFreshId]).toEqual([0, 0, 0]);
    }
  }

  it(`kill -9 of the scope’s primary under load, ${ROUNDS} rounds each way: acknowledged writes lost, work run twice`, async () => {
    const rounds: Round[] = [];
    for (let i = 0; i < 2 * ROUNDS; i++) rounds.push(await failoverRound(`kill${i}`, i % 2, 0));
    report('kill -9 of the primary (the replica keeps up):', rounds);
  }, 300_000);

  it(`kill -9 of the primary while its replica is ${LAG_MS} ms behind (SIGSTOPped), ${ROUNDS} rounds each way`, async () => {
    const rounds: Round[] = [];
    for (let i = 0; i < 2 * ROUNDS; i++) rounds.push(await failoverRound(`lag${i}`, i % 2, LAG_MS));
    report(`kill -9 of the primary, its replica stalled for the last ${LAG_MS} ms:`, rounds);
    // Asynchronous replication loses what the replica had not received: the window exists, and WAIT closes it.
    const lost = (mode: Round['mode']) =>
      rounds.filter((r) => r.mode === mode).reduce((n, r) => n + r.claimsLost + r.completionsLost, 0);
    expect(lost('async')).toBeGreaterThan(0);
    expect(lost('WAIT 1')).toBe(0);
  }, 300_000);

  /**
   * One round on a fresh scope (so a fresh slot's primary), with `replicas` 0 or 1. With `lagMs`, the replica is
   * stopped (SIGSTOP) that long before the primary is killed, and let go right after: a replica that had fallen
   * behind (a slow link, a loaded host) when its primary crashed.
   */
  async function failoverRound(name: string, replicas: number, lagMs: number): Promise<Round> {
    // Every node agrees on three primaries with a synced replica each (the last round's restarted node included).
    await cluster.waitForHealthy();
    // The previous rounds' records go: the restarted node's full sync then copies this round's only.
    for (const { port } of (await cluster.topology()).filter(
      (node) => node.role === 'master' && node.slots.length > 0,
    )) {
      await cluster.withNode(port, (node) => node.flushall());
    }
    const stores = await storesFor(replicas);
    const scope = `acct_failover_${name}`;
    const primary = await cluster.primaryFor(`${stores[0]?.prefix}{IDEMPOTENCY#${scope}}:claims`);
    const replica = await cluster.replicaOf(primary.port);

    const claimed = new Map<string, IdempotencyRecord>();
    const completed = new Map<string, string>();
    const ledger = new Map<string, string[]>();
    let storeErrors = 0;
    let waitRefusals = 0;
    const errorKinds = { WAIT: 0, timeout: 0, redirections: 0, other: 0 };
    const noted = (store: RedisStore): IdempotencyStore => ({
      name: store.name,
      get roundTrips() {
        return store.roundTrips;
      },
      claim: async (request) => {
        const result = await store.claim(request);
        if (result.kind === 'claimed') claimed.set(request.pk, result.record);
        return result;
      },
      complete: async (request) => {
        const result = await store.complete(request);
        if (result.ok) completed.set(request.pk, request.token);
        return result;
      },
      renew: (request) => store.renew(request),
      release: (request) => store.release(request),
      get: (pk) => store.get(pk),
      sweep: (request) => store.sweep(request),
      list: (request) => store.list(request),
      close: () => store.close(),
    });
    const work = async ({ key, id }: { key: string; id: string }) => {
      const ids = ledger.get(key) ?? [];
      ids.push(id);
      ledger.set(key, ids);
      const body = new Uint8Array(BODY_BYTES);
      body.set(new TextEncoder().encode(id));
      return { response: { status: 201, headers: [] as Array<[string, string]>, body } };
    };
    const fingerprint = 'e'.repeat(64);
    const engines = stores.map((store) => createEngine({ store: noted(store), leaseMs: LEASE_MS, ttlMs: 86_400_000 }));

    let stop = false;
    const keys: string[] = [];
    const workers = Array.from({ length: WORKERS }, async (_, w) => {
      const engine = engines[w % engines.length] as (typeof engines)[number];
      for (let n = 0; !stop; n++) {
        const key = `w${w}-${n}`;
        keys.push(key);
        try {
          await engine.run({ scope, key, fingerprint }, work);
        } catch (error) {
          storeErrors++;
          const cause = String((error as { cause?: unknown }).cause ?? error);
          if (cause.includes('not acknowledged')) waitRefusals++;
          errorKinds[
            cause.includes('not acknowledged')
              ? 'WAIT'
              : cause.includes('timed out')
                ? 'timeout'
                : cause.includes('Too many Cluster redirections')
                  ? 'redirections'
                  : 'other'
          ]++;
          // Back off a little, as a client would: a dead primary fails fast and would spin the loop.
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      }
    });

    await waitFor(`${KILL_AFTER} acknowledged completions`, () => completed.size >= KILL_AFTER, {
      timeoutMs: 60_000,
      everyMs: 5,
    });
    let lagBytes = 0;
    if (lagMs > 0) {
      cluster.freeze(replica.port);
      await new Promise((resolve) => setTimeout(resolve, lagMs));
      const replication = await cluster.withNode(primary.port, (node) => node.info('replication'));
      const offset = Number(/^master_repl_offset:(\d+)/m.exec(replication)?.[1]);
      const acked = Number(/^slave0:.*offset=(\d+)/m.exec(replication)?.[1]);
      lagBytes = offset - acked;
    }
    const killedAt = performance.now();
    await cluster.kill(primary.port, 'SIGKILL');
    if (lagMs > 0) cluster.thaw(replica.port);
    await cluster.waitForPrimary(replica.port, 30_000);
    const promotedMs = Math.round(performance.now() - killedAt);
    await cluster.restart(primary.port);
    await cluster.waitForSyncedReplica(primary.port, 30_000);
    const recovered = completed.size;
    await waitFor(`${AFTER_RECOVERY} completions after recovery`, () => completed.size >= recovered + AFTER_RECOVERY, {
      timeoutMs: 60_000,
      everyMs: 5,
    });
    stop = true;
    await Promise.all(workers);

    // Audit through the new primary.
    const audit = stores[0] as RedisStore;
    const records = new Map<string, IdempotencyRecord | null>();
    for (let i = 0; i < keys.length; i += 64) {
      await Promise.all(
        keys
          .slice(i, i + 64)
          .map(async (key) => records.set(recordPk(scope, key), await audit.get(recordPk(scope, key)))),
      );
    }
    const claimsLost = [...claimed.keys()].filter((pk) => records.get(pk) === null).length;
    const completionsLost = [...completed].filter(
      ([pk, token]) => records.get(pk)?.status !== 'succeeded' || records.get(pk)?.token !== token,
    ).length;
    const executedThenLost = keys.filter(
      (key) => (ledger.get(key)?.length ?? 0) > 0 && records.get(recordPk(scope, key)) === null,
    ).length;

    // Every key retried once, a minute later by the engine's clock: dead leases have lapsed.
    const later: Clock = { ...systemClock, now: () => Date.now() + 60_000 };
    const retry = createEngine({ store: stores[1] as RedisStore, leaseMs: LEASE_MS, ttlMs: 86_400_000, clock: later });
    for (let i = 0; i < keys.length; i += 64) {
      await Promise.all(keys.slice(i, i + 64).map((key) => retry.run({ scope, key, fingerprint }, work)));
    }
    const settled = new Map<string, number>();
    for (let i = 0; i < keys.length; i += 64) {
      const statuses = await Promise.all(
        keys.slice(i, i + 64).map(async (key) => (await audit.get(recordPk(scope, key)))?.status ?? 'none'),
      );
      for (const status of statuses) settled.set(status, (settled.get(status) ?? 0) + 1);
    }
    expect([...settled]).toEqual([['succeeded', keys.length]]);
    const runs = keys.map((key) => ledger.get(key) ?? []);
    expect(runs.filter((ids) => ids.length === 0).length).toBe(0);
    return {
      mode: replicas === 0 ? 'async' : 'WAIT 1',
      killed: primary.port,
      promoted: replica.port,
      promotedMs,
      lagBytes,
      claimsAcked: claimed.size,
      claimsLost,
      completionsAcked: completed.size,
      completionsLost,
      storeErrors,
      waitRefusals,
      errorKinds,
      rerunSameId: runs.filter((ids) => ids.length > 1 && new Set(ids).size === 1).length,
      rerunFreshId: runs.filter((ids) => new Set(ids).size > 1).length,
      executedThenLost,
      keys: keys.length,
    };
  }
});
