/**
 * A real Redis Cluster for tests: six `redis-server` processes on 127.0.0.1 (three primaries, three replicas),
 * each with its own directory for `nodes.conf`, no persistence, joined by `redis-cli --cluster create`. Every wait
 * is a poll of the servers' own state (`CLUSTER INFO`, `CLUSTER NODES`, `INFO replication`), never a fixed sleep.
 * `stop()` kills what it started (by pid) and removes the directory; an exiting test process does the same.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { waitFor } from '../packages/idem/src/testing/fixtures.js';
import { portFree } from './fault-proxy.js';

export interface ClusterNodeInfo {
  readonly id: string;
  readonly port: number;
  readonly role: 'master' | 'slave';
  /** The primary's id, for a replica. */
  readonly primaryId: string | null;
  /** `fail`, `fail?` (PFAIL), `handshake`, `noaddr`, … as CLUSTER NODES shows them. */
  readonly flags: readonly string[];
  readonly connected: boolean;
  /** Slot ranges as `[first, last]`. */
  readonly slots: ReadonlyArray<readonly [number, number]>;
}

export interface LocalRedisCluster {
  readonly ports: readonly number[];
  /** `redis-cluster://127.0.0.1:p1,127.0.0.1:p2,…`, the form `IDEM_STORE` takes. */
  readonly url: string;
  readonly startupNodes: ReadonlyArray<{ readonly host: string; readonly port: number }>;
  /** The temporary directory holding each node's `nodes.conf` and log. */
  readonly dir: string;
  /** A direct (non-cluster) connection to one node, opened and closed around `fn`. */
  withNode<T>(port: number, fn: (node: Redis) => Promise<T>): Promise<T>;
  /** CLUSTER NODES as one live node sees it. */
  topology(fromPort?: number): Promise<ClusterNodeInfo[]>;
  /** The primary serving `key`'s slot, as the cluster sees it now. */
  primaryFor(key: string): Promise<ClusterNodeInfo>;
  /** The replica of the primary on `port`. */
  replicaOf(port: number): Promise<ClusterNodeInfo>;
  /** Sends `signal` to the node's process (one this helper started) and resolves once it has exited. */
  kill(port: number, signal?: NodeJS.Signals): Promise<void>;
  /** SIGSTOP: the node stops reading, writing and answering (a stalled host), until {@link LocalRedisCluster.thaw}. */
  freeze(port: number): void;
  /** SIGCONT after {@link LocalRedisCluster.freeze}. */
  thaw(port: number): void;
  /** Starts a killed node again from its `nodes.conf`; resolves once it answers PING. */
  restart(port: number): Promise<void>;
  /** Polls until every live node reports `cluster_state:ok` and sees `port` as a primary owning slots. */
  waitForPrimary(port: number, timeoutMs?: number): Promise<void>;
  /** Polls until the node on `port` is a replica whose link to its primary is up and in sync. */
  waitForSyncedReplica(port: number, timeoutMs?: number): Promise<void>;
  /** Polls until every live node reports `cluster_state:ok`, and every primary has one synced replica. */
  waitForHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** First of six consecutive ports; the bus uses port + 10000. Each test file takes its own range. */
  readonly basePort: number;
  /** `cluster-node-timeout`: how long a silent primary goes before it is failed over. Default 1000. */
  readonly nodeTimeoutMs?: number;
}

/** True when `redis-server` and `redis-cli` are on the PATH. With `CI=true`, their absence throws. */
/** How the cluster's waits poll: every 50 ms, a node that refuses or errs meanwhile counting as "not yet". */
const SERVER_WAIT = { everyMs: 50, retryOnError: true } as const;

export function redisClusterAvailable(): boolean {
  const found = ['redis-server', 'redis-cli'].every(
    (bin) => spawnSync(bin, ['--version'], { stdio: 'ignore' }).status === 0,
  );
  if (found) return true;
  const message = 'redis-server or redis-cli is not installed';
  if (process.env.CI === 'true') throw new Error(`${message}; CI requires them for the Redis Cluster tests.`);
  console.warn(`\n*** SKIPPING Redis Cluster tests: ${message}. ***\n`);
  return false;
}

