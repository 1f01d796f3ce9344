/**
 * examples/hono: one Hono app behind `idem/hono` (app.js), served on Node through @hono/node-server (node.js), on
 * Bun (bun.js) and on Deno (deno.js), unchanged. Installed from the packed tarball, driven to a replay on each;
 * the work is counted in the app's own list of charges. Bun and Deno are the ones installed under test/runtimes.
 */
import { describe, expect, it } from 'vitest';
import { REPLAYED, runToReplay, useExample } from './kit.js';
import { serveCommand } from './runtimes.js';

const example = useExample('hono');

describe('examples/hono: the same app on Node, Bun and Deno', () => {
  it.each(['node', 'bun', 'deno'] as const)(
    '%s',
    async (runtime) => {
      const [command, args] = serveCommand(runtime, `${runtime}.js`);
      const replay = await runToReplay(example(), command, args, {
        headers: { authorization: 'Bearer acct_carol' },
        executions: async (base) =>
          (
            (await (await fetch(`${base}/v1/charges`, { headers: { authorization: 'Bearer acct_carol' } })).json()) as {
              count: number;
            }
          ).count,
      });
      expect(replay).toEqual(REPLAYED);
    },
    120_000,
  );
});
