/**
 * The `idem` CLI belongs to the library (packages/idem) and never reaches the demo (apps/demo), which owns
 * `serve`. It opens stores by dynamic import from one file, so a missing optional driver costs only its own URL.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './helpers.js';

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return path.endsWith('.ts') && !/\.test(-kit)?\.ts$/.test(path) ? [path] : []; // tests and their kits are not the library
  });
}

/** Every relative import of a file: how it is imported, and the repo path it points at. */
function imports(file: string): Array<{ kind: 'static' | 'type' | 'dynamic'; target: string }> {
  const text = readFileSync(file, 'utf8');
  const at = (specifier: string) => relative(ROOT, resolve(dirname(file), specifier));
  const found: Array<{ kind: 'static' | 'type' | 'dynamic'; target: string }> = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(import|export)(\s+type)?[^'"]*?from\s+['"](\.[^'"]+)['"]/g)) {
    found.push({ kind: m[2] ? 'type' : 'static', target: at(m[3] as string) });
  }
  for (const m of text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g))
    found.push({ kind: 'dynamic', target: at(m[1] as string) });
  return found;
}

const LIB = 'packages/idem/src';

describe('layering of the CLI', () => {
  it('the library never reaches the demo (apps/): the CLI ships without it', () => {
    const reaches = sources(join(ROOT, LIB)).flatMap((file) =>
      imports(file)
        .filter(({ target }) => !target.startsWith(`${LIB}/`))
        .map(({ kind, target }) => `${relative(ROOT, file)} → ${target} (${kind})`),
    );
    expect(reaches).toEqual([]);
  });

  it('the CLI imports core and its own folder; stores only from open.ts, by dynamic import', () => {
    const outside = sources(join(ROOT, LIB, 'cli'))
      .flatMap((file) => imports(file).map(({ kind, target }) => `${relative(ROOT, file)} → ${target} (${kind})`))
      .filter((line) => !new RegExp(` → ${LIB}/(core|cli)/`).test(line));
    expect(outside.sort()).toEqual([
      `${LIB}/cli/open.ts → ${LIB}/stores/dynamodb/index.js (dynamic)`,
      `${LIB}/cli/open.ts → ${LIB}/stores/memory/index.js (dynamic)`,
      `${LIB}/cli/open.ts → ${LIB}/stores/mysql/index.js (dynamic)`,
      `${LIB}/cli/open.ts → ${LIB}/stores/postgres/index.js (dynamic)`,
      `${LIB}/cli/open.ts → ${LIB}/stores/redis/index.js (dynamic)`,
      `${LIB}/cli/open.ts → ${LIB}/stores/sqlite/index.js (dynamic)`,
    ]);
  });

  it('no library entry point imports the CLI', () => {
    const intoCli = sources(join(ROOT, LIB))
      .filter((file) => !relative(ROOT, file).startsWith(`${LIB}/cli/`))
      .flatMap((file) => imports(file).map(({ target }) => `${relative(ROOT, file)} → ${target}`))
      .filter((line) => new RegExp(` → ${LIB}/cli/`).test(line));
    expect(intoCli).toEqual([]);
  });
});
