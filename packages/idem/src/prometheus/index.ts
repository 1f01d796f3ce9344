/**
 * @module `idem/prometheus` — Idem's metrics on your own prom-client `Registry`, fed by the `onEvent` hook of the
 * engine, the Web layer or any adapter.
 */
import { Counter, Histogram, type Registry } from 'prom-client';
import type { IdempotencyEvent, OutcomeKind, StoreOp } from '../core/engine.js';
import { configError } from '../core/errors.js';

/**
 * What happened to a keyed request, as `idem_requests_total{decision}` counts it: one per request.
 *
 * - `executed` — the work ran and its outcome was recorded (`idem_executions_total` says which)
 * - `replayed` — the stored answer was sent
 * - `in_flight` — the first attempt was still running: 409
 * - `mismatch` — the key was used with another payload: 400 (or 422)
 * - `refused` — refused before any claim: no key where one is required, an invalid key, a body too large, the
 *   store down at the claim (`idem_refusals_total` says which)
 * - `lease_lost` — the work ran, but another attempt had taken the key over: its outcome was refused (409)
 * - `unrecorded` — the work ran, but the store failed as its outcome was written: 503, the retry runs it again
 */
export type RequestDecision =
  'executed' | 'replayed' | 'in_flight' | 'mismatch' | 'refused' | 'lease_lost' | 'unrecorded';

export type RefusalReason = Extract<IdempotencyEvent, { type: 'refused' }>['reason'];

export interface PrometheusOptions {
  /** Your registry: the metrics are registered on it (and only on it). */
  readonly registry: Registry;
  /** Prefix of every metric name. Default `idem_`. */
  readonly prefix?: string;
  /**
   * Adds a `route` label to `idem_requests_total` and `idem_executions_total`: map the request path events carry
   * (e.g. `/v1/charges/ch_123/refunds`) to a route of your own (`/v1/charges/:id/refunds`), or `undefined` for
   * `other`. Paths themselves are never used as labels: their ids would make a series per request.
   */
  readonly route?: (path: string) => string | undefined;
  /** Buckets of `idem_store_op_duration_seconds`. Default 0.5 ms to 2.5 s. */
  readonly storeBuckets?: readonly number[];
  /** Buckets of `idem_execution_duration_seconds`. Default 5 ms to 60 s. */
  readonly executionBuckets?: readonly number[];
}

export interface IdemMetrics {
  /** Pass as `onEvent` (or call it from yours). Never throws. */
  readonly onEvent: (event: IdempotencyEvent) => void;
}

const DECISIONS: readonly RequestDecision[] = [
  'executed',
  'replayed',
  'in_flight',
  'mismatch',
  'refused',
  'lease_lost',
  'unrecorded',
];
const REASONS: readonly RefusalReason[] = ['KEY_MISSING', 'KEY_INVALID', 'BODY_TOO_LARGE', 'STORE_UNAVAILABLE'];
const OUTCOMES: readonly OutcomeKind[] = ['succeeded', 'failed-final', 'failed-retryable', 'release'];
const STORE_OPS: readonly StoreOp[] = ['claim', 'complete', 'renew', 'release', 'get'];
/** The fenced writes: the only operations a stale writer can be refused on. */
const FENCED_OPS: readonly StoreOp[] = ['complete', 'renew', 'release'];
/** A store round trip is under a millisecond on a LAN, tens of milliseconds across regions. */
const STORE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** The work itself: a card charge takes a second or two, a slow processor tens. */
const EXECUTION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/**
 * Registers Idem's metrics on `registry` and returns the `onEvent` that feeds them. Every series of a known
 * label value starts at 0, so `rate()` and `increase()` see it before the first incident.
 *
 * | metric | labels | counts |
 * |---|---|---|
 * | `idem_requests_total` | `decision` (see {@link RequestDecision}) | keyed requests, one decision each |
 * | `idem_refusals_total` | `reason` = `KEY_MISSING`, `KEY_INVALID`, `BODY_TOO_LARGE`, `STORE_UNAVAILABLE` | requests refused before any claim |
 * | `idem_executions_total` | `outcome` = `succeeded`, `failed-final`, `failed-retryable`, `release` | work that ran, by recorded outcome |
 * | `idem_execution_duration_seconds` | `outcome` | histogram: from the claim to the recorded outcome |
 * | `idem_takeovers_total` | | claims that took over a dead attempt's lease or re-ran a retryable failure |
 * | `idem_leases_lost_total` | | running attempts whose renewal found the key taken over |
 * | `idem_stale_writes_refused_total` | `op` = `complete`, `renew`, `release` | fenced writes refused: a late writer lost |
 * | `idem_store_errors_total` | `op` = `claim`, `complete`, `renew`, `release`, `get` | store calls that failed |
 * | `idem_store_op_duration_seconds` | `op` | histogram of each store call as the engine saw it (failed ones too) |
 *
 * With `route`, `idem_requests_total` and `idem_executions_total` also carry `route`. Keyless requests on
 * routes where keys are optional run unguarded, emit nothing and are not counted.
 *
 * @example
 * import { Registry, collectDefaultMetrics } from 'prom-client'
 * const registry = new Registry()
 * const metrics = prometheusMetrics({ registry })
 * const protect = idempotency({ store, scope, onEvent: metrics.onEvent })
 * app.get('/metrics', async (_req, res) => res.type(registry.contentType).send(await registry.metrics()))
 */
