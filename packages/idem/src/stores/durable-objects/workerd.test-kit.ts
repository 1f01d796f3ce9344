/**
 * @module workerd for the Durable Objects tests: installed on first use (test/runtimes/install.ts), the Worker
 * (worker.test-kit.ts) bundled with esbuild, and served with two SQLite-backed namespaces on a temporary disk,
 * one object class each: `IDEM` (the store's class as shipped) and `CONFORMANCE` (its alarm disabled).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { ensureRuntime } from '#test/runtimes/install.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const SHIM = fileURLToPath(new URL('../../../../../test/runtimes/vitest-shim.ts', import.meta.url));
const STARTUP_MS = 60_000;

export interface Workerd {
  readonly base: string;
  stop(): Promise<void>;
}

/** The workerd binary, or why it is missing (offline with an empty npm cache, say). */
export function workerdBinary(): { path: string } | { error: string } {
  const installed = ensureRuntime('workerd');
  if ('error' in installed) return installed;
  const modules = join(installed.dir, 'node_modules');
  const path = [join(modules, '@cloudflare/workerd-linux-64/bin/workerd'), join(modules, '.bin/workerd')].find(
    existsSync,
  );
  return path ? { path } : { error: `no workerd binary under ${modules}` };
}

const config = (disk: string, conformance: boolean) => `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .worker), (name = "disk", disk = (path = "${disk}", writable = true)) ],
  sockets = [ (name = "http", address = "127.0.0.1:0", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2026-01-01",
  compatibilityFlags = [${conformance ? '"nodejs_compat"' : ''}],
  durableObjectNamespaces = [
    (className = "IdempotencyDurableObject", uniqueKey = "idem-test-records", enableSql = true),${
      conformance
        ? '\n    (className = "ConformanceObject", uniqueKey = "idem-test-conformance", enableSql = true),'
        : ''
    }
  ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [
    (name = "IDEM", durableObjectNamespace = "IdempotencyDurableObject"),${
      conformance ? '\n    (name = "CONFORMANCE", durableObjectNamespace = "ConformanceObject"),' : ''
    }
  ],
);
`;

/** What `idem/…` means in a Worker given as source: the library's sources. */
const SOURCES = fileURLToPath(new URL('../..', import.meta.url));
const idemAlias = {
  'idem/http': join(SOURCES, 'http/index.ts'),
  'idem/durable-objects': join(HERE, 'index.ts'),
};

/**
 * Bundles the Worker and starts workerd on a free port; resolves once it listens (its control descriptor says).
 * Without `source`, the Worker is worker.test-kit.ts with both namespaces and `nodejs_compat` (the conformance
 * suite's fixtures import `node:crypto`); with it, that TypeScript (importing `idem/http` and
 * `idem/durable-objects`) with `IDEM` only, and no compatibility flag. `stop()` kills workerd (SIGKILL) and
 * removes its folder, unless `dir` was given: a second workerd on the same `dir` finds the objects' storage.
 */
export async function startWorkerd(
  binary: string,
  { source, dir: given }: { source?: string | undefined; dir?: string | undefined } = {},
): Promise<Workerd> {
  const dir = given ?? mkdtempSync(join(tmpdir(), 'idem-durable-objects-'));
  mkdirSync(join(dir, 'disk'), { recursive: true });
  await build({
    ...(source === undefined
      ? { entryPoints: [join(HERE, 'worker.test-kit.ts')] }
      : { stdin: { contents: source, loader: 'ts', resolveDir: HERE, sourcefile: 'worker.ts' } }),
    bundle: true,
    platform: 'neutral',
    format: 'esm',
    target: 'es2022',
    outfile: join(dir, 'worker.js'),
    alias: { vitest: SHIM, ...idemAlias },
    external: ['node:*'],
    mainFields: ['module', 'main'],
    logLevel: 'error',
  });
  writeFileSync(join(dir, 'config.capnp'), config(join(dir, 'disk'), source === undefined));
  const child = spawn(binary, ['serve', 'config.capnp', '--control-fd=3'], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const closed = new Promise((resolve) => child.once('close', resolve));
      child.kill('SIGKILL');
      await closed;
    }
    if (given === undefined) rmSync(dir, { recursive: true, force: true });
  };
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`workerd did not listen within ${STARTUP_MS} ms:\n${output}`)),
      STARTUP_MS,
    );
    child.once('close', (code) => reject(new Error(`workerd exited (${String(code)}):\n${output}`)));
    let buffered = '';
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        const event = JSON.parse(buffered.slice(0, nl)) as { event?: string; port?: number };
        buffered = buffered.slice(nl + 1);
        if (event.event === 'listen' && typeof event.port === 'number') {
          clearTimeout(timer);
          resolve(event.port);
        }
      }
    });
  }).catch(async (error: unknown) => {
    await stop();
    throw error;
  });
  return { base: `http://127.0.0.1:${port}`, stop };
}

/** What a client sees of a keyed POST: the status, the replay header and the body's exact bytes. */
export interface Seen {
  readonly status: number;
  readonly replayed: string | null;
  readonly bytes: Buffer;
}

/** POSTs `{ amount, currency: 'usd' }` with the idempotency key `key` to `url`, and reads the answer whole. */
export async function postKeyed(
  url: string,
  key: string,
  amount: number,
  headers: Record<string, string> = {},
): Promise<Seen> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body: JSON.stringify({ amount, currency: 'usd' }),
    signal: AbortSignal.timeout(20_000),
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), bytes };
}
