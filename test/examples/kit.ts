/**
 * @module The kit every example test shares: pack `packages/idem` once (per build of it), copy an example of
 * `examples/` into a temp folder with its `idem` dependency pointed at that tarball, `npm install` it as a user
 * would (`--prefer-offline`: a second run downloads nothing), start it, and drive it to a replay. Each example
 * prints `listening on <url>` once it serves; the kit waits for that line, never for a fixed time.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, rmdirSync } from 'node:fs';
import { statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PKG = join(ROOT, 'packages/idem');
const run = promisify(execFile);
/** Bound on one npm command or one example's start. */
const STEP_MS = 240_000;

/** The time each step took, for the report a test prints (and the commit body quotes). */
export const timings: Record<string, number> = {};
const timed = async <T>(name: string, step: () => Promise<T>): Promise<T> => {
  const started = Date.now();
  try {
    return await step();
  } finally {
    timings[name] = Date.now() - started;
  }
};

/** A hash of what `npm pack` ships: the manifest and every built file. */
function buildHash(): string {
  const dist = join(PKG, 'dist');
  if (!existsSync(join(dist, 'index.js'))) throw new Error('packages/idem/dist is missing: run `npm run build` first.');
  const hash = createHash('sha256').update(readFileSync(join(PKG, 'package.json')));
  const files = readdirSync(dist, { recursive: true, encoding: 'utf8' }).sort();
  for (const file of files) {
    const path = join(dist, file);
    if (statSync(path).isFile()) hash.update(file).update(readFileSync(path));
  }
  return hash.digest('hex').slice(0, 16);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The tarball of the current build, packed by the first test file that asks (the others wait on a lock folder):
 * one `npm pack` per build, shared by every example test of the run.
 */
export async function packedTarball(): Promise<string> {
  const dir = join(tmpdir(), `idem-examples-pack-${buildHash()}`);
  const done = join(dir, 'tarball');
  const lock = `${dir}.lock`;
  for (;;) {
    if (existsSync(done)) return readFileSync(done, 'utf8');
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > STEP_MS) rmdirSync(lock);
      await sleep(200);
    }
  }
  try {
    if (existsSync(done)) return readFileSync(done, 'utf8');
    mkdirSync(dir, { recursive: true });
    const { stdout } = await timed('npm pack', () =>
      run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], { cwd: PKG, timeout: STEP_MS }),
    );
    const [{ filename }] = JSON.parse(stdout) as [{ filename: string }];
    writeFileSync(done, join(dir, filename));
    // Tarballs of earlier builds, left by earlier runs: gone after an hour (a run still using one is long over).
    for (const old of readdirSync(tmpdir()).filter((name) => /^idem-examples-pack-[0-9a-f]{16}$/.test(name))) {
      const path = join(tmpdir(), old);
      if (path !== dir && Date.now() - statSync(path).mtimeMs > 3_600_000)
        rmSync(path, { recursive: true, force: true });
    }
    return join(dir, filename);
  } finally {
    rmdirSync(lock);
  }
}

export interface Installed {
  /** The temp copy, installed. */
  readonly dir: string;
  readonly remove: () => void;
}

export interface InstallOptions {
  /** Dependencies not to install from the registry: each is linked from the folder given instead. */
  readonly linked?: Readonly<Record<string, string>>;
}

/**
 * `examples/<name>` copied to a temp folder, its `idem` dependency replaced by the packed tarball, installed with
 * `npm install --prefer-offline`. `linked` packages (a runtime already installed under test/runtimes) are left
 * out of the install and linked in afterwards.
 */
export async function installExample(name: string, { linked = {} }: InstallOptions = {}): Promise<Installed> {
  const tarball = await packedTarball();
  const dir = join(mkdtempSync(join(tmpdir(), `idem-example-${name}-`)), name);
  cpSync(join(ROOT, 'examples', name), dir, {
    recursive: true,
    filter: (path) => !/[/\\](node_modules|dist|\.next)$/.test(path),
  });
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
  };
  if (manifest.dependencies.idem === undefined) throw new Error(`examples/${name} does not depend on idem`);
  manifest.dependencies.idem = `file:${tarball}`;
  for (const dependency of Object.keys(linked)) delete manifest.dependencies[dependency];
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  await timed(`install ${name}`, () =>
    run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], {
      cwd: dir,
      timeout: STEP_MS,
    }),
  );
  for (const [dependency, from] of Object.entries(linked)) {
    mkdirSync(dirname(join(dir, 'node_modules', dependency)), { recursive: true });
    symlinkSync(from, join(dir, 'node_modules', dependency), 'dir');
  }
  return { dir, remove: () => rmSync(dirname(dir), { recursive: true, force: true }) };
}

export interface Started {
  /** `http://127.0.0.1:<port>`, from the example's `listening on` line; empty for one that serves no HTTP. */
  readonly base: string;
  /** Everything the process printed so far. */
  readonly output: () => string;
  readonly stop: () => Promise<void>;
}

export interface StartOptions {
  readonly cwd: string;
  readonly env?: Readonly<Record<string, string>>;
  /** workerd: it announces its port as `{"event":"listen",…,"port":N}` on descriptor 3 (`--control-fd=3`). */
  readonly control?: boolean;
  /** The line that says it is ready; its first group, if any, is its address. Default `listening on <url>`. */
  readonly ready?: RegExp;
}

