/**
 * Issue 19 on NATS JetStream: three real consumer processes (`nats-consumer.ts`: one durable pull consumer,
 * explicit acks, `ack_wait` 2 s) share one SQLite file as the store and the ledger; each payment's effect is a
 * ledger row keyed by the idempotency record id. JetStream redelivers whatever is not acked within `ack_wait`;
 * the ledger must end with exactly one row per payment. The stream (and with it the consumer) is this run's own
 * (random suffix), deleted afterwards, with the SQLite file.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AckPolicy,
  connect,
  JSONCodec,
  nanos,
  StorageType,
  type JetStreamManager,
  type NatsConnection,
  type Subscription,
} from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS_URL, serviceAvailable } from '../services.js';
import { ConsumerGroup, poll } from './group.js';
import { LIMIT, openLedger, type Ledger, type Payment } from './ledger.js';

const available = await serviceAvailable('NATS', NATS_URL);

const suffix = randomBytes(5).toString('hex');
const STREAM = `IDEM_PAYMENTS_${suffix}`;
const DURABLE = `payments_${suffix}`;
const SUBJECTS = `idem_${suffix}`;
const DLQ_SUBJECT = `${SUBJECTS}.dead`;
const ACK_WAIT_MS = 2_000;
const DIR = join(tmpdir(), `idem-nats-${suffix}`);
const LEDGER = `sqlite:${join(DIR, 'idem.db')}`;

const pay = (amount = 500): Payment => ({ paymentId: `pay_${randomUUID()}`, amount, currency: 'usd' });
const twice = pay();
const concurrent = pay();
const declined = pay(LIMIT + 1);
const killedBeforeAck = pay();
const killedInWork = pay();

describe.skipIf(!available)('NATS JetStream consumers with idempotent() on an SQLite file (issue 19)', () => {
  let ledger: Ledger;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let terminated: Subscription;
  const terminations: number[] = [];
  let published = 0;
  const group = new ConsumerGroup('nats-consumer.ts', {
    NATS_URL,
    STREAM,
    DURABLE,
    DLQ_SUBJECT,
    MAX_DELIVER: '20',
    LEDGER,
    LEASE_MS: '3000',
    DEFER_MAX_MS: '500',
    HOLD_IN_WORK: [concurrent.paymentId, killedInWork.paymentId].join(','),
    HOLD_BEFORE_ACK: killedBeforeAck.paymentId,
  });

  const publish = async (payment: Payment, msgID: string) => {
    const ack = await nc
      .jetstream()
      .publish(`${SUBJECTS}.payments.${payment.paymentId}`, JSON.stringify(payment), { msgID });
    published++;
    return ack;
  };
  const messagesOn = async (subject: string) =>
    (await jsm.streams.info(STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
  const consumerState = async () => {
    const info = await jsm.consumers.info(STREAM, DURABLE);
    return { pending: info.num_pending, ackPending: info.num_ack_pending };
  };

  beforeAll(async () => {
    mkdirSync(DIR);
    ledger = await openLedger(LEDGER, { create: true });
    nc = await connect({ servers: NATS_URL });
    jsm = await nc.jetstreamManager();
    await jsm.streams.add({
      name: STREAM,
      subjects: [`${SUBJECTS}.>`],
      storage: StorageType.Memory,
      duplicate_window: nanos(120_000),
    });
    await jsm.consumers.add(STREAM, {
      durable_name: DURABLE,
      filter_subject: `${SUBJECTS}.payments.>`,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(ACK_WAIT_MS),
      max_deliver: 20,
    });
    // JetStream announces every term(): the proof that a message is not redelivered.
    terminated = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${STREAM}.${DURABLE}`, {
      callback: (error, message) => {
        if (!error) terminations.push(JSONCodec<{ stream_seq: number }>().decode(message.data).stream_seq);
      },
    });
    await group.start(['n1', 'n2', 'n3']);
  }, 90_000);

  afterAll(async () => {
    await group.stop();
    if (nc) {
      terminated.unsubscribe();
      await jsm.streams.delete(STREAM).catch(() => false);
      await nc.close();
    }
    await ledger?.close();
    rmSync(DIR, { recursive: true, force: true });
  }, 30_000);

  it('the same payment published twice: JetStream drops the same msgID; a new msgID for the same payment replays; one effect', async () => {
    const [first, duplicate, retried] = [
      await publish(twice, 'twice-1'),
      await publish(twice, 'twice-1'),
      await publish(twice, 'twice-2'),
    ];
    expect([first.duplicate, duplicate.duplicate, duplicate.seq === first.seq, retried.duplicate]).toEqual([
      false,
      true,
      true,
      false,
    ]);
    const acked = await group.count('acked', twice.paymentId, 2);
    expect(acked.map((e) => e.ran).sort()).toEqual([false, true]);
    const [ran, replay] = [true, false].map((r) => group.of('about-to-ack', twice.paymentId).find((e) => e.ran === r)!);
    expect(replay!.result).toEqual(ran!.result);
    for (const e of group.of('deferred', twice.paymentId)) expect(e.code).toBe('IN_FLIGHT');
    expect(await messagesOn(`${SUBJECTS}.payments.${twice.paymentId}`)).toBe(2);
    expect((await ledger.runs(twice.paymentId)).map((r) => r.consumer)).toEqual([ran!.consumer]);
    expect(await ledger.entries(twice.paymentId)).toEqual([ran!.result]);
  });

  it('ack_wait lapses while the work runs: the redelivery goes to another consumer, which naks with a delay; the work runs once', async () => {
    await publish(concurrent, 'concurrent-1');
    const holding = await group.next('holding', (e) => e.paymentId === concurrent.paymentId && e.at === 'in-work');
    // No ack within ack_wait: JetStream redelivers the message, still being worked on, to another process.
    const deferred = await group.next('deferred', (e) => e.paymentId === concurrent.paymentId);
    expect([deferred.code, deferred.consumer === holding.consumer]).toEqual(['IN_FLIGHT', false]);
    const redelivery = group.of('received', concurrent.paymentId).find((e) => e.consumer === deferred.consumer)!;
    expect([redelivery.redelivered, redelivery.deliveries! >= 2]).toEqual([true, true]);
    group.release(holding.consumer, concurrent.paymentId);
    const acked = await group.next(
      'acked',
      (e) => e.paymentId === concurrent.paymentId && e.consumer === holding.consumer,
    );
    expect(acked.ran).toBe(true);
    await poll(consumerState, (s) => s.ackPending === 0, 'ack pending');
    for (const e of group.of('deferred', concurrent.paymentId))
      expect([e.code, e.consumer === holding.consumer]).toEqual(['IN_FLIGHT', false]);
    expect(
      group
        .of('acked', concurrent.paymentId)
        .filter((e) => e.ran)
        .map((e) => e.consumer),
    ).toEqual([holding.consumer]);
    expect((await ledger.runs(concurrent.paymentId)).map((r) => r.consumer)).toEqual([holding.consumer]);
    expect((await ledger.entries(concurrent.paymentId)).map((e) => e.postedBy)).toEqual([holding.consumer]);
  });

  it('a payment declined for good runs once, goes to the dead-letter subject once and is terminated; its retry replays', async () => {
    const first = await publish(declined, 'declined-1');
    const dead = await group.next('dead-lettered', (e) => e.paymentId === declined.paymentId);
    expect([dead.ran, dead.error]).toEqual([true, `Declined: amount ${LIMIT + 1} is over the limit`]);
    await poll(
      async () => terminations,
      (t) => t.includes(first.seq),
      'the term() advisory',
    );
    const retry = await publish(declined, 'declined-2');
    const both = await group.count('dead-lettered', declined.paymentId, 2);
    expect(both.map((e) => e.ran)).toEqual([true, false]);
    await poll(
      async () => terminations,
      (t) => t.includes(retry.seq),
      'the term() advisory',
    );
    // One dead letter: the second publish carried the same Nats-Msg-Id (dlq:<paymentId>) and was dropped.
    expect(await messagesOn(DLQ_SUBJECT)).toBe(1);
    const letter = await jsm.streams.getMessage(STREAM, { last_by_subj: DLQ_SUBJECT });
    expect([letter.json<Payment>(), letter.header.get('Idem-Dead-Letter-Reason')]).toEqual([
      declined,
      `Declined: amount ${LIMIT + 1} is over the limit`,
    ]);
    expect(group.of('received', declined.paymentId).map((e) => e.deliveries)).toEqual([1, 1]);
    expect(group.of('requeued', declined.paymentId)).toEqual([]);
    expect((await ledger.runs(declined.paymentId)).length).toBe(1);
    expect(await ledger.entries(declined.paymentId)).toEqual([]);
  });

  it('kill -9 after the work, before the ack: redelivered after ack_wait to another consumer, which replays and acks', async () => {
    await publish(killedBeforeAck, 'kill-before-ack');
    const holding = await group.next(
      'holding',
      (e) => e.paymentId === killedBeforeAck.paymentId && e.at === 'before-ack',
    );
    const [done] = group.of('about-to-ack', killedBeforeAck.paymentId);
    expect(await group.kill(holding.consumer)).toBe('SIGKILL');
    const acked = await group.next('acked', (e) => e.paymentId === killedBeforeAck.paymentId);
    expect([acked.consumer === holding.consumer, acked.ran]).toEqual([false, false]);
    expect(
      group.of('about-to-ack', killedBeforeAck.paymentId).find((e) => e.consumer === acked.consumer)!.result,
    ).toEqual(done!.result);
    expect(
      group.of('received', killedBeforeAck.paymentId).map((e) => [e.consumer === holding.consumer, e.deliveries]),
    ).toEqual([
      [true, 1],
      [false, 2],
    ]);
    expect((await ledger.runs(killedBeforeAck.paymentId)).map((r) => r.consumer)).toEqual([holding.consumer]);
    expect(await ledger.entries(killedBeforeAck.paymentId)).toEqual([done!.result]);
  });

  it('kill -9 in the middle of the work: the redelivery waits out the lease, takes over with the same id, and finds the first effect', async () => {
    await publish(killedInWork, 'kill-in-work');
    const holding = await group.next('holding', (e) => e.paymentId === killedInWork.paymentId && e.at === 'in-work');
    const [worked] = group.of('worked', killedInWork.paymentId);
    expect(await group.kill(holding.consumer)).toBe('SIGKILL');
    const acked = await group.next('acked', (e) => e.paymentId === killedInWork.paymentId);
    const taker = acked.consumer;
    expect([taker === holding.consumer, acked.ran]).toEqual([false, true]);
    const done = group.of('about-to-ack', killedInWork.paymentId).find((e) => e.consumer === taker)!;
    expect([done.reclaimed, done.result]).toEqual([
      true,
      { entryId: worked!.recordId, paymentId: killedInWork.paymentId, amount: 500, postedBy: holding.consumer },
    ]);
    for (const e of group.of('deferred', killedInWork.paymentId)) expect(e.code).toBe('IN_FLIGHT');
    expect(await ledger.runs(killedInWork.paymentId)).toEqual([
      { paymentId: killedInWork.paymentId, recordId: worked!.recordId, consumer: holding.consumer, reclaimed: false },
      { paymentId: killedInWork.paymentId, recordId: worked!.recordId, consumer: taker, reclaimed: true },
    ]);
    expect((await ledger.entries(killedInWork.paymentId)).length).toBe(1);
  }, 40_000);

  it('the ledger holds exactly one effect per payment that went through; nothing is pending or awaiting an ack', async () => {
    expect(await ledger.entryCounts()).toEqual({
      [twice.paymentId]: 1,
      [concurrent.paymentId]: 1,
      [killedBeforeAck.paymentId]: 1,
      [killedInWork.paymentId]: 1,
    });
    expect(await poll(consumerState, (s) => s.ackPending === 0, 'ack pending')).toEqual({ pending: 0, ackPending: 0 });
    const received = group.events.filter((e) => e.event === 'received');
    console.log(
      `NATS: ${published} messages published for 5 payments (1 dropped by the stream as a duplicate); ${received.length} deliveries, ` +
        `${received.filter((e) => e.redelivered).length} of them redeliveries; ` +
        `${group.events.filter((e) => e.event === 'deferred').length} deferrals; ` +
        `${Object.values(await ledger.entryCounts()).reduce((a, b) => a + b, 0)} ledger rows`,
    );
  });
});
