/**
 * One PostgreSQL failover round, measured (issue 33, item 3), mirroring the Redis Cluster one
 * (test/stores/redis-cluster-failover.test.ts):
 *
 * 1. A fresh primary and streaming replica ({@link PgLab}); `replication` is `async` (`synchronous_commit = on`,
 *    no synchronous standby) or `remote_apply` (the replica named in `synchronous_standby_names`).
 * 2. `workers` clients on four pools (as four app processes would have), each pool behind a proxy that stands for
 *    the database's address, run the real engine with the postgres store on fresh keys. The work writes each
 *    execution to a ledger in this process (key → the record ids it ran with), outside the failing cluster, and
 *    its charge (a row) in the completion's transaction (`effects`), as the demo does. A claim is acknowledged
 *    when the work starts (the engine runs it only on a claim the store confirmed), a completion when `run()`
 *    returns.
 * 3. After `killAfter` acknowledged completions, optionally the replication link stalls for `stallMs` (the WAL in
 *    flight is held, then dropped: a replica behind when the primary died); then kill -9 of the primary's
 *    process group, `pg_promote()` on the replica, and the proxy is pointed at it. The workers keep going until
 *    `afterPromotion` more completions are acknowledged.
 * 4. Audit through the new primary: each acknowledged claim whose record is gone, each acknowledged completion
 *    whose record is not `succeeded`, each record `succeeded` without its charge (or a charge without it).
 * 5. Every key is retried once, by an engine whose clock is a minute ahead (dead leases have lapsed): a replay runs
 *    nothing; a record left `in_progress` is taken over with the same id; a record that is gone runs the work
 *    with a fresh id, which nothing keyed on the id can catch.
 */
import pg from 'pg';
import { systemClock, type Clock } from '../../packages/idem/src/core/clock.js';
import { createEngine } from '../../packages/idem/src/core/engine.js';
import { recordPk } from '../../packages/idem/src/core/key.js';
import type { WorkResult } from '../../packages/idem/src/core/lease.js';
import type { IdempotencyRecord } from '../../packages/idem/src/core/record.js';
import {
  postgresStore,
  type PostgresQueryable,
  type PostgresStore,
} from '../../packages/idem/src/stores/postgres/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startSwitchProxy, type PgLab, type Replication } from './pg-pair.js';

export interface RoundOptions {
  readonly lab: PgLab;
  readonly name: string;
  readonly primaryPort: number;
  readonly replicaPort: number;
  readonly replication: Replication;
  /** How long the replication link is stalled before the kill; 0: the replica keeps up. */
  readonly stallMs: number;
  /**
   * During the stall, cancel (`pg_cancel_backend`) every backend whose statement has waited this long for the
   * synchronous standby, as a pooler's `query_timeout` or a driver's cancel request would; 0: never. PostgreSQL
   * then answers the commit as done, with a WARNING: it is committed locally and may not be on the standby.
   */
  readonly cancelSyncWaitsAfterMs: number;
  readonly workers: number;
  readonly killAfter: number;
  readonly afterPromotion: number;
}

export interface Round {
  readonly replication: Replication;
  readonly stallMs: number;
  readonly cancelSyncWaitsAfterMs: number;
  readonly keys: number;
  /** The WAL the replica had not replayed, as the primary last heard just before the kill, in bytes. */
  readonly lagBytes: number;
  /** From the kill until the promoted replica accepted writes. */
  readonly promotedMs: number;
  readonly claimsAcked: number;
  readonly claimsLost: number;
  readonly completionsAcked: number;
  readonly completionsLost: number;
  /** Keys whose completion was acknowledged and whose work then ran again. */
  readonly ackedRerun: number;
  /** Keys whose work ran twice or more with one id (a takeover: a downstream keyed on the id dedupes it). */
  readonly rerunSameId: number;
  /** Keys whose work ran under two ids (the record was lost: nothing downstream can tell). */
  readonly rerunFreshId: number;
  /** Keys whose record was `succeeded` at the audit without its charge, or the other way round. */
  readonly chargesMismatched: number;
  /** Store calls that failed during the load (each one a 503; the work did not run for a failed claim). */
  readonly storeErrors: number;
  /** Statements answered with PostgreSQL's "canceling wait for synchronous replication" warning. */
  readonly syncWaitsCancelled: number;
}

const CLIENTS = 4;
const LEASE_MS = 2_000;
const BODY_BYTES = 2_048;
const SCOPE = 'acct_failover';
const FINGERPRINT = 'f'.repeat(64);

