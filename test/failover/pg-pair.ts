/**
 * A PostgreSQL primary and its streaming replica for failover measurements, started from the machine's own
 * binaries (`initdb`, `pg_basebackup`, `postgres`) on ports the caller names, in one temporary directory.
 *
 * - The replica streams through a {@link FaultProxy} (`link`): `link.stall()` holds the WAL in flight, as a slow
 *   or partitioned link would, and `link.cut()` drops what it held.
 * - Each server is its own process group: `killPrimary()` is a kill -9 of the postmaster and every backend at
 *   once (the host died); nothing is shut down cleanly.
 * - Clients reach the primary through a {@link SwitchProxy}: `point(port)` moves new connections to the promoted
 *   replica, as a virtual IP, a DNS name or a pooler would.
 *
 * Run as root, the servers run as the `postgres` user (initdb refuses root). `lab.close()` kills what the lab
 * started (by process group) and removes the directory; an exiting process does the same.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdtempSync, openSync, readdirSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { listenLocal, portFree, startFaultProxy, type FaultProxy } from '../fault-proxy.js';

const run = promisify(execFile);
/** How the lab's waits poll: a server still starting refuses connections, which counts as "not yet". */
const SERVER_WAIT = { everyMs: 50, retryOnError: true, timeoutMs: 30_000 } as const;
const STANDBY = 'idem_replica';

/** `synchronous_commit` on the primary, and whether the replica is named in `synchronous_standby_names`. */
export type Replication = 'async' | 'remote_apply';

export interface PairOptions {
  readonly primaryPort: number;
  readonly replicaPort: number;
  readonly replication: Replication;
  /** A name for the pair's directories and log files. */
  readonly name: string;
}

/** A TCP proxy whose target can be changed (or removed) while clients are connected. */
export interface SwitchProxy {
  readonly port: number;
  /** New connections go to `port`; with `null`, every open connection is destroyed and new ones are refused. */
  point(port: number | null): void;
  close(): Promise<void>;
}

export interface PgPair {
  readonly primaryPort: number;
  readonly replicaPort: number;
  /** The replication link, between the replica's walreceiver and the primary. */
  readonly link: FaultProxy;
  /** One statement on a connection of its own to the server on `port`. */
  query<R>(port: number, text: string): Promise<R[]>;
  /** How far the replica's replay is behind the primary's WAL, in bytes, as the primary last heard. */
  replicaLagBytes(): Promise<number>;
  /** kill -9 of the primary's whole process group; resolves once the postmaster has exited. */
  killPrimary(): Promise<void>;
  /** `pg_promote()` on the replica; resolves once it accepts writes. */
  promote(): Promise<void>;
  stop(): Promise<void>;
}

export interface PgLab {
  readonly dir: string;
  /** Starts a primary from the lab's template, a replica from `pg_basebackup`, and waits for it to stream. */
  pair(options: PairOptions): Promise<PgPair>;
  close(): Promise<void>;
}

/** The newest `/usr/lib/postgresql/<version>/bin` holding the server binaries, or `IDEM_PG_BIN`. */
export function pgBinDir(): string | undefined {
  if (process.env.IDEM_PG_BIN) return process.env.IDEM_PG_BIN;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const [newest] = readdirSync(root)
    .filter((version) => existsSync(join(root, version, 'bin', 'pg_basebackup')))
    .sort((a, b) => Number(b) - Number(a));
  return newest === undefined ? undefined : join(root, newest, 'bin');
}

/** Who the servers run as: the current user, or `postgres` when that is root. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const [uid, gid] = [id('-u'), id('-g')];
  if (!Number.isInteger(uid) || uid <= 0) throw new Error('running as root needs a `postgres` user for initdb');
  return { uid, gid };
}

/** True when the PostgreSQL server binaries are here. With `CI=true`, their absence throws. */
export function pgFailoverAvailable(): boolean {
  if (pgBinDir() !== undefined) return true;
  const message = 'initdb and pg_basebackup were not found under /usr/lib/postgresql/*/bin (set IDEM_PG_BIN)';
  if (process.env.CI === 'true') throw new Error(`${message}; CI requires them for the failover tests.`);
  console.warn(`\n*** SKIPPING PostgreSQL failover tests: ${message}. ***\n`);
  return false;
}

/**
 * Starts a {@link SwitchProxy} on a free port of 127.0.0.1, pointing at `port`.
 *
 * @example
 * const proxy = await startSwitchProxy(55432)
 * proxy.point(55433)
 */
