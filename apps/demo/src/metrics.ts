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

  const replays = new Counter({
    name: 'idem_replays_total',
    help: 'Retries answered with the stored response.',
    registers,
  });
  const conflicts = new Counter({
    name: 'idem_in_flight_conflicts_total',
    help: 'Duplicates that arrived while the first attempt was running (answered 409).',
    registers,
  });
  const mismatches = new Counter({
    name: 'idem_fingerprint_mismatches_total',
    help: 'Keys reused with another payload (answered 400 or 422).',
    registers,
  });
  const dropped = new Counter({
    name: 'idem_http_connections_dropped_total',
    help: 'Connections the API listener closed unanswered because it already held maxConnections.',
    registers,
  });

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
