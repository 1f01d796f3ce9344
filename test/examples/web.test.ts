/**
 * examples/web: one `idem/http` handler (charges.js) served by Node through @hono/node-server (node.js), by Bun
 * (`Bun.serve`, bun.js), by Deno (`Deno.serve`, deno.js) and by workerd (`export default { fetch }`, worker.js,
 * bundled as wrangler would: esbuild with the `workerd` condition). Installed from the packed tarball, each is
 * driven to a replay; the work is counted in the example's own list of charges (`GET /v1/charges`). The README's
 * quick start quotes these files (test/examples/docs.test.ts). Bun, Deno and workerd are the ones installed under
 * test/runtimes.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { REPLAYED, runToReplay, useExample } from './kit.js';
import { runtimeBinary, serveCommand } from './runtimes.js';

const example = useExample('web');

/** Charge, retry, reuse: counted in the example's own `GET /v1/charges`. */
const replayOn = (command: string, args: string[], control = false) =>
  runToReplay(example(), command, args, {
    control,
    executions: async (base) => ((await (await fetch(`${base}/v1/charges`)).json()) as { count: number }).count,
  });

/** workerd's config: the bundle as the only module, one socket on a free port. */
const workerdConfig = [
  'using Workerd = import "/workerd/workerd.capnp";',
  'const config :Workerd.Config = (services = [(name = "main", worker = .worker)],',
  '  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "main")]);',
  'const worker :Workerd.Worker = (compatibilityDate = "2026-01-01",',
  '  modules = [(name = "worker.js", esModule = embed "bundle/worker.js")]);',
  '',
].join('\n');

describe('examples/web: one idem/http handler on every runtime', () => {
  it.each([
    ['Node, @hono/node-server (node.js)', 'node'],
    ['Bun, Bun.serve (bun.js)', 'bun'],
    ['Deno, Deno.serve (deno.js)', 'deno'],
  ] as const)(
    '%s',
    async (_name, runtime) => {
      expect(await replayOn(...serveCommand(runtime, `${runtime}.js`))).toEqual(REPLAYED);
    },
    120_000,
  );

  it('workerd, export default { fetch } (worker.js, bundled as wrangler bundles it)', async () => {
    await build({
      entryPoints: [join(example().dir, 'worker.js')],
      bundle: true,
      format: 'esm',
      platform: 'neutral',
      conditions: ['workerd', 'worker', 'browser', 'import'],
      mainFields: ['module', 'main'],
      outfile: join(example().dir, 'bundle/worker.js'),
      logLevel: 'error',
    });
    writeFileSync(join(example().dir, 'config.capnp'), workerdConfig);
    const workerd = runtimeBinary('workerd');
    expect(await replayOn(workerd, ['serve', 'config.capnp', '--control-fd=3'], true)).toEqual(REPLAYED);
  }, 120_000);
});
