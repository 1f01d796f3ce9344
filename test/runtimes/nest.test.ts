/**
 * `idem/nest` on NestJS 12, which is ESM only, from the built package as a user installs it: NestJS 12
 * (`@nestjs/common`, `@nestjs/core`, `@nestjs/platform-express`, installed on first use in `test/runtimes/nest12`)
 * and a copy of `packages/idem` (its `package.json` and `dist`, so `npm run build` first) in that folder's
 * `node_modules/idem`, both loaded by Node's own ESM loader, so `idem/nest` imports NestJS 12, never the repo's
 * NestJS 11. The adapter conformance suite runs on it over real HTTP against SQLite stores from the same build
 * (new key, byte-identical replay, 409 while in flight, 400 on mismatch, 503 with the store down, …), as
 * packages/idem/src/adapters/nest/conformance.test.ts runs it on NestJS 11; and a timeout interceptor's 408 as
 * time.test.ts checks it there. Then examples/nest11 compiles under both NestJS 11 templates — 11.1 (nodenext) and
 * 11.0 (commonjs, no esModuleInterop) — and its build starts under both; the example tests
 * (test/examples/nest11.test.ts, nest12.test.ts) build and run each example under its own default tsconfig.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it, onTestFinished } from 'vitest';
import type * as NestCommon from '@nestjs/common';
import type * as Rx from 'rxjs';
import type { NestRequest } from 'idem/nest';
import type * as MemoryStores from 'idem/stores/memory';
import type * as SqliteStores from 'idem/stores/sqlite';
import { describeAdapterConformance } from 'idem/testing';
import { sqliteLedger } from '../../packages/idem/src/testing/sqlite-ledger.test-kit.js';
import { nestHarness, type NestLibraries } from '../../packages/idem/src/adapters/nest/harness.test-kit.js';
import { ensureRuntime } from './install.js';

const NEST12_VERSION = '12.6.3';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const install = ensureRuntime('nest12');
if ('error' in install) throw new Error(`NestJS 12 is missing: ${install.error}`);
const installed = install;
if (!existsSync(join(ROOT, 'packages/idem/dist/adapters/nest/index.js'))) {
  throw new Error('packages/idem/dist is missing: run `npm run build` first.');
}
// The built package as npm would install it: its package.json and dist, copied afresh on each run.
const idemCopy = join(installed.dir, 'node_modules/idem');
rmSync(idemCopy, { recursive: true, force: true });
cpSync(join(ROOT, 'packages/idem/package.json'), join(idemCopy, 'package.json'));
cpSync(join(ROOT, 'packages/idem/dist'), join(idemCopy, 'dist'), { recursive: true });
/** Where Node's ESM loader takes `specifier` from in the NestJS 12 folder: the exports map's `import` entry. */
function esmEntry(specifier: string): string {
  const [, name = '', sub = ''] = /^((?:@[^/]+\/)?[^/]+)(\/.*)?$/.exec(specifier) ?? [];
  const folder = join(installed.dir, 'node_modules', name);
  type Target = string | { readonly import?: Target; readonly default?: Target };
  const { exports } = JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8')) as {
    exports: Record<string, Target>;
  };
  let target = exports[`.${sub}`];
  while (typeof target === 'object') target = target.import ?? target.default;
  if (target === undefined) throw new Error(`${specifier} has no ESM entry`);
  return join(folder, target);
}
const fromNest12 = async <T>(specifier: string): Promise<T> =>
  (await import(pathToFileURL(esmEntry(specifier)).href)) as T;

const libraries: NestLibraries = {
  version: `NestJS ${NEST12_VERSION}`,
  common: await fromNest12<NestLibraries['common']>('@nestjs/common'),
  core: await fromNest12<NestLibraries['core']>('@nestjs/core'),
  idem: await fromNest12<NestLibraries['idem']>('idem/nest'),
};
const { sqliteStore } = await fromNest12<typeof SqliteStores>('idem/stores/sqlite');

