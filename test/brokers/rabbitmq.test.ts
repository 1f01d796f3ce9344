/**
 * Issue 19 on RabbitMQ: three real consumer processes (`rabbitmq-consumer.ts`: amqplib, manual acks, prefetch 1)
 * share one queue and one PostgreSQL store; each payment's effect is a ledger row keyed by the idempotency record
 * id. RabbitMQ delivers at least once; the ledger must end with exactly one row per payment. The queue, its
 * dead-letter exchange and queue, and the Postgres schema are this run's own (random suffix), removed afterwards.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, type ChannelModel, type ConfirmChannel, type GetMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../stores/cleanup.js';
import { AMQP_URL, POSTGRES_URL, serviceAvailable } from '../services.js';
import { ConsumerGroup, poll } from './group.js';
import { LIMIT, openLedger, type Ledger, type Payment } from './ledger.js';

const available =
  (await serviceAvailable('RabbitMQ', AMQP_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));

const suffix = randomBytes(5).toString('hex');
const QUEUE = `idem.payments.${suffix}`;
const DLX = `idem.payments.${suffix}.dlx`;
const DLQ = `idem.payments.${suffix}.dead`;
const SCHEMA = `idem_brokers_${suffix}`;
const LEDGER = (() => {
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('schema', SCHEMA);
  return url.toString();
})();

const pay = (amount = 500): Payment => ({ paymentId: `pay_${randomUUID()}`, amount, currency: 'usd' });
const twice = pay();
const concurrent = pay();
const declined = pay(LIMIT + 1);
const killedBeforeAck = pay();
const killedInWork = pay();

describe.skipIf(!available)('RabbitMQ consumers with idempotent() on PostgreSQL (issue 19)', () => {
  let ledger: Ledger;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let published = 0;
  const group = new ConsumerGroup('rabbitmq-consumer.ts', {
    AMQP_URL,
    QUEUE,
    LEDGER,
    LEASE_MS: '3000',
    DEFER_MAX_MS: '500',
    HOLD_IN_WORK: [concurrent.paymentId, killedInWork.paymentId].join(','),
    HOLD_BEFORE_ACK: killedBeforeAck.paymentId,
  });

  const publish = async (payment: Payment, messageId: string) => {
    channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify(payment)), {
      messageId,
      persistent: true,
      contentType: 'application/json',
    });
    await channel.waitForConfirms();
    published++;
  };
  const messagesIn = async (queue: string) => (await channel.checkQueue(queue)).messageCount;

  beforeAll(async () => {
    ledger = await openLedger(LEDGER, { create: true });
    connection = await connect(AMQP_URL);
    channel = await connection.createConfirmChannel();
    await channel.assertExchange(DLX, 'fanout', { durable: true });
    await channel.assertQueue(DLQ, { durable: true });
    await channel.bindQueue(DLQ, DLX, '');
    await channel.assertQueue(QUEUE, { durable: true, deadLetterExchange: DLX });
    await group.start(['c1', 'c2', 'c3']);
  }, 90_000);

  afterAll(async () => {
    await group.stop();
    if (channel) {
      await channel.deleteQueue(QUEUE);
      await channel.deleteQueue(DLQ);
      await channel.deleteExchange(DLX);
      await connection.close();
    }
    await ledger?.close();
    if (available) await dropSchema(SCHEMA);
  }, 30_000);

  it('the same message published twice (producer retry, same message id): two deliveries, one effect', async () => {
    await publish(twice, 'msg-twice');
    await publish(twice, 'msg-twice');
    const acked = await group.count('acked', twice.paymentId, 2);
    expect(acked.map((e) => e.ran).sort()).toEqual([false, true]);
    const [first, replay] = [true, false].map((ran) =>
      group.of('about-to-ack', twice.paymentId).find((e) => e.ran === ran)!,
    );
    expect(replay!.result).toEqual(first!.result);
    // Both copies may be in two consumers at once: the later one then waited, never ran.
    expect(group.of('deferred', twice.paymentId).map((e) => e.code)).toEqual(
      group.of('deferred', twice.paymentId).map(() => 'IN_FLIGHT'),
    );
    const [run] = await ledger.runs(twice.paymentId);
    expect(await ledger.runs(twice.paymentId)).toEqual([
      { paymentId: twice.paymentId, recordId: run!.recordId, consumer: first!.consumer, reclaimed: false },
    ]);
    expect(await ledger.entries(twice.paymentId)).toEqual([
      { entryId: run!.recordId, paymentId: twice.paymentId, amount: 500, postedBy: first!.consumer },
    ]);
  });

  it('two deliveries of one payment at once: one runs, the other defers (nack, requeue after a delay) until it replays', async () => {
    await publish(concurrent, 'msg-concurrent-1');
    const holding = await group.next('holding', (e) => e.paymentId === concurrent.paymentId && e.at === 'in-work');
    // The holder has its one unacknowledged message (prefetch 1): the second copy goes to another consumer.
    await publish(concurrent, 'msg-concurrent-2');
    const deferred = await group.next('deferred', (e) => e.paymentId === concurrent.paymentId);
    expect([deferred.code, deferred.consumer === holding.consumer]).toEqual(['IN_FLIGHT', false]);
    group.release(holding.consumer, concurrent.paymentId);
    const acked = await group.count('acked', concurrent.paymentId, 2);
    expect(acked.map((e) => [e.consumer === holding.consumer, e.ran]).sort()).toEqual([
      [false, false],
      [true, true],
    ]);
    for (const e of group.of('deferred', concurrent.paymentId))
      expect([e.code, e.consumer === holding.consumer]).toEqual(['IN_FLIGHT', false]);
    expect((await ledger.runs(concurrent.paymentId)).map((r) => r.consumer)).toEqual([holding.consumer]);
    expect((await ledger.entries(concurrent.paymentId)).map((e) => e.postedBy)).toEqual([holding.consumer]);
  });

  it('a payment declined for good runs once and is dead-lettered, and so is its producer retry (replayed), never requeued', async () => {
    await publish(declined, 'msg-declined-1');
    const first = await group.next('dead-lettered', (e) => e.paymentId === declined.paymentId);
    expect([first.ran, first.error]).toEqual([true, `Declined: amount ${LIMIT + 1} is over the limit`]);
    await publish(declined, 'msg-declined-2');
    const both = await group.count('dead-lettered', declined.paymentId, 2);
    expect(both.map((e) => [e.ran, e.error])).toEqual([
      [true, `Declined: amount ${LIMIT + 1} is over the limit`],
      [false, `Declined: amount ${LIMIT + 1} is over the limit`],
    ]);
    await poll(
      () => messagesIn(DLQ),
      (n) => n === 2,
      'dead-letter queue',
    );
    const dead: GetMessage[] = [];
    for (let m = await channel.get(DLQ); m; m = await channel.get(DLQ)) dead.push(m);
    for (const m of dead) channel.ack(m);
    expect(
      dead.map((m) => {
        const [death] = m.properties.headers?.['x-death'] as Array<{ queue: string; reason: string; count: number }>;
        return [
          m.properties.messageId as unknown,
          JSON.parse(m.content.toString()) as unknown,
          death!.queue,
          death!.reason,
          death!.count,
        ];
      }),
    ).toEqual([
      ['msg-declined-1', declined, QUEUE, 'rejected', 1],
      ['msg-declined-2', declined, QUEUE, 'rejected', 1],
    ]);
    expect(group.of('received', declined.paymentId).map((e) => e.redelivered)).toEqual([false, false]);
    expect(group.of('requeued', declined.paymentId)).toEqual([]);
    expect((await ledger.runs(declined.paymentId)).length).toBe(1);
    expect(await ledger.entries(declined.paymentId)).toEqual([]);
  });

  it('kill -9 after the work, before the ack: redelivered to another consumer, which replays and acks; the work ran once', async () => {
    await publish(killedBeforeAck, 'msg-kill-before-ack');
    const holding = await group.next(
      'holding',
      (e) => e.paymentId === killedBeforeAck.paymentId && e.at === 'before-ack',
    );
    const [done] = group.of('about-to-ack', killedBeforeAck.paymentId);
    expect(await group.kill(holding.consumer)).toBe('SIGKILL');
    const acked = await group.next('acked', (e) => e.paymentId === killedBeforeAck.paymentId);
    expect([acked.consumer === holding.consumer, acked.ran]).toEqual([false, false]);
    const replay = group.of('about-to-ack', killedBeforeAck.paymentId).find((e) => e.consumer === acked.consumer)!;
    expect(replay.result).toEqual(done!.result);
    expect(
      group.of('received', killedBeforeAck.paymentId).map((e) => [e.consumer === holding.consumer, e.redelivered]),
    ).toEqual([
      [true, false],
      [false, true],
    ]);
    expect((await ledger.runs(killedBeforeAck.paymentId)).map((r) => r.consumer)).toEqual([holding.consumer]);
    expect(await ledger.entries(killedBeforeAck.paymentId)).toEqual([done!.result]);
  });

  it('kill -9 in the middle of the work: the redelivery waits out the lease, takes over with the same id, and finds the first effect', async () => {
    await publish(killedInWork, 'msg-kill-in-work');
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
    // The work ran twice (the first attempt died in it), under one record id; the effect exists once.
    expect(await ledger.runs(killedInWork.paymentId)).toEqual([
      { paymentId: killedInWork.paymentId, recordId: worked!.recordId, consumer: holding.consumer, reclaimed: false },
      { paymentId: killedInWork.paymentId, recordId: worked!.recordId, consumer: taker, reclaimed: true },
    ]);
    expect((await ledger.entries(killedInWork.paymentId)).length).toBe(1);
  }, 40_000);

  it('the ledger holds exactly one effect per payment that went through; nothing is left in the queue', async () => {
    expect(await ledger.entryCounts()).toEqual({
      [twice.paymentId]: 1,
      [concurrent.paymentId]: 1,
      [killedBeforeAck.paymentId]: 1,
      [killedInWork.paymentId]: 1,
    });
    expect(await messagesIn(QUEUE)).toBe(0);
    const received = group.events.filter((e) => e.event === 'received');
    console.log(
      `RabbitMQ: ${published} messages published for 5 payments; ${received.length} deliveries, ` +
        `${received.filter((e) => e.redelivered).length} of them redeliveries; ` +
        `${group.events.filter((e) => e.event === 'deferred').length} deferrals; ` +
        `${Object.values(await ledger.entryCounts()).reduce((a, b) => a + b, 0)} ledger rows`,
    );
  });
});
