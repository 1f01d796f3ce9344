/**
 * The package build: ESM and CommonJS from one source, with types for each (`.d.ts` beside `.js`, `.d.cts`
 * beside `.cjs`), no source maps (the sources are not shipped), and the `idem` bin as ESM only (it uses top-level
 * await). tsdown 0.21.10 is the last release that runs on Node 20.19; later ones want Node 22.
 */
import { defineConfig } from 'tsdown';

const entry = {
  index: 'src/index.ts',
  'http/index': 'src/http/index.ts',
  'client/index': 'src/client/index.ts',
  'adapters/express/index': 'src/adapters/express/index.ts',
  'adapters/fastify/index': 'src/adapters/fastify/index.ts',
  'adapters/hono/index': 'src/adapters/hono/index.ts',
  'stores/memory/index': 'src/stores/memory/index.ts',
  'stores/sqlite/index': 'src/stores/sqlite/index.ts',
  'stores/postgres/index': 'src/stores/postgres/index.ts',
  'stores/redis/index': 'src/stores/redis/index.ts',
  'stores/dynamodb/index': 'src/stores/dynamodb/index.ts',
  'testing/index': 'src/testing/index.ts',
};

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
  copy: [
    { from: 'src/stores/postgres/schema.sql', to: 'dist/stores/postgres' },
    { from: 'src/stores/sqlite/schema.sql', to: 'dist/stores/sqlite' },
  ],
});
