/**
 * @module The payments demo server: `npm start` (or `idem serve`). Configuration from the environment and flags.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createApp } from './app.js';
import { badConfig, loadConfig, type DemoConfig } from './config.js';
import { createLogger } from './log.js';
import { createMetrics, withMetrics } from './metrics.js';
import { modelRoutes, tripRecorder } from './model.js';
import { serve } from './node.js';
import { staticPages } from './pages.js';
import { openBackend } from './stores.js';

/**
 * Starts the demo server and resolves once it listens. SIGTERM/SIGINT drain in-flight requests, then close the store.
 *
 * @example
 * const { url, close } = await startServer(loadConfig(process.env))
 */
export async function startServer(config: DemoConfig): Promise<{ url: string; close: () => Promise<void> }> {
  // Observability (docs/OPERATIONS.md): counters at /metrics and one JSON log line per idempotency event.
  const metrics = createMetrics();
  const log = createLogger();
  // The model page shows each operation's raw round trips: the recorder files them under the request that caused them.
  const trips = tripRecorder();
  const backend = await openBackend(config, { onRoundTrip: trips.onRoundTrip });
  const app = createApp({
    ...config,
    ...backend,
    onEvent: (event) => {
      metrics.onEvent(event);
      log.onEvent(event);
    },
    pages: staticPages(),
    ...(config.lab ? { model: modelRoutes({ store: backend.store, trips, ttlMs: config.ttlMs }) } : {}),
  });
  const server = serve(withMetrics(app, metrics));
  server.listen(config.port, config.host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const url = `http://${config.host}:${port}`;
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      server.close();
      server.closeIdleConnections();
      const deadline = Date.now() + 10_000;
      while (server.inFlight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      server.closeAllConnections();
      await backend.close();
    })());
  console.log(`idem demo listening on ${url} — store: ${backend.description}${config.lab ? ' — lab mode' : ''}`);
  return { url, close };
}

async function main(): Promise<void> {
  let close: () => Promise<void>;
  try {
    // A bad setting — in the environment, a flag, or a store URL that openBackend refuses — exits 2 with its message.
    ({ close } = await startServer(loadConfig(process.env, process.argv.slice(2))));
  } catch (error) {
    const message = badConfig(error);
    if (message !== undefined) {
      console.error(`idem demo: ${message}`);
      process.exit(2);
    }
    throw error;
  }
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      console.log(`idem demo: ${signal}, draining`);
      close().then(
        () => process.exit(0),
        (error: unknown) => {
          console.error(error);
          process.exit(1);
        },
      );
    });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
