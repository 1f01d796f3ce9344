/**
 * The broker tests' scenarios that run the same on RabbitMQ and on JetStream, against the documented consumers:
 * a store outage, a copy of a message delivered while its payout is being made, a retryable error in the work.
 * Each test file gives a {@link Rig}: its consumer group, books, the fault proxy in front of the store, and how
 * to publish and count dead letters on its broker.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { expect } from 'vitest';
import type { FaultProxy } from '../fault-proxy.js';
import { POSTGRES_URL } from '../services.js';
import type { ConsumerGroup } from './group.js';
import { poll } from './group.js';
import { LIMIT, type Ledger, type Run } from './ledger.js';
import type { Payout } from './payouts.js';

export interface Rig {
  readonly broker: string;
  readonly group: ConsumerGroup;
  readonly ledger: Ledger;
  /** Between every consumer and the idempotency store (not the books). */
  readonly proxy: FaultProxy;
  /** The delivery after which the broker delivers a message no more (or dead-letters it). */
  readonly lastDelivery: number;
  publish(payout: Payout, messageId: string): Promise<void>;
  /** Messages that reached the dead-letter queue or subject so far. */
  deadLetters(): Promise<number>;
}

export const payout = (amount = 500): Payout => ({
  payoutId: `po_${randomUUID()}`,
  merchantId: 'acct_test',
  amount,
  currency: 'usd',
});

/** The payouts each broker test makes, one per scenario (three for the outage). */
export function cast() {
  return {
    twice: payout(),
    concurrent: payout(),
    declined: payout(LIMIT + 1),
    killedBeforeAck: payout(),
    killedInWork: payout(),
    flaky: payout(),
    outage: [payout(), payout(), payout()],
  };
}
export type Cast = ReturnType<typeof cast>;

/** PostgreSQL with `?schema=` for the books (`ledger.ts`). */
export const booksUrl = (schema: string): string =>
  Object.assign(new URL(POSTGRES_URL), { search: `?schema=${schema}` }).toString();

/**
 * What every consumer process of a broker test is given besides its broker's settings: the store behind `proxy`
 * in the run's own schema, a 3 s lease, the books, and the payouts that throw once or stop in the work or at the ack.
 */
export const consumerEnv = (proxy: FaultProxy, schema: string, payouts: Cast): Record<string, string> => ({
  DATABASE_URL: proxy.via(POSTGRES_URL),
  IDEM_SCHEMA: schema,
  IDEM_LEASE_MS: '3000',
  LEDGER: booksUrl(schema),
  FLAKY: payouts.flaky.payoutId,
  HOLD_IN_WORK: [payouts.concurrent.payoutId, payouts.killedInWork.payoutId].join(','),
  HOLD_BEFORE_ACK: payouts.killedBeforeAck.payoutId,
});

/** How long the store stays down in the outage scenario, at least. */
export const OUTAGE_MS = 2_000;

/** Every nak delay a consumer gave (JetStream), each a whole number of milliseconds the server accepts. */
function expectWholeDelays(rig: Rig, payouts: readonly Payout[]): void {
  const delays = payouts.flatMap((p) => rig.group.of('requeued', p.payoutId).map((e) => e.delayMs));
  expect(delays.filter((ms) => ms !== null && !(Number.isInteger(ms) && ms > 0))).toEqual([]);
}

/** Polls until every payout is acked or dead-lettered; fails at once if a consumer crashed. */
async function settled(rig: Rig, payouts: readonly Payout[], what: string, timeoutMs = 30_000) {
  return poll(
    async () => {
      const crashed = rig.group.events.filter((e) => e.event === 'crashed');
      if (crashed.length > 0) throw new Error(`${what}: a consumer crashed:\n${rig.group.output()}`);
      return {
        acked: payouts.filter((p) => rig.group.of('acked', p.payoutId).length > 0).length,
        deadLetters: await rig.deadLetters(),
      };
    },
    (s) => s.acked + s.deadLetters >= payouts.length,
    what,
    timeoutMs,
  );
}

