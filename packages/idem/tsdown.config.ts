/**
 * The package build: ESM and CommonJS from one source, with types for each (`.d.ts` beside `.js`, `.d.cts`
 * beside `.cjs`), no source maps (the sources are not shipped), and the `idem` bin as ESM only (it uses top-level
 * await). tsdown 0.21.10 is the last release that runs on Node 20.19; later ones want Node 22.
 *
 * The entries are read from package.json `exports`: a subpath `./x` whose import is `./dist/x/index.js` is built
 * from `src/x/index.ts`. Adding a subpath is one edit there (and its `typesVersions` line, for node10 resolution).
 * The SQL stores' `schema.sql` files are printed into the build afterwards by `scripts/schema-files.mjs`.
 */
import { readFileSync } from 'node:fs';
import { defineConfig } from 'tsdown';

interface Conditional {
  readonly import: { readonly default: string };
}
const { exports } = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8')) as {
  exports: Record<string, string | Conditional>;
};

const entry: Record<string, string> = {};
for (const target of Object.values(exports)) {
  if (typeof target === 'string') continue;
  const out = /^\.\/dist\/(.+)\.js$/.exec(target.import.default)?.[1];
  if (!out) throw new Error(`package.json exports: ${target.import.default} is not ./dist/<path>.js`);
  entry[out] = `src/${out}.ts`;
}

export default defineConfig({
  platform: 'node',
  target: 'node20.19',
  sourcemap: false,
  tsconfig: 'tsconfig.json',
  checks: { legacyCjs: false },
  fixedExtension: false,
  entry,
  // The `idem` bin is ESM only (top-level await) and shares the library's chunks.
  format: { esm: { entry: { ...entry, 'cli/index': 'src/cli/index.ts' } }, cjs: {} },
  dts: true,
  // `import.meta.url` in the CommonJS build.
  shims: true,
});
