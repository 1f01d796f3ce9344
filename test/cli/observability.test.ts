/**
 * The demo server's `/metrics` and JSON logs, through `idem serve`: exact counter values after a known sequence
 * (1 execution, 1 replay, 1 mismatch, 1 in-flight conflict), and log lines that carry the key's hash — never the
 * key, a body or the API key.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listedInProgress } from '../fixtures/demo.js';
import { api, tempDir } from '../harness.js';
import { keyHash, serveIdem, type ServeProcess } from './helpers.js';

const $5 = { amount: 500, currency: 'usd', source: 'tok_visa' };

/** Metric samples by `name{labels}` as exposed, e.g. `idem_store_errors_total{op="claim"}`. */
function samples(text: string): Map<string, number> {
  const map = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    map.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return map;
}

describe('idem serve: /metrics and logs after a known sequence', () => {
  const dir = tempDir();
  let server: ServeProcess;
  const k1 = randomUUID();
  const k2 = randomUUID();
  let metrics: Map<string, number>;
  let contentType: string | null;
  let held: Promise<unknown>;

  beforeAll(async () => {
    server = await serveIdem({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      LOG_LEVEL: 'info',
      IDEM_LEASE_MS: '60000',
      IDEM_METRICS_PORT: '0',
    });
    const alice = api(server.url);
    expect((await alice.charge($5, { 'idempotency-key': k1 })).status).toBe(201); // 1 execution
    expect((await alice.charge($5, { 'idempotency-key': k1 })).headers.get('idempotent-replayed')).toBe('true'); // 1 replay
    expect((await alice.charge({ ...$5, amount: 501 }, { 'idempotency-key': k1 })).status).toBe(400); // 1 mismatch
    // 1 conflict: k2's first attempt holds its claim for 30 s; once the record shows it in progress, a duplicate gets 409.
    held = alice.charge($5, { 'idempotency-key': k2, 'idem-lab-delay-ms': '30000' }).catch(() => undefined);
    await listedInProgress(server.url, k2);
    expect((await alice.charge($5, { 'idempotency-key': k2 })).status).toBe(409);
    // /metrics has its own port (not the API's); the startup line says where.
    const metricsUrl = /metrics: (http:\/\/\S+?\/metrics)/.exec(server.output())?.[1];
    expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const response = await fetch(metricsUrl as string);
    contentType = response.headers.get('content-type');
    metrics = samples(await response.text());
  });
  afterAll(async () => {
    // k2's attempt is still held: no need to wait 30 s for a drain.
    await server.stop('SIGKILL');
    await held;
    dir.remove();
  });

  it('exposes the counters with exact values', () => {
    expect(contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect({
      executed: metrics.get('idem_executions_total{outcome="succeeded"}'),
      failedFinal: metrics.get('idem_executions_total{outcome="failed-final"}'),
      failedRetryable: metrics.get('idem_executions_total{outcome="failed-retryable"}'),
      replays: metrics.get('idem_replays_total'),
      conflicts: metrics.get('idem_in_flight_conflicts_total'),
      mismatches: metrics.get('idem_fingerprint_mismatches_total'),
      takeovers: metrics.get('idem_takeovers_total'),
      leasesLost: metrics.get('idem_leases_lost_total'),
      staleComplete: metrics.get('idem_stale_writes_refused_total{op="complete"}'),
      storeErrorsClaim: metrics.get('idem_store_errors_total{op="claim"}'),
      storeErrorsComplete: metrics.get('idem_store_errors_total{op="complete"}'),
    }).toEqual({
      executed: 1,
      failedFinal: 0,
      failedRetryable: 0,
      replays: 1,
      conflicts: 1,
      mismatches: 1,
      takeovers: 0,
      leasesLost: 0,
      staleComplete: 0,
      storeErrorsClaim: 0,
      storeErrorsComplete: 0,
    });
  });

  it('times every store call in the latency histogram, per operation', () => {
    // Claims: k1 ×3 (execute, replay, mismatch), k2 ×2 (the held attempt, the duplicate). One completion (k1).
    expect(metrics.get('idem_store_op_duration_seconds_count{op="claim"}')).toBe(5);
    expect(metrics.get('idem_store_op_duration_seconds_bucket{le="+Inf",op="claim"}')).toBe(5);
    expect(metrics.get('idem_store_op_duration_seconds_count{op="complete"}')).toBe(1);
    expect(metrics.get('idem_store_op_duration_seconds_count{op="release"}')).toBe(0);
  });

  it('logs one JSON line per event with the scope and the key hash; never the key, a body or the API key', () => {
    const output = server.output();
    const events = output
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => typeof line.event === 'string')
      .map(({ level, event, scope, keyHash, outcome }) => ({
        level,
        event,
        scope,
        keyHash,
        ...(outcome ? { outcome } : {}),
      }));
    const h1 = keyHash(k1);
    const h2 = keyHash(k2);
    expect(events).toEqual([
      { level: 'info', event: 'executed', scope: 'acct_alice', keyHash: h1, outcome: 'succeeded' },
      { level: 'info', event: 'replayed', scope: 'acct_alice', keyHash: h1 },
      { level: 'info', event: 'mismatch', scope: 'acct_alice', keyHash: h1 },
      { level: 'info', event: 'in_flight', scope: 'acct_alice', keyHash: h2 },
    ]);
    for (const secret of [k1, k2, 'sk_test_alice', 'Bearer', '"amount"', 'tok_visa'])
      expect(output).not.toContain(secret);
  });
});