/** Runs and ledger rows per payout: what "made exactly once" means. */
async function madeOnce(rig: Rig, payouts: readonly Payout[]) {
  const runs = await Promise.all(payouts.map(async (p) => (await rig.ledger.runs(p.payoutId)).length));
  const rows = await Promise.all(payouts.map(async (p) => (await rig.ledger.entries(p.payoutId)).length));
  return { runs, rows };
}

/** The payout's work ran once, and the bank made it once under that run's record id. */
export async function ranOnce(rig: Rig, p: Payout): Promise<Run> {
  const [run, ...more] = await rig.ledger.runs(p.payoutId);
  expect([run?.rerun, more]).toEqual([false, []]);
  expect(await rig.ledger.entries(p.payoutId)).toEqual([
    { entryId: run!.recordId, payoutId: p.payoutId, amount: p.amount, postedBy: run!.consumer },
  ]);
  return run!;
}

const deliveries = (rig: Rig, p: Payout) => rig.group.of('received', p.payoutId).length;

/**
 * The store goes down (every connection cut, new ones refused) for {@link OUTAGE_MS}, and at least until every
 * payout published meanwhile has been turned away twice; then it comes back. Every payout is made exactly once,
 * none is dead-lettered. Returns the measurement line.
 */
export async function storeOutage(rig: Rig, payouts: readonly Payout[]): Promise<string> {
  const { group, proxy } = rig;
  proxy.cut();
  const down = Date.now();
  // The outage's length is the scenario; the requeues are the signal that the consumers met it.
  await Promise.all([
    delay(OUTAGE_MS),
    (async () => {
      for (const [i, p] of payouts.entries()) await rig.publish(p, `outage-${i}`);
      await group.until(
        () => (payouts.every((p) => group.of('requeued', p.payoutId).length >= 2) ? true : undefined),
        'two requeues of every payout while the store is down',
        20_000,
      );
    })(),
  ]);
  proxy.restore();
  const outageMs = Date.now() - down;
  const end = await settled(rig, payouts, 'every payout acked or dead-lettered after the outage');
  expect(end).toEqual({ acked: payouts.length, deadLetters: 0 });
  expect(await madeOnce(rig, payouts)).toEqual({ runs: payouts.map(() => 1), rows: payouts.map(() => 1) });
  expect(payouts.flatMap((p) => group.of('dead-lettered', p.payoutId))).toEqual([]);
  expectWholeDelays(rig, payouts);
  const used = payouts.map((p) => deliveries(rig, p));
  for (const n of used) expect(n).toBeLessThanOrEqual(rig.lastDelivery);
  return `${rig.broker}: store down ${outageMs} ms: ${payouts.length} of ${payouts.length} payouts made once, deliveries used ${used.join('/')} of ${rig.lastDelivery}`;
}

/**
 * A copy of the payout's message reaches a consumer while the first delivery's work is held: `copy()` brings it
 * about. The first attempt is released only once the copy is at the broker's last delivery, where a requeue would
 * dead-letter it. The work runs once; the payout is made once; nothing is dead-lettered.
 */
export async function copyWhileWorking(
  rig: Rig,
  p: Payout,
  publishFirst: () => Promise<void>,
  copy: () => Promise<void>,
): Promise<string> {
  const { group } = rig;
  await publishFirst();
  const holding = await group.next('holding', (e) => e.payoutId === p.payoutId && e.at === 'in-work');
  await copy();
  const last = await group.next(
    'received',
    (e) => e.payoutId === p.payoutId && e.deliveries === rig.lastDelivery,
    30_000,
  );
  group.release(holding.consumer, p.payoutId);
  const first = await group.next('acked', (e) => e.payoutId === p.payoutId && e.consumer === holding.consumer);
  await group.next('acked', (e) => e.payoutId === p.payoutId && e.consumer === last.consumer && e !== first);
  expect(await rig.deadLetters()).toBe(0);
  expect(group.of('dead-lettered', p.payoutId)).toEqual([]);
  expect((await rig.ledger.runs(p.payoutId)).map((r) => r.consumer)).toEqual([holding.consumer]);
  expect((await rig.ledger.entries(p.payoutId)).map((e) => e.postedBy)).toEqual([holding.consumer]);
  expectWholeDelays(rig, [p]);
  return `${rig.broker}: a copy delivered while the work ran: ${deliveries(rig, p)} deliveries, ${group.of('requeued', p.payoutId).length} requeues, 1 run, 1 payout made, 0 dead letters`;
}