export async function startSwitchProxy(port: number): Promise<SwitchProxy> {
  let target: number | null = port;
  const open = new Set<Socket>();
  const server = createServer((client) => {
    if (target === null) return void client.destroy();
    const upstream = connect({ host: '127.0.0.1', port: target });
    const pair = [client, upstream];
    for (const socket of pair) {
      open.add(socket);
      socket.on('error', () => pair.forEach((s) => s.destroy()));
      socket.on('close', () => {
        open.delete(socket);
        pair.forEach((s) => s.destroy());
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const listening = await listenLocal(server);
  return {
    port: listening,
    point(next) {
      target = next;
      if (next === null) for (const socket of open) socket.destroy();
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of open) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Makes the lab's directory and its template cluster (one `initdb`, copied for every pair).
 *
 * @example
 * const lab = await startPgLab()
 * const pair = await lab.pair({ primaryPort: 55432, replicaPort: 55433, replication: 'remote_apply', name: 'r1' })
 * await pair.killPrimary()
 * await pair.promote()
 * await lab.close()
 */
export async function startPgLab(): Promise<PgLab> {
  const bin = pgBinDir();
  if (bin === undefined) throw new Error('PostgreSQL server binaries not found');
  const user = serverUser();
  const dir = mkdtempSync(join(tmpdir(), 'idem-pg-failover-'));
  if (user) chownSync(dir, user.uid, user.gid);
  const groups = new Set<ChildProcess>();
  const killAll = (): void => {
    for (const child of groups) if (child.exitCode === null && child.signalCode === null) killGroup(child);
  };
  process.once('exit', killAll);

  const tool = (name: string, args: string[]) =>
    run(join(bin, name), args, { ...user, env: { ...process.env, LC_ALL: 'C' } });
  const template = join(dir, 'template');
  await tool('initdb', ['-D', template, '-A', 'trust', '-U', 'postgres', '--no-sync', '--locale=C', '-E', 'UTF8']);

  /** The postmaster in a process group of its own (`detached`), its output in `<data>.log`. */
  const start = (data: string, port: number, settings: Record<string, string>): ChildProcess => {
    const log = openSync(`${data}.log`, 'a');
    const args = ['-D', data, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'];
    const all = { unix_socket_directories: '', shared_buffers: '32MB', max_connections: '100', ...settings };
    for (const [name, value] of Object.entries(all)) args.push('-c', `${name}=${value}`);
    const child = spawn(join(bin, 'postgres'), args, { ...user, detached: true, stdio: ['ignore', log, log] });
    closeSync(log);
    groups.add(child);
    return child;
  };

  const query = async <R>(port: number, text: string): Promise<R[]> => {
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres' });
    client.on('error', () => {});
    try {
      await client.connect();
      return (await client.query(text)).rows as R[];
    } finally {
      await client.end().catch(() => {});
    }
  };

  const pair = async ({ primaryPort, replicaPort, replication, name }: PairOptions): Promise<PgPair> => {
    for (const port of [primaryPort, replicaPort]) {
      if (!(await portFree(port))) throw new Error(`port ${port} is taken: the failover lab needs it`);
    }
    const primaryData = join(dir, `${name}-primary`);
    const replicaData = join(dir, `${name}-replica`);
    await run('cp', ['-a', template, primaryData]);
    const synchronous = replication === 'remote_apply';
    const primary = start(primaryData, primaryPort, {
      wal_level: 'replica',
      max_wal_senders: '4',
      wal_keep_size: '512MB',
      synchronous_standby_names: synchronous ? STANDBY : '',
      synchronous_commit: synchronous ? 'remote_apply' : 'on',
    });
    const exited = new Promise<void>((resolve) => primary.once('exit', () => resolve()));
    let replica: ChildProcess | undefined;
    const link = await startFaultProxy('127.0.0.1', primaryPort);
    const stop = async (): Promise<void> => {
      for (const child of [primary, replica]) {
        if (child && child.exitCode === null && child.signalCode === null) {
          const gone = new Promise((resolve) => child.once('exit', resolve));
          killGroup(child);
          await gone;
        }
      }
      await link.close();
      rmSync(primaryData, { recursive: true, force: true });
      rmSync(replicaData, { recursive: true, force: true });
    };
    try {
      await waitFor(`the primary on ${primaryPort}`, () => query(primaryPort, 'SELECT 1'), SERVER_WAIT);
      await tool(
        'pg_basebackup',
        ['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres'].concat([
          '-D',
          replicaData,
          '-X',
          'stream',
          '-R',
          '-c',
          'fast',
          '--no-sync',
        ]),
      );
      replica = start(replicaData, replicaPort, {
        primary_conninfo: `host=127.0.0.1 port=${link.port} user=postgres application_name=${STANDBY}`,
        hot_standby: 'on',
      });
      const state = synchronous ? 'sync' : 'async';
      await waitFor(
        `the replica streaming (${state})`,
        async () =>
          (
            await query<{ sync_state: string }>(
              primaryPort,
              `SELECT sync_state FROM pg_stat_replication WHERE application_name = '${STANDBY}' AND state = 'streaming'`,
            )
          )[0]?.sync_state === state,
        SERVER_WAIT,
      );
    } catch (error) {
      await stop();
      throw error;
    }
    return {
      primaryPort,
      replicaPort,
      link,
      query,
      async replicaLagBytes() {
        const [row] = await query<{ lag: string | null }>(
          primaryPort,
          `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS lag FROM pg_stat_replication
           WHERE application_name = '${STANDBY}'`,
        );
        return Number(row?.lag ?? 0);
      },
      async killPrimary() {
        killGroup(primary);
        await exited;
      },
      async promote() {
        await query(replicaPort, 'SELECT pg_promote(true, 60)');
        await waitFor(
          'the replica promoted',
          async () =>
            (await query<{ recovery: boolean }>(replicaPort, 'SELECT pg_is_in_recovery() AS recovery'))[0]?.recovery ===
            false,
          SERVER_WAIT,
        );
      },
      stop,
    };
  };

  return {
    dir,
    pair,
    async close() {
      const alive = [...groups].filter((child) => child.exitCode === null && child.signalCode === null);
      await Promise.all(
        alive.map((child) => {
          const gone = new Promise((resolve) => child.once('exit', resolve));
          killGroup(child);
          return gone;
        }),
      );
      process.removeListener('exit', killAll);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** SIGKILL to the child's process group: the postmaster and every backend, walsender and worker it forked. */
function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}
