/**
 * @module The store conformance suite's cases as its source lists them, with no side effect on import (discover.ts
 * installs runtimes as it loads): the runtimes test and the Durable Objects test expect exactly these.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The store conformance suite's cases, counted in its source so that a new case is expected without an edit: the
 * case groups in the order `describeStoreConformance` calls them, each group's cases in the order of its file.
 */
export function storeConformanceCases(): string[] {
  const testing = join(ROOT, 'packages/idem/src/testing');
  const suite = readFileSync(join(testing, 'index.ts'), 'utf8');
  const files = new Map(
    [...suite.matchAll(/^import \{ (\w+) \} from '\.\/store-cases\/([\w-]+)\.js';$/gm)].map((m) => [m[1], m[2]]),
  );
  return [...suite.matchAll(/^ {4}(\w+)\(kit\);$/gm)].flatMap((call) => {
    const source = readFileSync(join(testing, 'store-cases', `${files.get(call[1]) ?? ''}.ts`), 'utf8');
    return [...source.matchAll(/^ {2}it\('([^']+)'/gm)].map((m) => m[1] ?? '');
  });
}
