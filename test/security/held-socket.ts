/**
 * Raw sockets for the demo's hardening tests: a connection that has sent some bytes and waits, its status line,
 * and the server process's resident memory.
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';

/** A connection that has sent `bytes` and waits: what it received, and a promise settled when it closes. */
export interface Held {
  readonly socket: Socket;
  received(): string;
  readonly closed: Promise<void>;
}

export function hold(url: string, bytes: string | Buffer): Promise<Held> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => undefined); // a reset is a close here
    const closed = new Promise<void>((done) => socket.once('close', () => done()));
    socket.once('connect', () => {
      socket.write(bytes);
      resolve({ socket, received: () => received, closed });
    });
    socket.once('error', reject);
  });
}

/** Resolves once `held` has received a complete response head (or closed, or `ms` passed): the status line, or why not. */
export function statusLine(held: Held, ms = 5_000): Promise<string> {
  return new Promise((resolve) => {
    const check = () => {
      const text = held.received();
      const end = text.indexOf('\r\n\r\n');
      if (end >= 0) finish(text.slice(0, text.indexOf('\r\n')));
    };
    const finish = (line: string) => {
      clearTimeout(timer);
      held.socket.off('data', check);
      resolve(line);
    };
    const timer = setTimeout(() => finish('no answer'), ms);
    held.socket.on('data', check);
    void held.closed.then(() =>
      finish(held.received().length === 0 ? 'closed' : held.received().slice(0, held.received().indexOf('\r\n'))),
    );
    check();
  });
}

/** The server process's resident set, from /proc (Linux). */
export function rssMiB(pid: number): number {
  const kib = Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return Math.round((kib / 1024) * 10) / 10;
}
