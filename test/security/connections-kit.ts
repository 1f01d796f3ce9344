/**
 * Raw connections to a demo process for the fair-connections suites: dial from a chosen loopback address, wait for
 * the next status or for closes, and read the demo's connection counters from its metrics listener.
 */
import { connect, type Socket } from 'node:net';
import { startDemo, type DemoProcess } from '../harness.js';

export const HEALTHZ = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';

/** A connection: what it received, and a promise settled when it closes. */
export interface Conn {
  readonly socket: Socket;
  received(): string;
  readonly closed: Promise<void>;
}

/** Connects to `url` from `localAddress`, writes `bytes` (if any), and resolves once connected. */
export function dial(url: string, bytes = '', localAddress = '127.0.0.1'): Promise<Conn> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port), localAddress });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    const closed = new Promise<void>((done) => socket.once('close', () => done()));
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.removeListener('error', reject);
      socket.on('error', () => undefined); // a reset is a close here
      if (bytes) socket.write(bytes);
      resolve({ socket, received: () => received, closed });
    });
  });
}

/** The status of the next complete response head `conn` receives after `from` bytes, or why none came within `ms`. */
export function nextStatus(conn: Conn, ms: number, from = 0): Promise<number | 'closed' | 'no answer'> {
  return new Promise((resolve) => {
    const check = (): boolean => {
      const text = conn.received().slice(from);
      if (!text.includes('\r\n\r\n')) return false;
      finish(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0));
      return true;
    };
    const finish = (outcome: number | 'closed' | 'no answer') => {
      clearTimeout(timer);
      conn.socket.off('data', check);
      resolve(outcome);
    };
    const timer = setTimeout(() => finish('no answer'), ms);
    conn.socket.on('data', check);
    void conn.closed.then(() => check() || finish('closed'));
    check();
  });
}

/** Resolves with how many of `conns` have closed, once `n` have or `ms` has passed. */
export function closes(conns: readonly Conn[], n: number, ms: number): Promise<number> {
  return new Promise((resolve) => {
    let count = 0;
    const timer = setTimeout(() => resolve(count), ms);
    for (const conn of conns) {
      void conn.closed.then(() => {
        if (++count === n) {
          clearTimeout(timer);
          resolve(count);
        }
      });
    }
  });
}

/** The demo on the memory store with its metrics listener, and `env` on top. */
export const demo = (env: Record<string, string>) =>
  startDemo({ IDEM_STORE: 'memory:', IDEM_LEDGER: ':memory:', IDEM_METRICS_PORT: '0', ...env });

/** The demo's metrics, as text, from its metrics listener. */
export async function metrics(server: DemoProcess): Promise<string> {
  const url = /metrics: (http:\/\/\S+\/metrics)/.exec(server.output())?.[1] ?? 'metrics URL not printed';
  return (await fetch(url)).text();
}

/** The demo's connection counters from its metrics listener. */
export async function counters(
  server: DemoProcess,
): Promise<Record<'dropped' | 'overShare' | 'silent' | 'stalled' | 'evicted', number>> {
  const text = await metrics(server);
  const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
  return {
    dropped: value('idem_http_connections_dropped_total'),
    overShare: value('idem_http_connections_over_share_total'),
    silent: value('idem_http_connections_silent_total'),
    stalled: value('idem_http_connections_stalled_total'),
    evicted: value('idem_http_connections_evicted_total'),
  };
}

/** Runs `run` on a demo started with `env` and a set of connections, destroyed (and the demo stopped) afterwards. */
export async function withDemo(
  env: Record<string, string>,
  run: (server: DemoProcess, conns: Set<Conn>) => Promise<void>,
): Promise<void> {
  const server = await demo(env);
  const conns = new Set<Conn>();
  try {
    await run(server, conns);
  } finally {
    for (const conn of conns) conn.socket.destroy();
    await server.stop();
  }
}

/** The status a fresh `Connection: close` `GET /healthz` from `from` gets within `ms`. */
export async function askHealthz(server: DemoProcess, from: string, ms = 1_000): ReturnType<typeof nextStatus> {
  return nextStatus(await dial(server.url, `${HEALTHZ.slice(0, -2)}Connection: close\r\n\r\n`, from), ms);
}
