/**
 * @module The bench's probes, one request at a time on a running server: the store round trips per request kind,
 * and correctness (20 concurrent requests with one key, the Location header on a replay, a retry after a thrown
 * error).
 */
import { control, newKey, type Server } from './load.js';
import { BODY, QUICK, sleep } from './settings.js';

interface Stats {
  executions: number;
  roundTrips: number;
}
const stats = (server: Server, key: string) => control<Stats>(server, `/__stats?key=${encodeURIComponent(key)}`);
const post = (server: Server, key: string, body = BODY, path = '/pay') =>
  fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body,
  });

async function untilExecuted(server: Server, key: string, count: number): Promise<void> {
  for (let i = 0; i < 200 && (await stats(server, key)).executions < count; i++) await sleep(10);
}

/** Store round trips per request kind, counted by the store. */
export type Trips = Record<'new' | 'replay' | 'conflict' | 'mismatch' | 'cachedReplay', number>;

export async function roundTrips(server: Server): Promise<Trips> {
  const key = newKey();
  const trips = async () => (await stats(server, key)).roundTrips;
  const r0 = await trips();
  await (await post(server, key)).arrayBuffer();
  const r1 = await trips();
  await (await post(server, key)).arrayBuffer();
  const r2 = await trips();
  await (await post(server, key, JSON.stringify({ amount: 999 }))).arrayBuffer();
  const r3 = await trips();
  const slow = newKey();
  await control(server, `/__delay?ms=${QUICK ? 600 : 1500}`, 'POST');
  const first = post(server, slow);
  await untilExecuted(server, slow, 1);
  await control(server, '/__delay?ms=0', 'POST');
  const c0 = (await stats(server, slow)).roundTrips;
  const conflict = await post(server, slow);
  await conflict.arrayBuffer();
  const c1 = (await stats(server, slow)).roundTrips;
  await (await first).arrayBuffer();
  if (conflict.status !== 409) console.warn(`conflict probe answered ${conflict.status}, not 409`);
  // The cached route: its first replay reads the store (and keeps the record), the next one must not.
  const hot = newKey();
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  const h0 = (await stats(server, hot)).roundTrips;
  await (await post(server, hot, BODY, '/pay-cached')).arrayBuffer();
  const h1 = (await stats(server, hot)).roundTrips;
  return { new: r1 - r0, replay: r2 - r1, mismatch: r3 - r2, conflict: c1 - c0, cachedReplay: h1 - h0 };
}

/** Rounds of the 20-concurrent test, each with its own key. */
const ROUNDS = QUICK ? 2 : 5;

export interface Correctness {
  concurrent: string;
  executions: number;
  location: string;
  afterError: string;
}

export async function correctness(server: Server): Promise<Correctness> {
  // 20 concurrent requests with one key, while the handler takes 200 ms.
  // ROUNDS rounds, each with its own key; `executions` is the most runs any one key got.
  await control(server, '/__delay?ms=200', 'POST');
  const answers: number[] = [];
  let executions = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const key = newKey();
    answers.push(
      ...(await Promise.all(
        Array.from({ length: 20 }, () => post(server, key).then(async (r) => (await r.arrayBuffer(), r.status))),
      )),
    );
    executions = Math.max(executions, (await stats(server, key)).executions);
  }
  await control(server, '/__delay?ms=0', 'POST');
  const byStatus = new Map<number, number>();
  for (const status of answers) byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
  const concurrent = [...byStatus]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${n}×${status}`)
    .join(' ');
  // A replay keeps the Location header?
  const located = newKey();
  const original = await post(server, located);
  await original.arrayBuffer();
  const replay = await post(server, located);
  await replay.arrayBuffer();
  const want = original.headers.get('location');
  const got = replay.headers.get('location');
  const location = want !== null && got === want ? 'kept' : `lost (${got ?? 'none'})`;
  // A thrown error, then a retry of the same key.
  const failing = newKey();
  await control(server, '/__fail-next', 'POST');
  const failed = await post(server, failing);
  await failed.arrayBuffer();
  await sleep(200);
  const retry = await post(server, failing);
  await retry.arrayBuffer();
  const ran = (await stats(server, failing)).executions;
  const afterError =
    ran === 2 && retry.status < 300
      ? `retryable (${failed.status}, retry ${retry.status} ran)`
      : ran === 1
        ? `not retryable (${failed.status}, retry ${retry.status} without running)`
        : `${failed.status}, retry ${retry.status}, ran ${ran}×`;
  return { concurrent, executions, location, afterError };
}