export function prometheusMetrics(options: PrometheusOptions): IdemMetrics {
  const { registry, prefix, route, storeBuckets, executionBuckets } = checked(options);
  const registers = [registry];
  const byRoute = route !== undefined;
  // Each metric is named under the prefix and registered in the one registry.
  const counter = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name: `${prefix}${name}`, help, labelNames, registers });
  const histogram = <L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    buckets: readonly number[],
  ) => new Histogram<L>({ name: `${prefix}${name}`, help, labelNames, buckets: [...buckets], registers });
  const requests = counter(
    'requests_total',
    'Keyed requests by what Idem decided: executed, replayed, in_flight (409), mismatch (400/422), refused, lease_lost (409), unrecorded (503).',
    byRoute ? (['decision', 'route'] as const) : (['decision'] as const),
  );
  const refusals = counter('refusals_total', 'Requests refused before any claim, by reason.', ['reason']);
  const executions = counter(
    'executions_total',
    'Requests whose work ran and whose outcome was recorded, by outcome.',
    byRoute ? (['outcome', 'route'] as const) : ['outcome'],
  );
  const executionTime = histogram(
    'execution_duration_seconds',
    'From the claim to the recorded outcome, by outcome.',
    ['outcome'],
    executionBuckets,
  );
  const takeovers = counter('takeovers_total', 'Claims that took over a dead lease or re-ran a retryable failure.');
  const leasesLost = counter('leases_lost_total', 'Running attempts that found their lease taken over.');
  const staleWrites = counter(
    'stale_writes_refused_total',
    'Fenced writes refused because the token no longer matched (a late writer lost), by store operation.',
    ['op'],
  );
  const storeErrors = counter(
    'store_errors_total',
    'Store calls that failed, by operation (at the claim: 503 and the work did not run).',
    ['op'],
  );
  const storeTime = histogram(
    'store_op_duration_seconds',
    'Store call latency as the engine saw it, by operation (failed calls included).',
    ['op'],
    storeBuckets,
  );

  if (!byRoute) {
    for (const decision of DECISIONS) requests.inc({ decision }, 0);
    for (const outcome of OUTCOMES) executions.inc({ outcome }, 0);
  }
  for (const reason of REASONS) refusals.inc({ reason }, 0);
  for (const outcome of OUTCOMES) executionTime.zero({ outcome });
  for (const op of FENCED_OPS) staleWrites.inc({ op }, 0);
  for (const op of STORE_OPS) {
    storeErrors.inc({ op }, 0);
    storeTime.zero({ op });
  }

  const routeOf = (path: string | undefined): { route?: string } => {
    if (!route) return {};
    return { route: (path === undefined ? undefined : route(path)) ?? 'other' };
  };
  const decided = (decision: RequestDecision, path: string | undefined): void =>
    requests.inc({ decision, ...routeOf(path) });

  const onEvent = (event: IdempotencyEvent): void => {
    try {
      switch (event.type) {
        case 'executed':
          decided('executed', event.route);
          executions.inc({ outcome: event.outcome, ...routeOf(event.route) });
          executionTime.observe({ outcome: event.outcome }, event.ms / 1000);
          return;
        case 'replayed':
        case 'in_flight':
        case 'mismatch':
          decided(event.type, event.route);
          return;
        case 'refused':
          decided('refused', event.route);
          refusals.inc({ reason: event.reason });
          return;
        case 'takeover':
          takeovers.inc();
          return;
        case 'lease_lost':
          leasesLost.inc();
          return;
        case 'stale_write_refused':
          // The attempt's outcome was refused: that request ends here, answered 409.
          decided('lease_lost', event.route);
          staleWrites.inc({ op: event.op });
          return;
        case 'store_op':
          storeTime.observe({ op: event.op }, event.ms / 1000);
          if (event.ok) return;
          storeErrors.inc({ op: event.op });
          // A failed outcome write ends its request (503); a failed claim or read is counted as `refused`. Its
          // route is the event's own: the engine's `store_op` events do not name one yet (counted under `other`).
          if (event.op === 'complete' || event.op === 'release')
            decided('unrecorded', (event as { readonly route?: string }).route);
          return;
      }
    } catch {
      // Metrics must never change what happens to a payment.
    }
  };

  return { onEvent };
}

/** `options` with their defaults; CONFIG_INVALID for a bad one, or for a registry that holds Idem's metrics already. */
function checked({
  registry,
  prefix = 'idem_',
  route,
  storeBuckets = STORE_BUCKETS,
  executionBuckets = EXECUTION_BUCKETS,
}: PrometheusOptions) {
  if (typeof registry?.registerMetric !== 'function')
    throw configError('registry', 'a prom-client Registry (new Registry())', registry);
  if (typeof prefix !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(prefix))
    throw configError('prefix', 'a metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)', prefix);
  if (route !== undefined && typeof route !== 'function')
    throw configError('route', 'a function (path) => route label', route);
  for (const [name, buckets] of Object.entries({ storeBuckets, executionBuckets })) {
    if (
      !Array.isArray(buckets) ||
      buckets.length === 0 ||
      buckets.some((b, i) => typeof b !== 'number' || !(b > 0) || (i > 0 && b <= (buckets[i - 1] as number)))
    ) {
      throw configError(name, 'increasing positive numbers of seconds', buckets);
    }
  }
  const taken = ['requests_total', 'refusals_total', 'executions_total', 'store_op_duration_seconds'].find((n) =>
    registry.getSingleMetric(prefix + n),
  );
  if (taken)
    throw configError(
      'registry',
      `a registry without Idem's metrics (${prefix}${taken} is registered already: one prometheusMetrics() per registry, or another prefix)`,
    );

  return { registry, prefix, route, storeBuckets, executionBuckets };
}
