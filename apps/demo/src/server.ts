/**
 * @module The payments demo server: `npm start` (or `idem serve`). Configuration from the environment and flags.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from './app.js';
import {
  badConfig,
  checkServable,
  ConfigError,
  isLoopback,
  LOOPBACK_HOSTS,
  loadConfig,
  type DemoConfig,
} from './config.js';
import { createLogger } from './log.js';
import { createMetrics, metricsApp } from './metrics.js';
import { modelRoutes, tripRecorder } from './model.js';
import { serve } from './node.js';
import { staticPages } from './pages.js';
import { openBackend } from './stores.js';

/** The metrics listener holds few connections: a scraper or two. */
const METRICS_MAX_CONNECTIONS = 16;

/**
 * Starts the demo server and resolves once it listens. SIGTERM/SIGINT drain in-flight requests, then close the store.
 * A configuration that must not serve (`checkServable`) or an address that cannot be bound is a `ConfigError`.
 *
 * @example
 * const { url, close } = await startServer(loadConfig(process.env))
 */
export async function startServer(
  config: DemoConfig,
): Promise<{ url: string; metricsUrl: string | undefined; close: () => Promise<void> }> {
  checkServable(config);
  // Observability (docs/OPERATIONS.md): counters at /metrics (their own port) and one JSON log line per idempotency event.
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
  const limits = { headersTimeoutMs: config.headersTimeoutMs, requestTimeoutMs: config.requestTimeoutMs };
  const allowedHosts = config.allowedHosts ?? [...LOOPBACK_HOSTS, ...(isLoopback(config.host) ? [config.host] : [])];
  const server = serve(app, {
    ...limits,
    allowedHosts,
    maxConnections: config.maxConnections,
    maxConnectionsPerAddress: config.maxConnectionsPerAddress,
    firstByteTimeoutMs: config.firstByteTimeoutMs,
    onDrop: () => metrics.onConnectionDropped(),
    onOverShare: () => metrics.onConnectionOverShare(),
    onSilent: () => metrics.onConnectionSilent(),
    onStalled: () => metrics.onConnectionStalled(),
    onEvicted: () => metrics.onConnectionEvicted(),
  });
  const scrape =
    config.metricsPort === undefined
      ? undefined
      : serve(metricsApp(metrics), {
          ...limits,
          allowedHosts: config.allowedHosts ?? [
            ...LOOPBACK_HOSTS,
            ...(isLoopback(config.metricsHost) ? [config.metricsHost] : []),
          ],
          maxConnections: METRICS_MAX_CONNECTIONS,
        });
  let url: string;
  let metricsUrl: string | undefined;
  // Lab mode: what a stopped process left running is marked interrupted once this one holds the port (a second
  // process that cannot listen marks nothing); lab requests arriving first wait for it.
  let bound: (ok: boolean) => void = () => {};
  const listening = new Promise<boolean>((resolve) => (bound = resolve));
  const marked = config.lab
    ? app.recover?.(listening.then((ok) => (ok ? undefined : Promise.reject(new Error('not listening')))))
    : undefined;
  marked?.catch((error: Error) => {
    if (error.message !== 'not listening') console.error(`idem demo: lab history not recovered: ${error.message}`);
  });
  try {
    url = await listen(server, config.port, config.host, 'HOST/PORT');
    bound(true);
    if (scrape)
      metricsUrl = `${await listen(scrape, config.metricsPort ?? 0, config.metricsHost, 'IDEM_METRICS_HOST/IDEM_METRICS_PORT')}/metrics`;
  } catch (error) {
    bound(false);
    server.close();
    scrape?.close();
    await backend.close();
    throw error;
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      server.close();
      server.closeIdleConnections();
      scrape?.close();
      scrape?.closeAllConnections();
      const deadline = Date.now() + 10_000;
      while (server.inFlight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      server.closeAllConnections();
      await backend.close();
    })());
  const extras = [
    `store: ${backend.description}`,
    ...(config.lab ? ['lab mode'] : []),
    ...(metricsUrl ? [`metrics: ${metricsUrl}`] : []),
  ];
  console.log(`idem demo listening on ${url} — ${extras.join(' — ')}`);
  return { url, metricsUrl, close };
}

/** Listens and resolves with the base URL; an address that cannot be bound (in use, not local, no permission) is a ConfigError. */
async function listen(server: Server, port: number, host: string, names: string): Promise<string> {
  server.listen(port, host);
  try {
    await once(server, 'listening');
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    if (code === 'EADDRINUSE' || code === 'EADDRNOTAVAIL' || code === 'EACCES' || code === 'ENOTFOUND') {
      throw new ConfigError(`${names}: cannot listen on ${host}:${port} (${code}).`);
    }
    throw new Error(message, { cause: error });
  }
  const { port: bound } = server.address() as AddressInfo;
  return `http://${host.includes(':') ? `[${host}]` : host}:${bound}`;
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
