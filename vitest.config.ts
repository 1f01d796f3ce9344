import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = (path: string) => fileURLToPath(new URL(`./src/${path}`, import.meta.url));

export default defineConfig({
  resolve: {
    alias: [
      { find: /^idem$/, replacement: src('index.ts') },
      { find: /^idem\/http$/, replacement: src('http/index.ts') },
      { find: /^idem\/testing$/, replacement: src('testing/index.ts') },
      { find: /^idem\/client$/, replacement: src('client/index.ts') },
      { find: /^idem\/stores\/(.+)$/, replacement: src('stores/$1/index.ts') },
      { find: /^idem\/(express|fastify|hono|nest)$/, replacement: src('adapters/$1/index.ts') },
      { find: /^idem\/(otel|prometheus)$/, replacement: src('$1/index.ts') },
    ],
  },
  test: {
    include: ['src/**/*.test.ts', 'demo/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