export async function failoverRound(options: RoundOptions): Promise<Round> {
  const { lab, replication, stallMs, cancelSyncWaitsAfterMs, workers: workerCount } = options;
  const pair = await lab.pair({
    primaryPort: options.primaryPort,
    replicaPort: options.replicaPort,
    replication,
    name: options.name,
  });
  const proxy = await startSwitchProxy(pair.primaryPort);
  let syncWaitsCancelled = 0;
  const pools = Array.from({ length: CLIENTS }, () => {
    // As STORES.md configures a pool. statement_timeout does not end a commit's wait for the standby: PostgreSQL
    // disarms it before the commit.
    const pool = new pg.Pool({
      host: '127.0.0.1',
      port: proxy.port,
      user: 'postgres',
      database: 'postgres',
      max: Math.ceil(workerCount / CLIENTS) + 1,
      connectionTimeoutMillis: 2_000,
      statement_timeout: 2_000,
      query_timeout: 2_500,
    });
    pool.on('error', () => {});
    pool.on('connect', (client) => {
      client.on('error', () => {});
      client.on('notice', (notice) => {
        if (/canceling wait for synchronous replication/.test(notice.message ?? '')) syncWaitsCancelled++;
      });
    });
    return pool;
  });
  try {
    const stores = pools.map((pool) => postgresStore({ pool }));
    await (stores[0] as PostgresStore).migrate();

    const ledger = new Map<string, string[]>();
    const claimed = new Set<string>();
    const completed = new Set<string>();
    let auditing = false;
    // The work's own write (the demo's charge) commits in the completion's transaction.
    await (pools[0] as pg.Pool).query('CREATE TABLE charges (record_id text PRIMARY KEY, key text NOT NULL)');
    const work = async ({ key, id }: { key: string; id: string }): Promise<WorkResult<PostgresQueryable>> => {
      ledger.set(key, [...(ledger.get(key) ?? []), id]);
      if (!auditing) claimed.add(key);
      const body = new Uint8Array(BODY_BYTES);
      body.set(new TextEncoder().encode(id));
      return {
        response: { status: 201, headers: [], body },
        effects: (tx) => tx.query('INSERT INTO charges (record_id, key) VALUES ($1, $2)', [id, key]),
      };
    };
    const engines = stores.map((store) => createEngine({ store, leaseMs: LEASE_MS, ttlMs: 86_400_000 }));

    let stop = false;
    let storeErrors = 0;
    const keys: string[] = [];
    const workers = Array.from({ length: workerCount }, async (_, w) => {
      const engine = engines[w % engines.length] as (typeof engines)[number];
      for (let n = 0; !stop; n++) {
        const key = `w${w}-${n}`;
        keys.push(key);
        try {
          const result = await engine.run({ scope: SCOPE, key, fingerprint: FINGERPRINT }, work);
          if (!result.replayed) completed.add(key);
        } catch {
          storeErrors++;
          // Back off a little, as a client would: a dead primary fails fast and would spin the loop.
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      }
    });

    await waitFor(`${options.killAfter} acknowledged completions`, () => completed.size >= options.killAfter, {
      timeoutMs: 60_000,
      everyMs: 5,
    });
    let lagBytes = 0;
    if (stallMs > 0) {
      pair.link.stall();
      const stalledUntil = Date.now() + stallMs;
      while (cancelSyncWaitsAfterMs > 0 && Date.now() < stalledUntil - 100) {
        await pair.query(
          pair.primaryPort,
          `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
           WHERE wait_event = 'SyncRep' AND query_start < now() - interval '${cancelSyncWaitsAfterMs} milliseconds'`,
        );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, stalledUntil - Date.now())));
      lagBytes = await pair.replicaLagBytes();
    }
    const killedAt = performance.now();
    await pair.killPrimary();
    // The WAL the link held is dropped, as a partition's would be; the walreceiver's reconnects are refused.
    if (stallMs > 0) pair.link.cut();
    proxy.point(null);
    await pair.promote();
    proxy.point(pair.replicaPort);
    const promotedMs = Math.round(performance.now() - killedAt);
    const recovered = completed.size;
    await waitFor(
      `${options.afterPromotion} completions after promotion`,
      () => completed.size >= recovered + options.afterPromotion,
      { timeoutMs: 60_000, everyMs: 5 },
    );
    stop = true;
    await Promise.all(workers);
    auditing = true;

    // Audit through the new primary.
    const audit = stores[0] as PostgresStore;
    const records = new Map<string, IdempotencyRecord | null>();
    for (let i = 0; i < keys.length; i += 64) {
      const batch = keys.slice(i, i + 64);
      const found = await Promise.all(batch.map((key) => audit.get(recordPk(SCOPE, key))));
      batch.forEach((key, j) => records.set(key, found[j] ?? null));
    }
    const claimsLost = [...claimed].filter((key) => records.get(key) === null).length;
    const completionsLost = [...completed].filter((key) => records.get(key)?.status !== 'succeeded').length;
    const charges = async () =>
      (
        await (pools[0] as pg.Pool).query<{ key: string; n: number }>(
          'SELECT key, count(*)::int AS n FROM charges GROUP BY key',
        )
      ).rows;
    const charged = new Set((await charges()).map((row) => row.key));
    const chargesMismatched = keys.filter(
      (key) => (records.get(key)?.status === 'succeeded') !== charged.has(key),
    ).length;

    // Every key retried once, a minute later by the engine's clock: dead leases have lapsed.
    const later: Clock = { ...systemClock, now: () => Date.now() + 60_000 };
    const retry = createEngine({ store: audit, leaseMs: LEASE_MS, ttlMs: 86_400_000, clock: later });
    for (let i = 0; i < keys.length; i += 64) {
      await Promise.all(
        keys.slice(i, i + 64).map((key) => retry.run({ scope: SCOPE, key, fingerprint: FINGERPRINT }, work)),
      );
    }
    const settled = new Map<string, number>();
    for (let i = 0; i < keys.length; i += 64) {
      const found = await Promise.all(keys.slice(i, i + 64).map((key) => audit.get(recordPk(SCOPE, key))));
      for (const record of found)
        settled.set(record?.status ?? 'none', (settled.get(record?.status ?? 'none') ?? 0) + 1);
    }
    if (settled.get('succeeded') !== keys.length) {
      throw new Error(`after the retries, records by status: ${JSON.stringify([...settled])} of ${keys.length} keys`);
    }
    const once = (await charges()).filter((row) => row.n === 1).length;
    if (once !== keys.length) throw new Error(`${once} of ${keys.length} keys have exactly one charge`);
    const runs = keys.map((key) => ledger.get(key) ?? []);
    if (runs.some((ids) => ids.length === 0)) throw new Error('a key settled succeeded without its work running');
    return {
      replication,
      stallMs,
      cancelSyncWaitsAfterMs,
      keys: keys.length,
      lagBytes,
      promotedMs,
      claimsAcked: claimed.size,
      claimsLost,
      completionsAcked: completed.size,
      completionsLost,
      // During the load each key is tried once: a second run of a key whose completion was acknowledged is a rerun.
      ackedRerun: [...completed].filter((key) => (ledger.get(key)?.length ?? 0) > 1).length,
      rerunSameId: runs.filter((ids) => ids.length > 1 && new Set(ids).size === 1).length,
      rerunFreshId: runs.filter((ids) => new Set(ids).size > 1).length,
      chargesMismatched,
      storeErrors,
      syncWaitsCancelled,
    };
  } finally {
    await Promise.all(pools.map((pool) => pool.end().catch(() => {})));
    await proxy.close();
    await pair.stop();
  }
}