/** The work throws once (the bank's connection reset); the next delivery runs it again and the payout is made. */
export async function retryableError(rig: Rig, p: Payout): Promise<string> {
  const { group } = rig;
  await rig.publish(p, 'flaky-1');
  const acked = await group.next('acked', (e) => e.payoutId === p.payoutId);
  const runs = await rig.ledger.runs(p.payoutId);
  expect(runs.map((r) => [r.recordId, r.rerun])).toEqual([
    [runs[0]!.recordId, false],
    [runs[0]!.recordId, true],
  ]);
  expect(await rig.ledger.entries(p.payoutId)).toEqual([
    { entryId: runs[0]!.recordId, payoutId: p.payoutId, amount: p.amount, postedBy: runs[1]!.consumer },
  ]);
  expect(acked.consumer).toBe(runs[1]!.consumer);
  expect(group.of('received', p.payoutId).map((e) => e.deliveries)).toEqual([1, 2]);
  expect(group.of('requeued', p.payoutId)).toHaveLength(1);
  expect(group.of('dead-lettered', p.payoutId)).toEqual([]);
  return `${rig.broker}: a retryable work error: 2 deliveries, 2 runs, 1 payout made`;
}

/**
 * kill -9 after the work, before the ack: the message comes back to another consumer, which replays (the work
 * does not run again) and acks.
 */
export async function killedBeforeAck(rig: Rig, p: Payout): Promise<void> {
  const { group } = rig;
  await rig.publish(p, 'kill-before-ack');
  const holding = await group.next('holding', (e) => e.payoutId === p.payoutId && e.at === 'before-ack');
  expect(await group.kill(holding.consumer)).toBe('SIGKILL');
  const acked = await group.next('acked', (e) => e.payoutId === p.payoutId);
  expect(acked.consumer === holding.consumer).toBe(false);
  expect(group.of('received', p.payoutId).map((e) => [e.consumer === holding.consumer, e.deliveries])).toEqual([
    [true, 1],
    [false, 2],
  ]);
  expect((await rig.ledger.runs(p.payoutId)).map((r) => r.consumer)).toEqual([holding.consumer]);
  expect((await rig.ledger.entries(p.payoutId)).length).toBe(1);
}

/**
 * kill -9 in the middle of the work: the redelivery waits out the lease, takes over with the same record id, and
 * the bank finds the first attempt's payout: the work ran twice, the payout was made once.
 */
export async function killedInWork(rig: Rig, p: Payout): Promise<void> {
  const { group } = rig;
  await rig.publish(p, 'kill-in-work');
  const holding = await group.next('holding', (e) => e.payoutId === p.payoutId && e.at === 'in-work');
  const [worked] = group.of('worked', p.payoutId);
  expect(await group.kill(holding.consumer)).toBe('SIGKILL');
  const taker = (await group.next('acked', (e) => e.payoutId === p.payoutId, 30_000)).consumer;
  expect(taker === holding.consumer).toBe(false);
  expect(await rig.ledger.runs(p.payoutId)).toEqual([
    { payoutId: p.payoutId, recordId: worked!.recordId, consumer: holding.consumer, rerun: false },
    { payoutId: p.payoutId, recordId: worked!.recordId, consumer: taker, rerun: true },
  ]);
  expect(await rig.ledger.entries(p.payoutId)).toEqual([
    { entryId: worked!.recordId, payoutId: p.payoutId, amount: p.amount, postedBy: holding.consumer },
  ]);
}

/** The books hold exactly one payout per payout that went through (all but the declined one); returns the count. */
export async function booksBalance(rig: Rig, payouts: Cast): Promise<number> {
  const made = [payouts.twice, payouts.concurrent, payouts.killedBeforeAck, payouts.killedInWork, payouts.flaky];
  const counts = await rig.ledger.entryCounts();
  expect(counts).toEqual(Object.fromEntries([...made, ...payouts.outage].map((p) => [p.payoutId, 1])));
  return Object.values(counts).reduce((a, b) => a + b, 0);
}
