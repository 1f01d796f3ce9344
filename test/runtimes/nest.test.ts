/**
 * `idem/nest` on NestJS 12, which is ESM only, from the built package as a user installs it: NestJS 12
 * (`@nestjs/common`, `@nestjs/core`, `@nestjs/platform-express`, installed on first use in `test/runtimes/nest12`)
 * and a copy of `packages/idem` (its `package.json` and `dist`, so `npm run build` first) in that folder's
 * `node_modules/idem`, both loaded by Node's own ESM loader, so `idem/nest` imports NestJS 12, never the repo's
 * NestJS 11. The adapter conformance suite runs on it over real HTTP against SQLite stores from the same build
 * (new key, byte-identical replay, 409 while in flight, 400 on mismatch, 503 with the store down, …), as
 * packages/idem/src/adapters/nest/conformance.test.ts runs it on NestJS 11.
 */
import { cpSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
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