export const modeName = (round: Pick<Round, 'replication' | 'cancelSyncWaitsAfterMs'>): string =>
  `${round.replication}${round.cancelSyncWaitsAfterMs > 0 ? `, waits cancelled after ${round.cancelSyncWaitsAfterMs} ms` : ''}`;

/** The rounds as a table, one line each and a total per mode. */
export function formatRounds(title: string, rounds: readonly Round[]): string {
  const lines = [
    title,
    'round  mode                                          stall  promoted  WAL behind  keys  claims acked/lost  completions acked/lost  acked rerun  rerun same id / fresh id  503s  sync waits cancelled',
    ...rounds.map(
      (r, i) =>
        `${String(i + 1).padStart(5)}  ${modeName(r).padEnd(44)}  ${`${r.stallMs}`.padStart(5)}  ${`${r.promotedMs} ms`.padStart(8)}  ${`${(r.lagBytes / 1024).toFixed(0)} KiB`.padStart(10)}  ${String(r.keys).padStart(4)}  ${`${r.claimsAcked}/${r.claimsLost}`.padStart(17)}  ${`${r.completionsAcked}/${r.completionsLost}`.padStart(22)}  ${String(r.ackedRerun).padStart(11)}  ${`${r.rerunSameId} / ${r.rerunFreshId}`.padStart(24)}  ${String(r.storeErrors).padStart(4)}  ${String(r.syncWaitsCancelled).padStart(20)}`,
    ),
  ];
  for (const mode of [...new Set(rounds.map(modeName))]) {
    const of = rounds.filter((r) => modeName(r) === mode);
    const sum = (field: keyof Round) => of.reduce((total, r) => total + (r[field] as number), 0);
    lines.push(
      `total  ${mode}: ${of.length} rounds, ${sum('keys')} keys; claims acked ${sum('claimsAcked')}, lost ${sum('claimsLost')}; completions acked ${sum('completionsAcked')}, lost ${sum('completionsLost')}; acknowledged work rerun ${sum('ackedRerun')}; reruns same id ${sum('rerunSameId')}, fresh id ${sum('rerunFreshId')}; records and charges disagreeing ${sum('chargesMismatched')}; 503s ${sum('storeErrors')}; sync waits cancelled ${sum('syncWaitsCancelled')}; promoted after ${of.map((r) => r.promotedMs).join('/')} ms`,
    );
  }
  return lines.join('\n');
}
