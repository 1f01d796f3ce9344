/**
 * `idem/prometheus` on a prom-client Registry of the test's own, fed by `idem/http` over a real SQLite file: a
 * known sequence of requests (one of each decision, refusal reason and fenced-write failure) gives exact values.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Registry } from 'prom-client';
import { manualClock } from '../core/clock.js';
import { afterAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../core/record.js';
import { idempotency } from '../http/middleware.js';
import { sqliteStore } from '../stores/sqlite/index.js';
import { prometheusMetrics } from './index.js';

const dir = mkdtempSync(join(tmpdir(), 'idem-prometheus-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Samples by `name{labels}` as exposed, e.g. `idem_requests_total{decision="replayed"}`. */
async function samples(registry: Registry): Promise<Map<string, number>> {
  const map = new Map<string, number>();
  for (const line of (await registry.metrics()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    map.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return map;
}

const pick = (all: Map<string, number>, prefix: string): Record<string, number> =>
  Object.fromEntries(
    [...all].filter(([name]) => name.startsWith(prefix)).map(([name, value]) => [name.slice(prefix.length), value]),
  );

interface Switches {
  claim: boolean;
  complete: boolean;
  renew: boolean;
}

/** The store, with switches that make a call reject as a backend outage would. */
function switchable<Tx>(inner: IdempotencyStore<Tx>, down: Switches): IdempotencyStore<Tx> {
  const outage = (op: string) => Promise.reject(new Error(`${op}: switched off`));
  return {
    name: inner.name,
    get roundTrips() {
      return inner.roundTrips;
    },
    claim: (r) => (down.claim ? outage('claim') : inner.claim(r)),
    complete: (r) => (down.complete ? outage('complete') : inner.complete(r)),
    renew: (r) => (down.renew ? outage('renew') : inner.renew(r)),
    release: (r) => inner.release(r),
    get: (pk) => inner.get(pk),
    sweep: (r) => inner.sweep(r),
    list: (r) => inner.list(r),
    close: () => inner.close(),
  };
}

function setup(options: { route?: (path: string) => string | undefined } = {}) {
  const registry = new Registry();
  const metrics = prometheusMetrics({ registry, ...options });
  const sqlite = sqliteStore({ database: new Database(join(dir, `${randomUUID()}.db`)), closeDatabase: true });
  const down: Switches = { claim: false, complete: false, renew: false };
  const clock = manualClock(Date.parse('2026-01-01T00:00:00Z'));
  /** The resolvers of the handlers holding `hold: true` requests, in the order they started. */
  const holds: Array<() => void> = [];
  const handle = idempotency({
    store: switchable(sqlite, down),
    scope: 'single-tenant',
    required: true,
    leaseMs: 300,
    maxBodyBytes: 256,
    clock,
    onEvent: metrics.onEvent,
    onError: () => {},
  })(async (request) => {
    const {
      ref,
      status = 201,
      hold = false,
    } = (await request.json()) as { ref: string; status?: number; hold?: boolean };
    if (hold) await new Promise<void>((resolve) => holds.push(resolve));
    return Response.json({ ref }, { status });
  });
  const post = async (path: string, key: string | undefined, body: object) =>
    (
      await handle(
        new Request(`http://api.test${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
          body: JSON.stringify(body),
        }),
      )
    ).status;
  return { registry, sqlite, down, clock, holds, post };
}

describe('idem/prometheus', () => {
  it('a known sequence: one decision per keyed request, refusals by reason, executions by outcome, lost leases, stale writes', async () => {
    const { registry, sqlite, down, clock, holds, post } = setup();
    await sqlite.migrate();
    const metric = async (name: string) => (await samples(registry)).get(name);
    const k1 = randomUUID();
    const statuses: number[] = [];
    statuses.push(await post('/v1/charges', k1, { ref: 'a' })); // executed (succeeded)
    statuses.push(await post('/v1/charges', k1, { ref: 'a' })); // replayed
    statuses.push(await post('/v1/charges', k1, { ref: 'b' })); // mismatch
    statuses.push(await post('/v1/charges', randomUUID(), { ref: 'c', status: 402 })); // executed (failed-final)
    statuses.push(await post('/v1/charges', undefined, { ref: 'd' })); // refused: KEY_MISSING
    statuses.push(await post('/v1/charges', 'two words', { ref: 'd' })); // refused: KEY_INVALID
    statuses.push(await post('/v1/charges', randomUUID(), { ref: 'd', pad: 'x'.repeat(300) })); // refused: BODY_TOO_LARGE
    down.claim = true;
    statuses.push(await post('/v1/charges', randomUUID(), { ref: 'd' })); // refused: STORE_UNAVAILABLE
    down.claim = false;
    down.complete = true;
    statuses.push(await post('/v1/charges', randomUUID(), { ref: 'e' })); // unrecorded
    down.complete = false;

    // A duplicate while the first attempt runs (in_flight). Then that attempt loses its lease: its renewal fails
    // while the lease lapses, another attempt takes the key over (a takeover), the next renewal finds the key
    // taken (a lost lease), and the first attempt's completion is refused (a stale write: lease_lost).
    const k2 = randomUUID();
    const first = post('/v1/charges', k2, { ref: 'f', hold: true });
    await expect.poll(() => holds.length, { timeout: 5_000, interval: 5 }).toBe(1);
    statuses.push(await post('/v1/charges', k2, { ref: 'f', hold: true })); // in_flight
    down.renew = true;
    clock.advance(400); // one renewal, refused by the store; the lease (300 ms) lapses
    await expect.poll(() => metric('idem_store_errors_total{op="renew"}'), { timeout: 5_000, interval: 5 }).toBe(1);
    down.renew = false;
    const takeover = post('/v1/charges', k2, { ref: 'f', hold: true });
    await expect.poll(() => holds.length, { timeout: 5_000, interval: 5 }).toBe(2);
    clock.advance(100); // each attempt renews once: the first finds the key taken, the takeover's renewal holds
    await expect.poll(() => metric('idem_leases_lost_total'), { timeout: 5_000, interval: 5 }).toBe(1);
    holds[1]?.();
    statuses.push(await takeover); // executed (succeeded), after the takeover
    holds[0]?.();
    statuses.push(await first); // lease_lost
    expect(statuses).toEqual([201, 201, 400, 402, 400, 400, 413, 503, 503, 409, 201, 409]);

    const all = await samples(registry);
    expect(pick(all, 'idem_requests_total')).toEqual({
      '{decision="executed"}': 3,
      '{decision="replayed"}': 1,
      '{decision="in_flight"}': 1,
      '{decision="mismatch"}': 1,
      '{decision="refused"}': 4,
      '{decision="lease_lost"}': 1,
      '{decision="unrecorded"}': 1,
    });
    expect(pick(all, 'idem_refusals_total')).toEqual({
      '{reason="KEY_MISSING"}': 1,
      '{reason="KEY_INVALID"}': 1,
      '{reason="BODY_TOO_LARGE"}': 1,
      '{reason="STORE_UNAVAILABLE"}': 1,
    });
    expect(pick(all, 'idem_executions_total')).toEqual({
      '{outcome="succeeded"}': 2,
      '{outcome="failed-final"}': 1,
      '{outcome="failed-retryable"}': 0,
      '{outcome="release"}': 0,
    });
    // Durations on the injected clock: the takeover ran from its claim (t+400) to its completion (t+500).
    expect([
      all.get('idem_execution_duration_seconds_count{outcome="succeeded"}'),
      all.get('idem_execution_duration_seconds_sum{outcome="succeeded"}'),
      all.get('idem_execution_duration_seconds_bucket{le="0.1",outcome="succeeded"}'),
      all.get('idem_execution_duration_seconds_bucket{le="0.05",outcome="succeeded"}'),
      all.get('idem_execution_duration_seconds_count{outcome="failed-final"}'),
    ]).toEqual([2, 0.1, 2, 1, 1]);
    expect([all.get('idem_takeovers_total'), all.get('idem_leases_lost_total')]).toEqual([1, 1]);
    expect(pick(all, 'idem_stale_writes_refused_total')).toEqual({
      '{op="complete"}': 1,
      '{op="renew"}': 0,
      '{op="release"}': 0,
    });
    expect(pick(all, 'idem_store_errors_total')).toEqual({
      '{op="claim"}': 1,
      '{op="complete"}': 1,
      '{op="renew"}': 1,
      '{op="release"}': 0,
      '{op="get"}': 0,
    });
    const calls = Object.fromEntries(
      ['claim', 'complete', 'renew', 'release', 'get'].map((op) => [
        op,
        all.get(`idem_store_op_duration_seconds_count{op="${op}"}`),
      ]),
    );
    expect(calls).toEqual({ claim: 9, complete: 5, renew: 3, release: 0, get: 0 });
  });

  it('with `route`, requests and executions carry the route you map the path to (other for the rest)', async () => {
    const { registry, sqlite, post } = setup({
      route: (path) => (/^\/v1\/charges\/[^/]+\/refunds$/.test(path) ? '/v1/charges/:id/refunds' : undefined),
    });
    await sqlite.migrate();
    const key = randomUUID();
    await post('/v1/charges/ch_1/refunds', key, { ref: 'a' });
    await post('/v1/charges/ch_1/refunds', key, { ref: 'a' });
    await post('/v1/payouts', randomUUID(), { ref: 'b' });
    await post('/v1/payouts', undefined, { ref: 'b' });
    const all = await samples(registry);
    expect(pick(all, 'idem_requests_total')).toEqual({
      '{decision="executed",route="/v1/charges/:id/refunds"}': 1,
      '{decision="replayed",route="/v1/charges/:id/refunds"}': 1,
      '{decision="executed",route="other"}': 1,
      '{decision="refused",route="other"}': 1,
    });
    expect(pick(all, 'idem_executions_total')).toEqual({
      '{outcome="succeeded",route="/v1/charges/:id/refunds"}': 1,
      '{outcome="succeeded",route="other"}': 1,
    });
  });

  it('with `route`, an unrecorded request is counted under the route its failed write names', async () => {
    const registry = new Registry();
    const { onEvent } = prometheusMetrics({
      registry,
      route: (path) => (path.startsWith('/v1/charges') ? '/v1/charges' : undefined),
    });
    const failed = { type: 'store_op', op: 'complete', ms: 1, ok: false, error: new Error('down') } as const;
    onEvent({ ...failed, route: '/v1/charges' } as Parameters<typeof onEvent>[0]);
    onEvent(failed);
    expect(pick(await samples(registry), 'idem_requests_total')).toEqual({
      '{decision="unrecorded",route="/v1/charges"}': 1,
      '{decision="unrecorded",route="other"}': 1,
    });
  });

  it('checks its options, naming the one at fault; a registry takes it once per prefix', () => {
    const registry = new Registry();
    prometheusMetrics({ registry });
    expect(() => prometheusMetrics({ registry })).toThrow(
      "Expected `registry` to be a registry without Idem's metrics (idem_requests_total is registered already: one prometheusMetrics() per registry, or another prefix).",
    );
    expect(() => prometheusMetrics({ registry, prefix: 'payments_idem_' })).not.toThrow();
    expect(() => prometheusMetrics({ registry: {} as Registry })).toThrow(
      'Expected `registry` to be a prom-client Registry (new Registry()), got {}.',
    );
    expect(() => prometheusMetrics({ registry: new Registry(), prefix: 'idem-' })).toThrow(
      'Expected `prefix` to be a metric name prefix',
    );
    expect(() => prometheusMetrics({ registry: new Registry(), storeBuckets: [0.1, 0.05] })).toThrow(
      'Expected `storeBuckets` to be increasing positive numbers of seconds, got [0.1,0.05].',
    );
  });

  it('never throws from onEvent, whatever it is given', () => {
    const { onEvent } = prometheusMetrics({ registry: new Registry() });
    expect(() =>
      onEvent({
        type: 'executed',
        scope: 's',
        key: 'k',
        outcome: 'nonsense' as 'succeeded',
        status: 201,
        ms: Number.NaN,
      }),
    ).not.toThrow();
    expect(() => onEvent(null as unknown as Parameters<typeof onEvent>[0])).not.toThrow();
  });
});