/** Starts an example and resolves with its address once it prints `listening on <url>` (or `ready`). */
export function startExample(
  command: string,
  args: readonly string[],
  { cwd, env = {}, control = false, ready = /listening on (https?:\/\/\S+)/ }: StartOptions,
): Promise<Started> {
  const child: ChildProcess = spawn(command, [...args], {
    cwd,
    env: { ...process.env, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe', control ? 'pipe' : 'ignore'],
  });
  let output = '';
  const stop = () =>
    new Promise<void>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) return done();
      child.once('close', () => done());
      child.kill('SIGTERM');
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} printed no line ${String(ready)}:\n${output}`));
    }, STEP_MS);
    const started = Date.now();
    const watch = (chunk: Buffer) => {
      output += chunk.toString();
      const match = ready.exec(output);
      if (match === null) return;
      const url = match[1] ?? '';
      clearTimeout(timer);
      timings[`start ${args.at(-1) ?? command}`] = Date.now() - started;
      const base = url
        .replace(/\/$/, '')
        .replace('//localhost:', '//127.0.0.1:')
        .replace('//0.0.0.0:', '//127.0.0.1:')
        .replace('//[::1]:', '//127.0.0.1:'); // NestJS's getUrl() on a dual-stack listener
      resolve({ base, output: () => output, stop });
    };
    child.stdout?.on('data', watch);
    // workerd's announcement, turned into the line the examples print.
    child.stdio[3]?.on('data', (chunk: Buffer) => {
      const port = /"port":(\d+)/.exec(chunk.toString())?.[1];
      if (port !== undefined) watch(Buffer.from(`listening on http://127.0.0.1:${port}\n`));
    });
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('close', (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} ${args.join(' ')} exited (${String(code)}) before listening:\n${output}`));
    });
  });
}

export interface ReplayScenario {
  /** Where the charge is POSTed, e.g. `${base}/v1/charges`. */
  readonly url: string;
  readonly body: unknown;
  /** The same key with this body is a reused key. */
  readonly otherBody: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** How many times the work ran, read where the example records it (its ledger, its list of charges). */
  readonly executions: () => Promise<number>;
}

/** What a client and the ledger see: charge, retry with the same key, reuse of the key with another body. */
export interface Replay {
  readonly before: number;
  readonly first: number;
  readonly retry: number;
  readonly replayed: string | null;
  readonly sameBytes: boolean;
  readonly executions: number;
  readonly reused: number;
  readonly after: number;
}

export async function driveReplay({ url, body, otherBody, headers = {}, executions }: ReplayScenario): Promise<Replay> {
  const key = crypto.randomUUID();
  const post = async (payload: unknown) => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
      body: JSON.stringify(payload),
      signal: AbortSignal.timeout(30_000),
    });
    return { response, bytes: Buffer.from(await response.arrayBuffer()) };
  };
  const before = await executions();
  const first = await post(body);
  const retry = await post(body);
  const ran = await executions();
  const reused = await post(otherBody);
  return {
    before,
    first: first.response.status,
    retry: retry.response.status,
    replayed: retry.response.headers.get('idempotent-replayed'),
    sameBytes: first.bytes.length > 0 && first.bytes.equals(retry.bytes),
    executions: ran - before,
    reused: reused.response.status,
    after: (await executions()) - before,
  };
}

/** What every example answers: 201, a byte-identical replay, the work once, 400 for the reused key. */
export const REPLAYED: Replay = {
  before: 0,
  first: 201,
  retry: 201,
  replayed: 'true',
  sameBytes: true,
  executions: 1,
  reused: 400,
  after: 1,
};

export interface RunOptions extends Omit<StartOptions, 'cwd'> {
  /** The charge's path on the example's address. Default `/v1/charges`. */
  readonly path?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** How many times the work ran; given the example's address. */
  readonly executions: (base: string) => Promise<number>;
}

/**
 * Starts the installed example (`command args` in its folder), drives it to a replay with a $50 charge (and $90
 * for the reused key), stops it: what {@link driveReplay} saw.
 */
export async function runToReplay(
  example: Installed,
  command: string,
  args: readonly string[],
  { path = '/v1/charges', headers = {}, executions, ...start }: RunOptions,
): Promise<Replay> {
  const server = await startExample(command, args, { cwd: example.dir, ...start });
  try {
    return await driveReplay({
      url: `${server.base}${path}`,
      headers,
      body: { amount: 5000, currency: 'usd' },
      otherBody: { amount: 9000, currency: 'usd' },
      executions: () => executions(server.base),
    });
  } finally {
    await server.stop();
  }
}

/**
 * Installs `examples/<name>` before the file's tests (unless `enabled` is false: a service is down) and removes it
 * after them, then runs `cleanup` (drop the example's schema, keys, queues) and prints the timings. Returns the
 * installed example, for the tests.
 */
export function useExample(
  name: string,
  { enabled = true, cleanup, ...options }: { enabled?: boolean; cleanup?: () => unknown } & InstallOptions = {},
): () => Installed {
  let example: Installed | undefined;
  beforeAll(async () => {
    if (enabled) example = await installExample(name, options);
  }, 300_000);
  afterAll(async () => {
    example?.remove();
    await cleanup?.();
    console.log(`[examples/${name}] ${JSON.stringify(timings)}`);
  });
  return () => {
    if (example === undefined) throw new Error(`examples/${name} is not installed`);
    return example;
  };
}
