/**
 * @module For tests (not part of the library): modules evaluated afresh as on a runtime without `node:crypto`
 * (Workers without `nodejs_compat`), where the fingerprint is WebCrypto's.
 */
import { vi } from 'vitest';

/**
 * Runs `load` (its `import()`s) with the module cache emptied and `process.getBuiltinModule` taken away, so every
 * module it loads finds no `node:crypto`; both are put back after.
 *
 * @example
 * const web = await withoutNodeCrypto(() => import('./fingerprint.js'))
 */
export async function withoutNodeCrypto<T>(load: () => Promise<T>): Promise<T> {
  const saved: unknown = Reflect.get(process, 'getBuiltinModule');
  vi.resetModules();
  Reflect.set(process, 'getBuiltinModule', undefined);
  try {
    return await load();
  } finally {
    Reflect.set(process, 'getBuiltinModule', saved);
    vi.resetModules();
  }
}
