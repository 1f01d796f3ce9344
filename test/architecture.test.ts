/**
 * Imports flow one way (CONVENTIONS.md): core imports nothing of ours; stores, http and adapters import core
 * (and http, for adapters); no store imports another (what stores share lives in stores/shared/), nor an adapter
 * another (what Node adapters share lives in adapters/shared.ts and adapters/node/); demo reaches the library only
 * by its package name. Adapters reach the library only through its public entry points (package.json `exports`),
 * so a third party can write an adapter the way ours are written.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const LIB = 'packages/idem/src';

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : files(path);
    return path.endsWith('.ts') && !/\.test(-kit)?\.ts$/.test(path) ? [path] : []; // tests and their kits are not the library
  });
}

/** Every relative import of a file, resolved to a path under the repo. */
function relativeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+['"]([^'"]+)['"]/g)].map(
    (m) => m[1] as string,
  );
  return specifiers.filter((s) => s.startsWith('.')).map((s) => relative(ROOT, resolve(dirname(file), s)));
}

const violations = (dir: string, allowed: (target: string, file: string) => boolean): string[] =>
  files(join(ROOT, dir)).flatMap((file) =>
    relativeImports(file)
      .filter((target) => !allowed(target, relative(ROOT, file)))
      .map((target) => `${relative(ROOT, file)} → ${target}`),
  );

/**
 * The library's public entry points (package.json `exports`: `./dist/x.js` is built from `src/x.ts`), as import
 * targets; an adapter's own entry point is not one for the other adapters.
 */
const PUBLIC: readonly string[] = Object.values(
  (JSON.parse(readFileSync(join(ROOT, 'packages/idem/package.json'), 'utf8')) as { exports: Record<string, unknown> })
    .exports,
)
  .map((target) => (target as { import?: { default?: string } }).import?.default)
  .filter((path): path is string => typeof path === 'string' && path.startsWith('./dist/'))
  .map((path) => `${LIB}/${path.slice('./dist/'.length)}`)
  .filter((path) => !path.startsWith(`${LIB}/adapters/`));

/** The store folders (stores/shared/ holds what they share, and is not one). */
const STORES: readonly string[] = readdirSync(join(ROOT, LIB, 'stores'), { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && entry.name !== 'shared')
  .map((entry) => entry.name);

/** What the Node-based adapters share: adapters/shared.ts and adapters/node/. */
const nodeLayer = (target: string): boolean =>
  target === `${LIB}/adapters/shared.js` || target.startsWith(`${LIB}/adapters/node/`);

describe('architecture', () => {
  it('core imports nothing of ours outside core', () => {
    expect(violations(`${LIB}/core`, (target) => target.startsWith(`${LIB}/core/`))).toEqual([]);
  });

  it('stores import only core, the contract (through stores/contract.ts), stores/shared/, and their own folder', () => {
    const ownFolder = (target: string, file: string) => target.startsWith(dirname(file) + '/');
    const contract = `${LIB}/core/record.js`;
    expect(
      violations(
        `${LIB}/stores`,
        (t, f) =>
          (t.startsWith(`${LIB}/core/`) && (t !== contract || f === `${LIB}/stores/contract.ts`)) ||
          t === `${LIB}/stores/contract.js` ||
          t.startsWith(`${LIB}/stores/shared/`) ||
          ownFolder(t, f),
      ),
    ).toEqual([]);
  });

  it('every store folder has the template: index.ts, <name>-store.ts, <name>-options.ts, and schema.ts', () => {
    const missing = STORES.flatMap((name) =>
      ['index.ts', `${name}-store.ts`, `${name}-options.ts`, ...(name === 'memory' ? [] : ['schema.ts'])]
        .filter((file) => !existsSync(join(ROOT, LIB, 'stores', name, file)))
        .map((file) => `${name}/${file}`),
    );
    expect(missing).toEqual([]);
    expect(STORES).toEqual(expect.arrayContaining(['memory', 'sqlite', 'postgres', 'mysql', 'redis', 'dynamodb']));
  });

  it("a store's index.ts declares its factory alone; its <name>-store.ts one class", () => {
    const declared = (file: string): string[] =>
      [
        ...readFileSync(file, 'utf8').matchAll(/^(?:export )?(?:async )?(function|class|const|let|var|enum) (\w+)/gm),
      ].map((m) => `${m[1]} ${m[2]}`);
    const factory = (name: string) => `function ${name.replace(/-(\w)/g, (_, c: string) => c.toUpperCase())}Store`;
    const stray = STORES.flatMap((name) => {
      const folder = join(ROOT, LIB, 'stores', name);
      const index = declared(join(folder, 'index.ts')).filter((d) => d !== factory(name));
      const classes = declared(join(folder, `${name}-store.ts`)).filter((d) => d.startsWith('class '));
      return [
        ...index.map((d) => `${name}/index.ts: ${d}`),
        ...(classes.length === 1 ? [] : [`${name}: ${classes.join(', ')}`]),
      ];
    });
    expect(stray).toEqual([]);
  });

  it('http imports only core and itself', () => {
    expect(violations(`${LIB}/http`, (t) => t.startsWith(`${LIB}/core/`) || t.startsWith(`${LIB}/http/`))).toEqual([]);
  });

  it('adapters import the library only through its public entry points, besides the Node layer they share', () => {
    const ownFolder = (target: string, file: string) => target.startsWith(dirname(file) + '/');
    expect(violations(`${LIB}/adapters`, (t, f) => PUBLIC.includes(t) || nodeLayer(t) || ownFolder(t, f))).toEqual([]);
  });

  it('the Node layer the adapters share (shared.ts, node/) is itself built on public entry points only', () => {
    const inLayer = (file: string) => nodeLayer(file.replace(/\.ts$/, '.js'));
    expect(violations(`${LIB}/adapters`, (t, f) => !inLayer(f) || PUBLIC.includes(t) || nodeLayer(t))).toEqual([]);
  });

  it('the Koa adapter, written as a third party would, imports public entry points and nothing else of ours', () => {
    const ownFolder = (target: string) => target.startsWith(`${LIB}/adapters/koa/`);
    expect(violations(`${LIB}/adapters/koa`, (t) => PUBLIC.includes(t) || ownFolder(t))).toEqual([]);
    expect(files(join(ROOT, `${LIB}/adapters/koa`)).length).toBeGreaterThan(0);
  });

  it('reads the public entry points from package.json exports', () => {
    expect(PUBLIC).toEqual(expect.arrayContaining([`${LIB}/index.js`, `${LIB}/http/index.js`]));
  });

  it('the demo reaches the library only through its package name', () => {
    expect(violations('apps/demo', (t) => t.startsWith('apps/demo/'))).toEqual([]);
  });
});
