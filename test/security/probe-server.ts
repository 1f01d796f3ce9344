/**
 * What the probe's credential tests share: a local HTTP server for a `describe` block, and the flags that skip
 * every check but the first.
 */
import type { RequestListener } from 'node:http';
import { serveNode, type ServedApp } from 'idem/testing';
import { afterAll, beforeAll } from 'vitest';

/** `--skip` for every check after the first request. */
export const ONLY_FIRST = ['replay', 'key-order', 'mismatch', 'concurrent', 'missing-key', 'malformed-key'].flatMap(
  (id) => ['--skip', id],
);

/**
 * Serves `answer` on a free loopback port while the calling `describe` block runs; `base` is its
 * `http://127.0.0.1:PORT` once the block's tests start.
 *
 * @example
 * const server = serving((req, res) => res.end('1')) // then `${server.base}/count` in a test
 */
export function serving(answer: RequestListener): { readonly base: string } {
  let served: ServedApp | undefined;
  beforeAll(async () => {
    served = await serveNode(answer);
  });
  afterAll(() => served?.close());
  return {
    get base() {
      return served?.url ?? '';
    },
  };
}