function parseNodes(text: string): ClusterNodeInfo[] {
  return text
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [id = '', address = '', flagText = '', primary = '-', , , , link = '', ...slotFields] = line.split(' ');
      const flags = flagText.split(',');
      const port = Number(address.split('@')[0]?.split(':').pop());
      const slots = slotFields
        .filter((field) => !field.startsWith('['))
        .map((field) => {
          const [first, last = first] = field.split('-');
          return [Number(first), Number(last)] as const;
        });
      return {
        id,
        port,
        role: flags.includes('master') ? 'master' : 'slave',
        primaryId: primary === '-' ? null : primary,
        flags,
        connected: link === 'connected',
        slots,
      };
    });
}

/**
 * Starts six nodes on `basePort`…`basePort + 5` and joins them into a cluster of three primaries with one replica
 * each; resolves once every node reports `cluster_state:ok` and every replica is in sync.
 *
 * @example
 * const cluster = await startRedisCluster({ basePort: 7101 })
 * const client = new Cluster(cluster.startupNodes)
 * await cluster.stop()
 */
export async function startRedisCluster({
  basePort,
  nodeTimeoutMs = 1_000,
}: ClusterOptions): Promise<LocalRedisCluster> {
  const ports = Array.from({ length: 6 }, (_, i) => basePort + i);
  for (const port of ports) {
    if (!(await portFree(port)) || !(await portFree(port + 10_000))) {
      throw new Error(
        `port ${port} or ${port + 10_000} is taken: the Redis Cluster tests need ${basePort}–${basePort + 5} and their bus ports`,
      );
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'idem-redis-cluster-'));
  const processes = new Map<number, ChildProcess>();
  const exited = new Map<number, Promise<void>>();

  const start = (port: number): void => {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--logfile',
        join(dir, `${port}.log`),
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--cluster-node-timeout',
        String(nodeTimeoutMs),
        '--appendonly',
        'no',
        '--save',
        '',
        '--enable-debug-command',
        'local',
        '--repl-diskless-sync-delay',
        '0',
      ],
      { stdio: 'ignore' },
    );
    processes.set(port, child);
    exited.set(port, new Promise((resolve) => child.once('exit', () => resolve())));
  };
  const killAll = (): void => {
    // SIGKILL ends a stopped (SIGSTOP) process too.
    for (const child of processes.values())
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', killAll);

  const withNode = async <T>(port: number, fn: (node: Redis) => Promise<T>): Promise<T> => {
    const node = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 1_000,
    });
    node.on('error', () => {});
    try {
      await node.connect();
      return await fn(node);
    } finally {
      node.disconnect();
    }
  };
  const live = () =>
    ports.filter((port) => processes.get(port)?.exitCode === null && processes.get(port)?.signalCode === null);
  const info = (port: number, section: string) => withNode(port, (node) => node.info(section));
  const field = (text: string, name: string) => new RegExp(`^${name}:(.*)\\r?$`, 'm').exec(text)?.[1]?.trim();

  const topology = async (fromPort?: number): Promise<ClusterNodeInfo[]> => {
    const from = fromPort ?? live()[0];
    if (from === undefined) throw new Error('no live node');
    return parseNodes(String(await withNode(from, (node) => node.call('CLUSTER', 'NODES'))));
  };
  const allOk = async (): Promise<boolean> => {
    for (const port of live()) {
      if (field(String(await withNode(port, (node) => node.call('CLUSTER', 'INFO'))), 'cluster_state') !== 'ok')
        return false;
    }
    return true;
  };
  const syncedReplica = async (port: number): Promise<boolean> => {
    const text = await info(port, 'replication');
    return (
      field(text, 'role') === 'slave' &&
      field(text, 'master_link_status') === 'up' &&
      field(text, 'master_sync_in_progress') === '0'
    );
  };

  const cluster: LocalRedisCluster = {
    ports,
    url: `redis-cluster://${ports.map((port) => `127.0.0.1:${port}`).join(',')}`,
    startupNodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    dir,
    withNode,
    topology,
    async primaryFor(key) {
      const slot = Number(await withNode(live()[0] as number, (node) => node.call('CLUSTER', 'KEYSLOT', key)));
      const primary = (await topology()).find(
        (node) =>
          node.role === 'master' && !node.flags.includes('fail') && node.slots.some(([a, b]) => slot >= a && slot <= b),
      );
      if (!primary) throw new Error(`no primary serves slot ${slot}`);
      return primary;
    },
    async replicaOf(port) {
      const nodes = await topology();
      const primary = nodes.find((node) => node.port === port);
      const replica = nodes.find((node) => node.primaryId === primary?.id);
      if (!replica) throw new Error(`the node on ${port} has no replica`);
      return replica;
    },
    async kill(port, signal = 'SIGKILL') {
      const child = processes.get(port);
      if (!child || child.exitCode !== null || child.signalCode !== null) throw new Error(`no running node on ${port}`);
      child.kill(signal);
      await exited.get(port);
    },
    freeze(port) {
      processes.get(port)?.kill('SIGSTOP');
    },
    thaw(port) {
      processes.get(port)?.kill('SIGCONT');
    },
    async restart(port) {
      start(port);
      await waitFor(
        `node ${port} to answer PING`,
        () => withNode(port, async (node) => (await node.ping()) === 'PONG'),
        SERVER_WAIT,
      );
    },
    async waitForPrimary(port, timeoutMs = 20_000) {
      await waitFor(
        `node ${port} to be a primary in a healthy cluster`,
        async () => {
          for (const from of live()) {
            const me = (await topology(from)).find((node) => node.port === port);
            if (me?.role !== 'master' || me.slots.length === 0) return false;
          }
          return allOk();
        },
        { ...SERVER_WAIT, timeoutMs },
      );
    },
    async waitForSyncedReplica(port, timeoutMs = 20_000) {
      await waitFor(`node ${port} to be a synced replica`, () => syncedReplica(port), { ...SERVER_WAIT, timeoutMs });
    },
    async waitForHealthy(timeoutMs = 30_000) {
      await waitFor(
        'every node to report cluster_state:ok with one synced replica per primary',
        async () => {
          if (live().length !== 6 || !(await allOk())) return false;
          const nodes = await topology();
          const primaries = nodes.filter((node) => node.role === 'master' && node.slots.length > 0);
          if (primaries.length !== 3 || nodes.some((node) => node.flags.some((flag) => flag.startsWith('fail'))))
            return false;
          for (const replica of nodes.filter((node) => node.role === 'slave'))
            if (!(await syncedReplica(replica.port))) return false;
          return nodes.filter((node) => node.role === 'slave').length === 3;
        },
        { ...SERVER_WAIT, timeoutMs, everyMs: 100 },
      );
    },
    async stop() {
      process.removeListener('exit', killAll);
      killAll();
      await Promise.all(exited.values());
      rmSync(dir, { recursive: true, force: true });
    },
  };

  try {
    for (const port of ports) start(port);
    for (const port of ports)
      await waitFor(
        `node ${port} to answer PING`,
        () => withNode(port, async (node) => (await node.ping()) === 'PONG'),
        SERVER_WAIT,
      );
    await new Promise<void>((resolve, reject) =>
      execFile(
        'redis-cli',
        [
          '--cluster',
          'create',
          ...ports.map((port) => `127.0.0.1:${port}`),
          '--cluster-replicas',
          '1',
          '--cluster-yes',
        ],
        { timeout: 60_000 },
        (error, stdout, stderr) =>
          error ? reject(new Error(`redis-cli --cluster create failed: ${stderr || stdout}`)) : resolve(),
      ),
    );
    await cluster.waitForHealthy(60_000);
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}
