/**
 * @module Latency, not only throughput (issue 31 item 5): p50 and p99 for new keys and replays at 1, 16 and 64
 * concurrent connections — Idem (Redis store, ioredis), @node-idempotency (the leanest peer, bench/ni.ts) and the
 * bare route (the same Express route with no layer and no key) — on the servers the run has already warmed up.
 * Each measurement is taken in slices across rounds, every subject and connection count once per round (the order
 * reversed every other round); the percentiles are over every 2xx answer's response time of all its slices, in
 * µs resolution (autocannon's own histogram keeps whole milliseconds). `BENCH_LATENCY_ROUNDS` and
 * `BENCH_LATENCY_SECONDS` bound it (full run: 2 rounds of 2 s per measurement, 18 measurements).
 */
import { cannon, control, newKey, type Kind, type Server } from './load.js';
import { BODY, QUICK, progress } from './settings.js';

export const LATENCY_CONNECTIONS = [1, 16, 64] as const;
const ROUNDS = QUICK ? 1 : Number(process.env.BENCH_LATENCY_ROUNDS ?? 2);
const SECONDS = QUICK ? 0.5 : Number(process.env.BENCH_LATENCY_SECONDS ?? 2);

/** One subject at one connection count: its percentiles in ms, its throughput, its answers. */
export interface LatencyRow {
  /** `bare`: no layer, no key; `idem`: Idem on Redis (`idem-cached`: with `cacheSize`); `ni`: @node-idempotency. */
  subject: 'bare' | 'idem' | 'idem-cached' | 'ni';
  kind: Kind;
  connections: number;
  p50: number;
  p99: number;
  rps: number;
  /** 2xx answers timed. */
  samples: number;
  /** Non-2xx answers, errors and timeouts. */
  failed: number;
}

export interface LatencyResults {
  rounds: number;
  seconds: number;
  rows: LatencyRow[];
}

interface Subject {
  subject: LatencyRow['subject'];
  kind: Kind;
  server: Server;
  path: string;
}

const percentile = (sorted: Float64Array, p: number): number =>
  sorted.length === 0 ? NaN : (sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] as number);

/** Answers a new key once on `path`, so that the measurement replays a completed key. */
async function completedKey(server: Server, path: string): Promise<string> {
  const key = newKey();
  await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: BODY,
  });
  return key;
}

/** The latency section: every subject at every connection count, in rounds. */
export async function latency(bare: Server, idem: Server, ni: Server | undefined): Promise<LatencyResults> {
  const subjects: Subject[] = [
    { subject: 'bare', kind: 'none', server: bare, path: '/pay' },
    { subject: 'idem', kind: 'new', server: idem, path: '/pay' },
    { subject: 'idem', kind: 'replay', server: idem, path: '/pay' },
    { subject: 'idem-cached', kind: 'replay', server: idem, path: '/pay-cached' },
    ...(ni
      ? [
          { subject: 'ni', kind: 'new', server: ni, path: '/pay' } as const,
          { subject: 'ni', kind: 'replay', server: ni, path: '/pay' } as const,
        ]
      : []),
  ];
  const slots = [];
  for (const connections of LATENCY_CONNECTIONS) {
    for (const s of subjects) {
      const replayKey = s.kind === 'replay' ? await completedKey(s.server, s.path) : '';
      slots.push({ ...s, connections, replayKey, times: [] as number[], requests: 0, ms: 0, failed: 0 });
    }
  }
  for (let round = 1; round <= ROUNDS; round++) {
    progress(`latency, round ${round}/${ROUNDS}: ${slots.length} measurements of ${SECONDS} s`);
    for (const slot of round % 2 === 0 ? [...slots].reverse() : slots) {
      await control(slot.server, '/__reset', 'POST');
      const result = await cannon(slot.server, slot.path, slot.kind, SECONDS, slot.replayKey, slot.connections, (ms) =>
        slot.times.push(ms),
      );
      slot.requests += result.requests.total;
      slot.ms += result.duration * 1000;
      slot.failed += result.non2xx + result.errors + result.timeouts;
    }
  }
  const rows = slots.map((slot): LatencyRow => {
    const sorted = Float64Array.from(slot.times).sort();
    return {
      subject: slot.subject,
      kind: slot.kind,
      connections: slot.connections,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      rps: slot.ms > 0 ? (slot.requests * 1000) / slot.ms : NaN,
      samples: sorted.length,
      failed: slot.failed,
    };
  });
  return { rounds: ROUNDS, seconds: SECONDS, rows };
}