describe('the NestJS this file runs on', () => {
  it('is NestJS 12 for the test and for idem/nest alike, loaded as ES modules', async () => {
    const core = esmEntry('@nestjs/core');
    const pkg = JSON.parse(readFileSync(join(core, '../package.json'), 'utf8')) as { version: string; type: string };
    expect([pkg.version, pkg.type]).toEqual([NEST12_VERSION, 'module']);
    expect(esmEntry('idem/nest')).toBe(join(installed.dir, 'node_modules/idem/dist/adapters/nest/index.js'));
    // idem/nest's own `@nestjs/core` is the very file the test uses (one instance, not the root's NestJS 11).
    expect(createRequire(esmEntry('idem/nest')).resolve('@nestjs/core')).toBe(core);
    const module = await fromNest12<{ IdempotencyModule: unknown }>('idem/nest');
    expect(module.IdempotencyModule).toBe(libraries.idem.IdempotencyModule);
  });
});

describeAdapterConformance({
  harness: nestHarness('express', libraries),
  ...sqliteLedger('nest12', sqliteStore),
});

/** NestJS 12's own `rxjs` and `RequestTimeoutException`, for the timeout interceptor of Nest's documentation. */
const rx = await fromNest12<typeof Rx>('rxjs');
const { RequestTimeoutException, UseInterceptors } = await fromNest12<typeof NestCommon>('@nestjs/common');
const { memoryStore } = await fromNest12<typeof MemoryStores>('idem/stores/memory');

describe(`a timeout interceptor on NestJS ${NEST12_VERSION}`, () => {
  it('answers 408 at once; retries get 409 while the handler runs, then run it again once it has settled', async () => {
    const { Controller, Module, Post, Req } = libraries.common;
    const runs: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    class TimeoutInterceptor {
      intercept(_context: unknown, next: { handle(): Rx.Observable<unknown> }) {
        return next.handle().pipe(
          rx.timeout(100),
          rx.catchError((error: unknown) =>
            rx.throwError(() => (error instanceof rx.TimeoutError ? new RequestTimeoutException() : error)),
          ),
        );
      }
    }
    class Charges {
      async slow(req: NestRequest): Promise<object> {
        const run = runs.push(runs.length + 1);
        if (run === 1) await held;
        return { run, id: libraries.idem.idempotencyContext(req)?.id };
      }
    }
    Controller('timed')(Charges);
    UseInterceptors(TimeoutInterceptor)(Charges);
    Post('slow')(Charges.prototype, 'slow', Object.getOwnPropertyDescriptor(Charges.prototype, 'slow') ?? {});
    Req()(Charges.prototype, 'slow', 0);
    class AppModule {}
    const store = memoryStore();
    Module({
      imports: [libraries.idem.IdempotencyModule.forRoot({ store, scope: 'single-tenant', onError: () => {} })],
      controllers: [Charges],
    })(AppModule);
    const app = await libraries.core.NestFactory.create(AppModule, {
      rawBody: true,
      logger: false,
      abortOnError: false,
    });
    onTestFinished(() => app.close());
    await app.listen(0, '127.0.0.1');
    const { port } = (app.getHttpServer() as Server).address() as AddressInfo;
    const send = async () => {
      const response = await fetch(`http://127.0.0.1:${port}/timed/slow`, {
        method: 'POST',
        headers: { 'idempotency-key': 'nest12-timeout', 'content-type': 'application/json' },
        body: '{"amount":100}',
      });
      return [response.status, await response.text()] as const;
    };

    expect((await send())[0]).toBe(408);
    expect(await send()).toEqual([409, expect.stringContaining('idempotency-key-in-use') as string]);
    release();
    let retry = await send();
    for (let tries = 0; retry[0] === 409 && tries < 200; tries += 1) retry = await send();
    const [status, body] = retry;
    const { id } = JSON.parse(body) as { id: string };
    expect([status, JSON.parse(body)]).toEqual([201, { run: 2, id }]);
    expect(await send()).toEqual([201, body]);
    expect(runs).toEqual([1, 2]);
  });
});

