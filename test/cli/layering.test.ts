/**
 * The CLI's one exception to "src never imports demo": only `src/cli/demo.ts` reaches into `demo/`, and only by a
 * dynamic `import()` (or a type-only import, which leaves nothing at runtime), so the library's entry points never
 * load the demo. The rest of the CLI imports core and its own folder.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './helpers.js';

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return path.endsWith('.ts') && !path.endsWith('.test.ts') ? [path] : [];
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
  for (const m of text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g)) found.push({ kind: 'dynamic', target: at(m[1] as string) });
  return found;
}

describe('layering of the CLI', () => {
  it('src/ reaches demo/ only from src/cli/demo.ts, by dynamic or type-only import', () => {
    const reaches = sources(join(ROOT, 'src')).flatMap((file) =>
      imports(file)
        .filter(({ target }) => target.startsWith('demo/'))
        .map(({ kind, target }) => `${relative(ROOT, file)} → ${target} (${kind})`),
    );
    expect(reaches.filter((line) => !/^src\/cli\/demo\.ts → demo\/\S+ \((dynamic|type)\)$/.test(line))).toEqual([]);
    expect(reaches.filter((line) => line.endsWith('(dynamic)')).sort()).toEqual([
      'src/cli/demo.ts → demo/config.js (dynamic)',
      'src/cli/demo.ts → demo/config.js (dynamic)',
      'src/cli/demo.ts → demo/server.js (dynamic)',
      'src/cli/demo.ts → demo/stores.js (dynamic)',
    ]);
  });

  it('the rest of the CLI imports only core and its own folder', () => {
    const outside = sources(join(ROOT, 'src/cli'))
      .filter((file) => !file.endsWith('/demo.ts'))
      .flatMap((file) => imports(file).map(({ target }) => `${relative(ROOT, file)} → ${target}`))
      .filter((line) => !/ → src\/(core|cli)\//.test(line));
    expect(outside).toEqual([]);
  });

  it('no library entry point imports the CLI', () => {
    const intoCli = sources(join(ROOT, 'src'))
      .filter((file) => !relative(ROOT, file).startsWith('src/cli/'))
      .flatMap((file) => imports(file).map(({ target }) => `${relative(ROOT, file)} → ${target}`))
      .filter((line) => / → src\/cli\//.test(line));
    expect(intoCli).toEqual([]);
  });
});
