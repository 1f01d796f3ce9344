/**
 * @module Prometheus metrics for the demo server: `idem/prometheus` on the demo's registry, fed by the engine's
 * `onEvent` hook and served at `/metrics`, plus the demo's own listener counter.
 */
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import type { IdempotencyEvent } from 'idem';
import { problem } from 'idem/http';
import { prometheusMetrics } from 'idem/prometheus';
import type { App } from './app.js';

/** The demo's metrics: one registry per server, so two servers in one process never share a counter. */
export interface DemoMetrics {
  readonly registry: Registry;
  /** Pass to the engine as `onEvent` (or call from yours). Never throws. */
  onEvent(event: IdempotencyEvent): void;
  /** Counts a connection the API listener closed at once because it held `maxConnections` already. */
  onConnectionDropped(): void;
  /** Counts a connection the API listener closed at once because its address held its share of the cap. */
  onConnectionOverShare(): void;
  /** Counts a connection the API listener closed because it sent nothing within the first-byte timeout. */
  onConnectionSilent(): void;
  /** Counts a connection the API listener closed because its answers did not drain within the request timeout. */
  onConnectionStalled(): void;
  /** Counts a connection the API listener evicted, at the cap, for an address holding less than its share. */
  onConnectionEvicted(): void;
  /** The Prometheus text exposition. */
  response(): Promise<Response>;
}

/**
 * Registers the library's metrics (`idem_requests_total{decision}`, `idem_executions_total{outcome}`, the store
 * and execution histograms…: see `idem/prometheus`) and the demo's own. Every labelled series starts at 0.
 *
 * | metric | labels | from |
 * |---|---|---|
 * | every `idem/prometheus` metric | | the engine's and the HTTP layer's events |
 * | `idem_replays_total` | | `replayed` — the same as `idem_requests_total{decision="replayed"}` |
 * | `idem_in_flight_conflicts_total` | | `in_flight` — the same as `idem_requests_total{decision="in_flight"}` |
 * | `idem_fingerprint_mismatches_total` | | `mismatch` — the same as `idem_requests_total{decision="mismatch"}` |
 * | `idem_http_connections_dropped_total` | | (the listener) a connection closed unanswered: `maxConnections` reached |
 * | `idem_http_connections_over_share_total` | | (the listener) a connection closed unanswered: its address held its share |
 * | `idem_http_connections_silent_total` | | (the listener) a connection closed unanswered: no byte within the first-byte timeout |
 * | `idem_http_connections_stalled_total` | | (the listener) a connection closed: its answers did not drain within the request timeout |
 * | `idem_http_connections_evicted_total` | | (the listener) a connection closed at the cap for an address under its share |
 *
 * The three aliases keep the names docs/OPERATIONS.md documented before `idem_requests_total`, for dashboards
 * built on them.
 *
 * @example
 * const metrics = createMetrics()
 * const app = createApp({ ...options, onEvent: metrics.onEvent }); const scrape = metricsApp(metrics)
 */
export function createMetrics({ defaultMetrics = true }: { readonly defaultMetrics?: boolean } = {}): DemoMetrics {
  const registry = new Registry();
  if (defaultMetrics) collectDefaultMetrics({ register: registry });
  const idem = prometheusMetrics({ registry });
  const registers = [registry];

  const counter = (name: string, help: string) => new Counter({ name, help, registers });
  const replays = counter('idem_replays_total', 'Retries answered with the stored response.');
  const conflicts = counter(
    'idem_in_flight_conflicts_total',
    'Duplicates that arrived while the first attempt was running (answered 409).',
  );
  const mismatches = counter(
    'idem_fingerprint_mismatches_total',
    'Keys reused with another payload (answered 400 or 422).',
  );
  const dropped = counter(
    'idem_http_connections_dropped_total',
    'Connections the API listener closed unanswered because it already held maxConnections.',
  );
  const overShare = counter(
    'idem_http_connections_over_share_total',
    'Connections the API listener closed unanswered because their address already held half of IDEM_MAX_CONNECTIONS (or its share, IDEM_MAX_CONNECTIONS_PER_ADDRESS, if more).',
  );
  const silent = counter(
    'idem_http_connections_silent_total',
    'Connections the API listener closed unanswered because they sent no byte within IDEM_FIRST_BYTE_TIMEOUT_MS.',
  );
  const stalled = counter(
    'idem_http_connections_stalled_total',
    'Connections the API listener closed because their answers did not drain (the client does not read) within IDEM_REQUEST_TIMEOUT_MS, or for 5 s once over 128 KiB; or because they pipelined more than 32 requests, or their address did in the last 10 s.',
  );
  const evicted = counter(
    'idem_http_connections_evicted_total',
    'Connections the API listener closed, at IDEM_MAX_CONNECTIONS, to admit an address holding less than its share.',
  );

  const onEvent = (event: IdempotencyEvent): void => {
    idem.onEvent(event);
    try {
      if (event.type === 'replayed') replays.inc();
      else if (event.type === 'in_flight') conflicts.inc();
      else if (event.type === 'mismatch') mismatches.inc();
    } catch {
      // Metrics must never change what happens to a payment.
    }
  };

  return {
    registry,
    onEvent,
    onConnectionDropped: () => dropped.inc(),
    onConnectionOverShare: () => overShare.inc(),
    onConnectionSilent: () => silent.inc(),
    onConnectionStalled: () => stalled.inc(),
    onConnectionEvicted: () => evicted.inc(),
    response: async () =>
      new Response(await registry.metrics(), {
        status: 200,
        headers: { 'content-type': registry.contentType, 'cache-control': 'no-store' },
      }),
  };
}

/**
 * The metrics listener's app: `GET /metrics` and nothing else. It is served on its own port (`IDEM_METRICS_PORT`,
 * loopback by default), never on the API's: a proxy that exposes the API does not expose the counters, no scrape
 * secret has to be shared, and a scrape still gets through while the API's connection cap is full.
 *
 * @example
 * const scrape = serve(metricsApp(metrics)); scrape.listen(9464, '127.0.0.1')
 */
export function metricsApp(metrics: DemoMetrics): App {
  const app = async (request: Request): Promise<Response> => {
    const { pathname } = new URL(request.url);
    if (pathname !== '/metrics')
      return problem({ status: 404, slug: 'not-found', title: 'Not found', detail: `No route for ${pathname}.` });
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return problem({
        status: 405,
        slug: 'method-not-allowed',
        title: 'Method not allowed',
        headers: { allow: 'GET' },
      });
    }
    return metrics.response();
  };
  return Object.assign(app, { dropsAfterCommit: () => false, admit: () => 'no-body' as const });
}