/** `tsc -p project`, type-checking only; its exit code and output. */
function tsc(compiler: string, project: string, ...flags: string[]) {
  const run = spawnSync(process.execPath, [compiler, '-p', project, '--pretty', 'false', ...flags], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() };
}

/** A copy of examples/nest11 in `parent`, with `edit` applied to its main.ts and ledger.ts; removed after. */
function copyProject(parent: string, edit?: (file: string, text: string) => string) {
  mkdirSync(parent, { recursive: true });
  const copy = mkdtempSync(join(parent, 'idem-example-nest11-'));
  onTestFinished(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(join(ROOT, 'examples/nest11'), copy, {
    recursive: true,
    filter: (path) => !/[/\\](node_modules|dist)$/.test(path),
  });
  for (const file of ['main.ts', 'ledger.ts']) {
    const path = join(copy, 'src', file);
    if (edit) writeFileSync(path, edit(file, readFileSync(path, 'utf8')));
  }
  return copy;
}

const TSC5 = join(ROOT, 'node_modules/typescript/bin/tsc');
/** Inside the root's node_modules, so the copy resolves NestJS 11 and `idem` from there. */
const NEST11_SCRATCH = join(ROOT, 'node_modules/.cache');
const NEST11_CONFIGS = ['tsconfig.json', 'tsconfig.nest-11.0.json'] as const;

/** Builds the NestJS 11 copy under `config` and starts its AppModule (the store's factory runs), then closes it. */
function startNest11(copy: string, config: string) {
  expect(tsc(TSC5, join(copy, config), '--incremental', 'false')).toEqual({ status: 0, output: '' });
  const start = `require('reflect-metadata');
    const { NestFactory } = require('@nestjs/core');
    const { AppModule } = require('./dist/app.module.js');
    NestFactory.create(AppModule, { rawBody: true, logger: false, abortOnError: false })
      .then(async (app) => { await app.init(); await app.close(); console.log('started'); })
      .catch((error) => { console.log(error.message); process.exitCode = 1; });`;
  const run = spawnSync(process.execPath, ['-e', start], { cwd: copy, encoding: 'utf8', timeout: 60_000 });
  return `${run.stdout}${run.stderr}`.trim();
}

describe("examples/nest11 under both of NestJS 11's default project settings", () => {
  it('NestJS 11: compiles under the tsconfig of `nest new` 11.1 (nodenext) and 11.0 (commonjs, no esModuleInterop)', () => {
    for (const config of NEST11_CONFIGS) {
      expect(tsc(TSC5, join(ROOT, 'examples/nest11', config), '--noEmit', '--incremental', 'false')).toEqual({
        status: 0,
        output: '',
      });
    }
  }, 180_000);

  it('NestJS 11: the built app starts under both tsconfigs; `import Database from` would not under 11.0', () => {
    for (const config of NEST11_CONFIGS) expect(startNest11(copyProject(NEST11_SCRATCH), config)).toBe('started');
    const defaultImport = copyProject(NEST11_SCRATCH, (file, text) =>
      text.replace("import Database = require('better-sqlite3');", "import Database from 'better-sqlite3';"),
    );
    expect(startNest11(defaultImport, 'tsconfig.nest-11.0.json')).toBe('better_sqlite3_1.default is not a constructor');
  }, 240_000);

  it('NestJS 11: the top-level await of an ESM main.ts fails the compile (what the check guards)', () => {
    const esmMain = copyProject(NEST11_SCRATCH, (file, text) =>
      file === 'main.ts' ? readFileSync(join(ROOT, 'examples/nest12/src/main.ts'), 'utf8').replace('.js', '') : text,
    );
    const result = tsc(TSC5, join(esmMain, 'tsconfig.nest-11.0.json'), '--noEmit', '--incremental', 'false');
    expect([result.status, [...result.output.matchAll(/error (TS\d+)/g)].map((m) => m[1])]).toEqual([
      2,
      ['TS1378', 'TS1378', 'TS1378'],
    ]);
  }, 120_000);
});
