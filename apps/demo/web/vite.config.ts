/**
 * Builds the lab (`index.html`) and model (`model.html`) pages into `apps/demo/dist/public`, which src/pages.ts serves.
 * Run by `npm run build`.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  root: here('.'),
  // The lab's Auto-retry runs idem/client itself: bundled from its source, as the tests and typecheck resolve it.
  resolve: { alias: { 'idem/client': here('../../../packages/idem/src/client/index.ts') } },
  base: '/',
  publicDir: false,
  logLevel: 'warn',
  build: {
    outDir: here('../dist/public'),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    // No inlined data: URLs beyond the favicon; the CSP allows same-origin files.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    rolldownOptions: {
      input: { lab: here('index.html'), model: here('model.html') },
    },
  },
});
