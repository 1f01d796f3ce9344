/**
 * Imports flow one way (CONVENTIONS.md): core imports nothing of ours; stores, http and adapters import core
 * (and http, for adapters); no store imports another (what stores share lives in stores/shared/), nor an adapter
 * another (what Node adapters share lives in adapters/shared.ts and adapters/node/); demo reaches the library only
 * by its package name.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
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

describe('architecture', () => {
  it('core imports nothing of ours outside core', () => {
    expect(violations(`${LIB}/core`, (target) => target.startsWith(`${LIB}/core/`))).toEqual([]);
  });

  it('stores import only core, the contract, what they share (stores/shared/), and their own folder', () => {
    const ownFolder = (target: string, file: string) => target.startsWith(dirname(file) + '/');
    expect(
      violations(
        `${LIB}/stores`,
        (t, f) =>
          t.startsWith(`${LIB}/core/`) ||
          t === `${LIB}/stores/contract.js` ||
          t.startsWith(`${LIB}/stores/shared/`) ||
          ownFolder(t, f),
      ),
    ).toEqual([]);
  });

  it('http imports only core and itself', () => {
    expect(violations(`${LIB}/http`, (t) => t.startsWith(`${LIB}/core/`) || t.startsWith(`${LIB}/http/`))).toEqual([]);
  });

  it('adapters import only core, http, what Node adapters share (shared.ts, node/) and their own folder', () => {
    const shared = (t: string) => t === `${LIB}/adapters/shared.js` || t.startsWith(`${LIB}/adapters/node/`);
    const ownFolder = (target: string, file: string) => target.startsWith(dirname(file) + '/');
    expect(
      violations(
        `${LIB}/adapters`,
        (t, f) => t.startsWith(`${LIB}/core/`) || t.startsWith(`${LIB}/http/`) || shared(t) || ownFolder(t, f),
      ),
    ).toEqual([]);
  });

  it('the demo reaches the library only through its package name', () => {
    expect(violations('apps/demo', (t) => t.startsWith('apps/demo/'))).toEqual([]);
  });
});
