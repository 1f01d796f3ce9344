import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = (path: string) => fileURLToPath(new URL(`./packages/idem/src/${path}`, import.meta.url));

/** Pure unit tests: no service, no child process, no browser. `npm run test:unit` runs only these. */
const UNIT = [
  'packages/idem/src/core/**/*.test.ts',
  'packages/idem/src/http/**/*.test.ts',
  'packages/idem/src/client/**/*.test.ts',
  'packages/idem/src/adapters/**/*.test.ts',
  'packages/idem/src/stores/memory/**/*.test.ts',
  'apps/demo/src/**/*.test.ts',
  'test/architecture.test.ts',
  'test/cli/layering.test.ts',
  'test/chaos/checker.test.ts',
];

export default defineConfig({
  resolve: {
    // Tests run against the library's sources; the pack test (test/pack) checks the built package as users get it.
    alias: [
      { find: /^idem$/, replacement: src('index.ts') },
      { find: /^idem\/http$/, replacement: src('http/index.ts') },
      { find: /^idem\/testing$/, replacement: src('testing/index.ts') },
      { find: /^idem\/client$/, replacement: src('client/index.ts') },
      { find: /^idem\/stores\/(.+)$/, replacement: src('stores/$1/index.ts') },
      { find: /^idem\/(express|fastify|hono|nest)$/, replacement: src('adapters/$1/index.ts') },
      { find: /^idem\/(otel|prometheus)$/, replacement: src('$1/index.ts') },
      // What tests share (test/fixtures, test/services.ts), by one path from anywhere in the tree.
      { find: /^#test\/(.+)$/, replacement: fileURLToPath(new URL('./test/$1', import.meta.url)) },
    ],
  },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['packages/idem/src/**/*.test.ts', 'apps/demo/src/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/dist/**', ...UNIT],
        },
      },
    ],
  },
});
