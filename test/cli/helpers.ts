/**
 * Runs the `idem` CLI as a child process, from source through tsx (no build needed) or from the build.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { main } from '../../packages/idem/src/cli/index.js';
import type { ProbeReport } from '../../packages/idem/src/cli/probe.js';
import { listenLocal } from '../fault-proxy.js';
import { spawnServer, type DemoProcess } from '../harness.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const CLI_SOURCE = join(ROOT, 'packages/idem/src/cli/index.ts');
export const CLI_BUILT = join(ROOT, 'packages/idem/dist/cli/index.js');
/** `idem serve` belongs to the demo (apps/demo), not to the library's CLI. */
export const SERVE_SOURCE = join(ROOT, 'apps/demo/src/serve.ts');

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A clean environment: nothing from the caller's IDEM_* or LOG_LEVEL leaks in. */
function environment(env: Record<string, string>): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, NODE_NO_WARNINGS: '1', ...env };
}

function command(built: boolean): string[] {
  return built ? [CLI_BUILT] : ['--import', 'tsx', CLI_SOURCE];
}

/**
 * Runs `idem ...args` to completion. `preload`: a CommonJS file to `--require` first (e.g. one that watches `dns`).
 *
 * @example
 * const { code, stderr } = await idem(['records', 'list'])
 */
export function idem(
  args: readonly string[],
  env: Record<string, string> = {},
  { built = false, preload }: { built?: boolean; preload?: string } = {},
): Promise<CliResult> {
  return run([...(preload ? ['--require', preload] : []), ...command(built), ...args], env);
}

/**
 * Runs the demo's `idem serve ...args` to completion (for settings it refuses; {@link serveIdem} for a server).
 * `preload`: a CommonJS file to `--require` first (e.g. one that hides a package).
 *
 * @example
 * const { code, stderr } = await demoServe(['--ttl-ms', '5'])
 */
export function demoServe(
  args: readonly string[],
  env: Record<string, string> = {},
  { preload }: { preload?: string } = {},
): Promise<CliResult> {
  return run([...(preload ? ['--require', preload] : []), '--import', 'tsx', SERVE_SOURCE, ...args], env);
}

function run(argv: readonly string[], env: Record<string, string>): Promise<CliResult> {
  const child = spawn(process.execPath, argv, { cwd: ROOT, env: environment(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Runs `idem ...args` in this process: the same `main` the bin runs, without a process start per case (each
 * costs a second or two on a loaded machine). `env` replaces the environment the command sees.
 *
 * @example
 * const { code, stdout } = await inProcess(['records', 'list', '--store', url, '--scope', 'acct_alice'])
 */
export async function inProcess(args: readonly string[], env: Record<string, string> = {}): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { stdout: (t) => void (stdout += t), stderr: (t) => void (stderr += t), env });
  return { code, stdout, stderr };
}

export type ServeProcess = DemoProcess;

/**
 * Starts `idem serve` and resolves with its URL once it prints the startup line.
 *
 * @example
 * const server = await serveIdem({ IDEM_STORE: `sqlite:${dir}/idem.db`, PORT: '0', IDEM_LAB: '1' })
 */
export function serveIdem(env: Record<string, string>, args: readonly string[] = []): Promise<ServeProcess> {
  return spawnServer(['--import', 'tsx', SERVE_SOURCE, ...args], env, 'idem serve');
}

/** The 16-hex key hash the demo's logs carry. */
export function keyHash(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16);
}

/** Listens `server` on a free port of 127.0.0.1: its base URL, and a close that cuts open connections first. */
export async function serveLocal(server: Server): Promise<{ url: string; close: () => Promise<void> }> {
  const port = await listenLocal(server);
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Each check of a probe report by id: its result. */
export const results = (report: ProbeReport) => Object.fromEntries(report.checks.map((c) => [c.id, c.result]));

/** The result of every check `idem probe` runs, when each passes: a test states how its server's differ. */
export const ALL_PASS = Object.fromEntries(
  'first replay replay-marker key-order mismatch concurrent conflict missing-key malformed-key'
    .split(' ')
    .map((id) => [id, 'pass']),
);
