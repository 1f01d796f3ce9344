/**
 * Starts the real demo server as a child process on a free port, for tests that talk to it over TCP.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface DemoProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** Everything the process printed so far. */
  output(): string;
  /** Sends a signal and resolves with the exit code (or signal name) once it has exited. */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** A fresh temporary directory, removed by the returned function. */
export function tempDir(prefix = 'idem-test-'): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/**
 * Spawns `demo/server.ts` with `env` on top of a clean test environment (PORT=0, lab on).
 *
 * @example
 * const server = await startDemo({ IDEM_STORE: `sqlite:${dir}/idem.db` })
 */
export function startDemo(env: Record<string, string>, args: string[] = []): Promise<DemoProcess> {
  return spawnServer(['--import', 'tsx', join(ROOT, 'apps/demo/src/server.ts'), ...args], env, 'demo server');
}

/**
 * Runs `node ...argv` (a demo server, however it is started: directly or through `idem serve`) with `env` on top of
 * a clean test environment (PORT=0, lab on), and resolves once it prints its startup line.
 *
 * @example
 * const server = await spawnServer([cli, 'serve'], { IDEM_STORE: 'memory:' }, 'idem serve')
 */
export async function spawnServer(
  argv: readonly string[],
  env: Record<string, string>,
  label: string,
): Promise<DemoProcess> {
  const child = spawn(process.execPath, [...argv], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, NODE_NO_WARNINGS: '1', PORT: '0', IDEM_LAB: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${label} did not start in 20 s:\n${output}`)), 20_000);
    child.stdout.on('data', () => {
      const match = /^idem demo listening on (http:\/\/\S+)/m.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${label} exited (${code}) before listening:\n${output}`));
    });
  });
  return {
    url,
    child,
    output: () => output,
    stop: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** A client for the demo API as one account. */
export function api(url: string, apiKey = 'sk_test_alice') {
  const auth = { authorization: `Bearer ${apiKey}` };
  return {
    charge: (body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${url}/v1/charges`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      }),
    balance: async () =>
      (await (await fetch(`${url}/v1/balance`, { headers: auth })).json()) as { charged: number; count: number },
    charges: async () =>
      (await (await fetch(`${url}/v1/charges?limit=100`, { headers: auth })).json()) as {
        data: Array<{ id: string; amount: number }>;
      },
    get: (path: string) => fetch(`${url}${path}`, { headers: auth }),
  };
}
