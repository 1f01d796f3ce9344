#!/usr/bin/env node
// The package as users get it: `npm pack` packages/idem, install the tarball offline into scratch projects under a
// temp dir (the optional peers linked from this checkout's node_modules), then compile and run a smoke test of
// every subpath under ESM, CommonJS `require`, and TypeScript with module commonjs (node10 resolution: the classic
// NestJS tsconfig), node16 (CJS and ESM), nodenext and bundler. A bare project without any peer checks that the
// core imports alone and that the `idem` bin asks for a missing driver in one line. Bounded: 8 minutes in all.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PKG = join(ROOT, 'packages/idem');
const DEADLINE = Date.now() + 8 * 60_000;
const started = Date.now();
const keep = process.argv.includes('--keep');
const tmp = mkdtempSync(join(tmpdir(), 'idem-pack-'));
const results = [];

const log = (line) => console.log(`[pack ${((Date.now() - started) / 1000).toFixed(1).padStart(5)} s] ${line}`);

function run(command, args, cwd, { expectFail = false } = {}) {
  const left = DEADLINE - Date.now();
  if (left <= 0) throw new Error('pack test: out of time (8 min)');
  try {
    const out = execFileSync(command, args, {
      cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: Math.min(left, 180_000),
    });
    if (expectFail) throw new Error(`${command} ${args.join(' ')} succeeded; expected a failure`);
    return out;
  } catch (error) {
    if (expectFail && error.status !== undefined)
      return { status: error.status, stdout: error.stdout, stderr: error.stderr };
    const detail = [error.stdout, error.stderr].filter(Boolean).join('\n');
    throw new Error(`${command} ${args.join(' ')} (in ${cwd}) failed:\n${detail || error.message}`);
  }
}

const write = (path, text) => {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
};

/** Peers (and the type packages a TypeScript user would have), linked from this checkout: no download. */
const PEERS = [
  'express',
  'fastify',
  'hono',
  'koa',
  '@nestjs/common',
  '@nestjs/core',
  'rxjs',
  '@opentelemetry/api',
  'prom-client',
  'pg',
  'mysql2',
  'ioredis',
  'redis',
  '@aws-sdk/client-dynamodb',
  'better-sqlite3',
  'vitest',
];
const TYPES = ['typescript', '@types/node', '@types/express', '@types/koa', '@types/pg', '@types/better-sqlite3'];

