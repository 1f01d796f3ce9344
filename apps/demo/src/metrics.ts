/**
 * @module Prometheus metrics for the demo server, fed by the engine's `onEvent` hook and served at `/metrics`.
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { IdempotencyEvent, OutcomeKind, StoreOp } from 'idem';
import { problem } from 'idem/http';
import type { App } from './app.js';

const OUTCOMES: readonly OutcomeKind[] = ['succeeded', 'failed-final', 'failed-retryable', 'release'];
const STORE_OPS: readonly StoreOp[] = ['claim', 'complete', 'renew', 'release', 'get'];
/** The fenced writes: the only operations a stale writer can be refused on. */
const FENCED_OPS: readonly StoreOp[] = ['complete', 'renew', 'release'];

/** Store round trips are milliseconds on a LAN and tens of milliseconds across regions. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

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
 * Creates the counters and the latency histogram. Every labelled series starts at 0, so an alert on `rate()`
 * sees the series before the first incident rather than after it.
 *
 * | metric | labels | from event |
 * |---|---|---|
 * | `idem_executions_total` | `outcome` | `executed` — the work ran and its outcome was recorded |
 * | `idem_replays_total` | | `replayed` — a retry got the stored answer |
 * | `idem_in_flight_conflicts_total` | | `in_flight` — a duplicate arrived while the first ran (409) |
 * | `idem_fingerprint_mismatches_total` | | `mismatch` — a key reused with another payload (400/422) |
 * | `idem_takeovers_total` | | `takeover` — a dead attempt's lease was taken over, or a retryable failure re-run |
 * | `idem_leases_lost_total` | | `lease_lost` — a running attempt found its lease taken |
 * | `idem_stale_writes_refused_total` | `op` | `stale_write_refused` — a late writer's fenced write was refused |
 * | `idem_store_errors_total` | `op` | `store_op` with `ok: false` |
 * | `idem_store_op_duration_seconds` | `op` | `store_op` — histogram of the store round trip |
 * | `idem_http_connections_dropped_total` | | (the listener) a connection closed unanswered: `maxConnections` reached |
 *
 * @example
 * const metrics = createMetrics()
 * const app = createApp({ ...options, onEvent: metrics.onEvent }); const scrape = metricsApp(metrics)
 */
export function createMetrics({ defaultMetrics = true }: { readonly defaultMetrics?: boolean } = {}): DemoMetrics {
  const registry = new Registry();
  if (defaultMetrics) collectDefaultMetrics({ register: registry });
  const registers = [registry];

  const executions = new Counter({
    name: 'idem_executions_total',
    help: 'Requests whose work ran and whose outcome was recorded, by outcome.',
    labelNames: ['outcome'] as const,
    registers,
  });
  const replays = new Counter({ name: 'idem_replays_total', help: 'Retries answered with the stored response.', registers });
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
  const takeovers = new Counter({
    name: 'idem_takeovers_total',
    help: 'Claims that took over a dead lease or re-ran a retryable failure.',
    registers,
  });
  const leasesLost = new Counter({ name: 'idem_leases_lost_total', help: 'Running attempts that found their lease taken over.', registers });
  const staleWrites = new Counter({
    name: 'idem_stale_writes_refused_total',
    help: 'Fenced writes refused because the token no longer matched (a late writer lost), by store operation.',
    labelNames: ['op'] as const,
    registers,
  });
  const storeErrors = new Counter({
    name: 'idem_store_errors_total',
    help: 'Store calls that failed (the request was answered 503 and the work did not run), by operation.',
    labelNames: ['op'] as const,
    registers,
  });
  const latency = new Histogram({
    name: 'idem_store_op_duration_seconds',
    help: 'Store round-trip latency as the engine saw it, by operation (failed calls included).',
    labelNames: ['op'] as const,
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const dropped = new Counter({
    name: 'idem_http_connections_dropped_total',
    help: 'Connections the API listener closed unanswered because it already held maxConnections.',
    registers,
  });
  for (const outcome of OUTCOMES) executions.inc({ outcome }, 0);
  for (const op of FENCED_OPS) staleWrites.inc({ op }, 0);
  for (const op of STORE_OPS) {
    storeErrors.inc({ op }, 0);
    latency.zero({ op });
  }

  const onEvent = (event: IdempotencyEvent): void => {
    try {
      switch (event.type) {
        case 'executed':
          executions.inc({ outcome: event.outcome });
          break;
        case 'replayed':
          replays.inc();
          break;
        case 'in_flight':
          conflicts.inc();
          break;
        case 'mismatch':
          mismatches.inc();
          break;
        case 'takeover':
          takeovers.inc();
          break;
        case 'lease_lost':
          leasesLost.inc();
          break;
        case 'stale_write_refused':
          staleWrites.inc({ op: event.op });
          break;
        case 'store_op':
          latency.observe({ op: event.op }, event.ms / 1000);
          if (!event.ok) storeErrors.inc({ op: event.op });
          break;
      }
    } catch {
      // Metrics must never change what happens to a payment.
    }
  };

  return {
    registry,
    onEvent,
    onConnectionDropped: () => dropped.inc(),
    response: async () =>
      new Response(await registry.metrics(), { status: 200, headers: { 'content-type': registry.contentType, 'cache-control': 'no-store' } }),
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
    if (pathname !== '/metrics') return problem({ status: 404, slug: 'not-found', title: 'Not found', detail: `No route for ${pathname}.` });
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return problem({ status: 405, slug: 'method-not-allowed', title: 'Method not allowed', headers: { allow: 'GET' } });
    }
    return metrics.response();
  };
  return Object.assign(app, { dropsAfterCommit: () => false, admit: () => 'no-body' as const });
}