function link(project, names) {
  for (const name of names) {
    const target = join(ROOT, 'node_modules', name);
    if (!existsSync(target))
      throw new Error(`pack test: ${name} is not installed in ${ROOT}/node_modules (run npm ci)`);
    mkdirSync(dirname(join(project, 'node_modules', name)), { recursive: true });
    symlinkSync(target, join(project, 'node_modules', name), 'dir');
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The smoke: every subpath's main export is there, and one protected request runs once then replays, on the memory
// store and on SQLite (better-sqlite3). The same text serves ESM, CJS (`require` rewritten) and TypeScript.
// idem/testing runs inside Vitest, which is ESM only: under CommonJS its types must resolve (checked by tsc), and
// require() gets Vitest's own "use import" error.
const smokeBody = (cjs) => `
async function main(): Promise<void> {${
  cjs
    ? `
  try {
    require('idem/testing');
    throw new Error('require(idem/testing) worked: Vitest should refuse CommonJS');
  } catch (error) {
    if (!/Vitest cannot be imported in a CommonJS module/.test(String(error))) throw error;
  }
  const testing: { describeStoreConformance: unknown } = { describeStoreConformance: (() => undefined) as unknown as typeof DescribeStoreConformance };`
    : ''
}
  const checks: Array<[string, unknown]> = [
    ['idem createEngine', core.createEngine],
    ['idem IdempotencyError', core.IdempotencyError],
    ['idem/http idempotency', http.idempotency],
    ['idem/client createIdempotentFetch', client.createIdempotentFetch],
    ['idem/express idempotency', express.idempotency],
    ['idem/fastify idempotency', fastify.idempotency],
    ['idem/hono idempotency', hono.idempotency],
    ['idem/koa idempotency', koa.idempotency],
    ['idem/nest IdempotencyModule', nest.IdempotencyModule],
    ['idem/otel idemTracing', otel.idemTracing],
    ['idem/prometheus prometheusMetrics', prometheus.prometheusMetrics],
    ['idem/stores/memory memoryStore', memory.memoryStore],
    ['idem/stores/sqlite sqliteStore', sqlite.sqliteStore],
    ['idem/stores/postgres postgresStore', postgres.postgresStore],
    ['idem/stores/mysql mysqlStore', mysql.mysqlStore],
    ['idem/stores/redis redisStore', redis.redisStore],
    ['idem/stores/dynamodb dynamodbStore', dynamodb.dynamodbStore],
    ['idem/durable-objects durableObjectsStore', durableObjects.durableObjectsStore],
    ['idem/durable-objects IdempotencyDurableObject', durableObjects.IdempotencyDurableObject],
    ['idem/testing describeStoreConformance', testing.describeStoreConformance],
  ];
  for (const [name, value] of checks) if (typeof value !== 'function') throw new Error(name + ' is ' + typeof value);

  const database = new Database(':memory:');
  const sqliteStore = sqlite.sqliteStore({ database });
  await sqliteStore.migrate();
  for (const store of [memory.memoryStore(), sqliteStore]) {
    let runs = 0;
    const protect = http.idempotency({ store, scope: 'single-tenant' });
    const handler = protect(async () => {
      runs++;
      return Response.json({ id: 'ch_1' }, { status: 201 });
    });
    const send = () =>
      handler(new Request('http://local.test/v1/charges', { method: 'POST', headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' }, body: '{"amount":1}' }));
    const first = await send();
    const second = await send();
    const replayed = second.headers.get('idempotent-replayed');
    if (first.status !== 201 || second.status !== 201 || replayed !== 'true' || runs !== 1) {
      throw new Error(store.name + ': ' + first.status + ' ' + second.status + ' replayed=' + replayed + ' runs=' + runs);
    }
  }
  // The engine's errors are one class across subpaths (shared chunks, not copies).
  try {
    http.idempotency({ store: memory.memoryStore(), scope: 'single-tenant', leaseMs: -1 });
    throw new Error('no error for leaseMs: -1');
  } catch (error) {
    if (!(error instanceof core.IdempotencyError) || (error as { code?: string }).code !== 'CONFIG_INVALID') throw error;
  }
  database.close();
  console.log('smoke ok: ' + checks.length + ' exports of ' + new Set(checks.map(([name]) => name.split(' ')[0])).size + ' subpaths');
}
main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
`;

const SMOKE_BODY = smokeBody(false);
const SUBPATHS = {
  core: 'idem',
  http: 'idem/http',
  client: 'idem/client',
  express: 'idem/express',
  fastify: 'idem/fastify',
  hono: 'idem/hono',
  koa: 'idem/koa',
  nest: 'idem/nest',
  otel: 'idem/otel',
  prometheus: 'idem/prometheus',
  memory: 'idem/stores/memory',
  sqlite: 'idem/stores/sqlite',
  postgres: 'idem/stores/postgres',
  mysql: 'idem/stores/mysql',
  redis: 'idem/stores/redis',
  dynamodb: 'idem/stores/dynamodb',
  durableObjects: 'idem/durable-objects',
  testing: 'idem/testing',
};

const tsImports = (cjs) =>
  Object.entries(SUBPATHS)
    .filter(([name]) => !(cjs && name === 'testing'))
    .map(([name, path]) => `import * as ${name} from '${path}';`)
    .join('\n') +
  "\nimport Database from 'better-sqlite3';\n" +
  (cjs
    ? "import type { describeStoreConformance as DescribeStoreConformance } from 'idem/testing';\ndeclare const require: (id: string) => unknown;\n"
    : '');
const stripTypes = (text) =>
  text
    .replace(/: Promise<void>/g, '')
    .replace(/: Array<\[string, unknown\]>/g, '')
    .replace(/\(error: unknown\)/g, '(error)')
    .replace(/\(error as \{ code\?: string \}\)/g, 'error')
    .replace(
      /const testing: \{ describeStoreConformance: unknown \} = \{ describeStoreConformance: \(\(\) => undefined\) as unknown as typeof DescribeStoreConformance \};/,
      'const testing = { describeStoreConformance: () => undefined };',
    );
const esmSmoke =
  Object.entries(SUBPATHS)
    .map(([n, p]) => `import * as ${n} from '${p}';`)
    .join('\n') +
  "\nimport Database from 'better-sqlite3';\n" +
  stripTypes(SMOKE_BODY);
const cjsSmoke =
  Object.entries(SUBPATHS)
    .filter(([name]) => name !== 'testing')
    .map(([n, p]) => `const ${n} = require('${p}');`)
    .join('\n') +
  "\nconst Database = require('better-sqlite3');\n" +
  stripTypes(smokeBody(true));

const TS_BASE = {
  target: 'ES2022',
  lib: ['ES2023', 'DOM'],
  strict: true,
  skipLibCheck: true,
  esModuleInterop: true,
  types: ['node'],
  outDir: 'out',
  rootDir: 'src',
};
const SCENARIOS = [
  { name: 'ESM (node)', dir: 'esm', type: 'module', file: 'smoke.mjs', source: esmSmoke },
  { name: 'CommonJS require (node)', dir: 'cjs', type: 'commonjs', file: 'smoke.cjs', source: cjsSmoke },
  ...[
    // [name, dir, package type, module, moduleResolution]
    ['TypeScript module commonjs (node10, the Nest default)', 'ts-commonjs', 'commonjs', 'commonjs', 'node'],
    ['TypeScript node16, CommonJS project', 'ts-node16-cjs', 'commonjs', 'node16', 'node16'],
    ['TypeScript node16, ESM project', 'ts-node16-esm', 'module', 'node16', 'node16'],
    ['TypeScript nodenext', 'ts-nodenext', 'module', 'nodenext', 'nodenext'],
    ['TypeScript bundler', 'ts-bundler', 'module', 'esnext', 'bundler'],
  ].map(([name, dir, type, module, moduleResolution]) => ({ name, dir, type, ts: { module, moduleResolution } })),
];

try {
  // 0. Every module subpath in package.json is in the smoke (a new export fails here until it is added above).
  const exported = Object.keys(JSON.parse(readFileSync(join(PKG, 'package.json'), 'utf8')).exports)
    .filter((key) => key !== './package.json' && !key.endsWith('.sql'))
    .map((key) => (key === '.' ? 'idem' : `idem/${key.slice(2)}`))
    .sort();
  const covered = Object.values(SUBPATHS).sort();
  if (JSON.stringify(exported) !== JSON.stringify(covered)) {
    throw new Error(
      `the smoke covers ${covered.join(', ')} but package.json exports ${exported.join(', ')}: add the new subpath to SUBPATHS`,
    );
  }

  // 1. Pack. `npm test` has built already; a clean checkout builds through `prepack`.
  const built = existsSync(join(PKG, 'dist/index.js'));
  log(`npm pack packages/idem ${built ? '(built already)' : '(prepack builds it)'}`);
  const packed = JSON.parse(
    run('npm', ['pack', '--json', '--pack-destination', tmp, ...(built ? ['--ignore-scripts'] : [])], PKG),
  );
  const { filename, size, unpackedSize, entryCount, files } = packed[0];
  const tarball = join(tmp, filename);
  log(
    `${filename}: ${(size / 1024).toFixed(1)} kB packed, ${(unpackedSize / 1024).toFixed(1)} kB unpacked, ${entryCount} files`,
  );
  const maps = files.filter((f) => f.path.endsWith('.map'));
  const sources = files.filter((f) => /\.ts$/.test(f.path) && !/\.d\.c?ts$/.test(f.path));
  if (maps.length || sources.length)
    throw new Error(`tarball ships source maps or sources: ${[...maps, ...sources].map((f) => f.path).join(', ')}`);

  // 2. One scratch project: the tarball, installed offline (idem has no dependencies), then the peers linked.
  const project = join(tmp, 'project');
  write(join(project, 'package.json'), JSON.stringify({ name: 'scratch', private: true }, null, 2));
  log('npm install --offline <tarball> into a scratch project');
  // --legacy-peer-deps: the optional peers are linked from this checkout below, so npm need not resolve them (offline,
  // a cached packument of a newer major, e.g. @nestjs/core 12 wanting rxjs, failed the install with ERESOLVE).
  run(
    'npm',
    [
      'install',
      '--offline',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      '--no-package-lock',
      '--legacy-peer-deps',
      tarball,
    ],
    project,
  );
  link(project, [...PEERS, ...TYPES]);
  const tsc = join(project, 'node_modules/typescript/bin/tsc');
  // The registry page is the package's own README (install first, no links into the repository), not the root's.
  const readme = readFileSync(join(project, 'node_modules/idem/README.md'), 'utf8');
  if (!readme.startsWith('# idem\n\nIdempotency keys') || readme.includes('](docs/') || readme.includes('npm ci'))
    throw new Error("the tarball's README is not packages/idem/README.md (the registry page)");
  // `npm pack --json` prints JSON only: `prepack` builds, and the build's output goes to stderr.
  log('npm pack --dry-run --json (prepack builds again)');
  const dry = run('npm', ['pack', '--dry-run', '--json'], PKG);
  try {
    JSON.parse(dry);
  } catch {
    throw new Error(`npm pack --json printed more than JSON:\n${dry.slice(0, 400)}`);
  }

  // 3. Each module system in its own folder (its own package.json "type"), sharing the project's node_modules.
  for (const scenario of SCENARIOS) {
    const dir = join(project, scenario.dir);
    write(
      join(dir, 'package.json'),
      JSON.stringify({ name: `scratch-${scenario.dir}`, private: true, type: scenario.type }, null, 2),
    );
    try {
      let entry;
      if (scenario.ts) {
        write(
          join(dir, 'tsconfig.json'),
          JSON.stringify({ compilerOptions: { ...TS_BASE, ...scenario.ts }, include: ['src'] }, null, 2),
        );
        const cjs = scenario.type === 'commonjs';
        write(join(dir, 'src/smoke.ts'), tsImports(cjs) + smokeBody(cjs));
        log(`${scenario.name}: tsc`);
        run(process.execPath, [tsc, '-p', 'tsconfig.json'], dir);
        entry = 'out/smoke.js';
      } else {
        write(join(dir, scenario.file), scenario.source);
        entry = scenario.file;
      }
      log(`${scenario.name}: node ${entry}`);
      const out = run(process.execPath, [entry], dir).trim();
      results.push([scenario.name, 'pass', out]);
    } catch (error) {
      results.push([scenario.name, 'FAIL', error.message.split('\n').slice(0, 12).join('\n')]);
    }
  }

  // 4. Bare: the tarball alone. The core needs nothing; the bin names the driver to install, in one line, exit 3.
  // --prefer-offline, not --offline: npm reads the optional peers' registry metadata (rxjs's, for its range) even
  // when it installs none of them, and a fresh cache holds only what `npm ci` fetched, which is tarballs.
  const bare = join(tmp, 'bare');
  write(join(bare, 'package.json'), JSON.stringify({ name: 'scratch-bare', private: true, type: 'module' }, null, 2));
  log('bare project: the tarball without any peer');
  try {
    run(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', '--no-package-lock', tarball],
      bare,
    );
    write(
      join(bare, 'core.mjs'),
      "import { createEngine } from 'idem';\nimport { idempotency } from 'idem/http';\nimport { memoryStore } from 'idem/stores/memory';\nconst r = await idempotency({ store: memoryStore(), scope: 'single-tenant' })(async () => new Response('ok'))(new Request('http://x/', { method: 'POST', headers: { 'idempotency-key': 'k' } }));\nif (typeof createEngine !== 'function' || (await r.text()) !== 'ok') process.exit(1);\n",
    );
    write(
      join(bare, 'core.cjs'),
      "const { createEngine } = require('idem');\nif (typeof createEngine !== 'function') process.exit(1);\n",
    );
    run(process.execPath, ['core.mjs'], bare);
    run(process.execPath, ['core.cjs'], bare);
    const bin = join(bare, 'node_modules/.bin/idem');
    const version = run(bin, ['--version'], bare).trim();
    const expected = JSON.parse(readFileSync(join(PKG, 'package.json'), 'utf8')).version;
    if (version !== expected) throw new Error(`idem --version printed ${version}, expected ${expected}`);
    const missing = run(
      bin,
      ['records', 'list', '--store', 'postgres://nobody@127.0.0.1:1/none', '--scope', 's'],
      bare,
      { expectFail: true },
    );
    const line = 'idem records: postgres:// stores need the "pg" package: install it (npm install pg).';
    if (missing.status !== 3 || !missing.stderr.startsWith(`${line}\n`) || /\n\s+at /.test(missing.stderr)) {
      throw new Error(`idem with pg missing: exit ${missing.status}, stderr ${JSON.stringify(missing.stderr)}`);
    }
    results.push(['bare install: core (ESM, CJS), idem --version, "install pg"', 'pass', `idem ${version}`]);
  } catch (error) {
    results.push([
      'bare install: core (ESM, CJS), idem --version, "install pg"',
      'FAIL',
      error.message.split('\n').slice(0, 12).join('\n'),
    ]);
  }
} catch (error) {
  results.push(['pack and install', 'FAIL', error.message]);
} finally {
  if (!keep) rmSync(tmp, { recursive: true, force: true });
  else log(`kept ${tmp}`);
}

console.log('\nModule-system matrix (packed tarball):');
for (const [name, result, detail] of results)
  console.log(
    `  ${result === 'pass' ? 'PASS' : 'FAIL'}  ${name}${result === 'pass' ? `  — ${detail}` : `\n${detail.replace(/^/gm, '        ')}`}`,
  );
const failed = results.filter(([, result]) => result !== 'pass').length;
log(failed ? `${failed} failed` : `all ${results.length} passed`);
process.exit(failed ? 1 : 0);
