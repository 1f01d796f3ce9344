/**
 * Issue 19 and issue 27 on RabbitMQ: three processes run the documented consumer (`rabbitmq-consumer.ts`, the code
 * docs/CONSUMERS.md shows: amqplib, manual acks, prefetch 10, a quorum queue with a delivery limit of 3 here). They
 * share one PostgreSQL schema, reached through a fault proxy, for the idempotency records; the test bank's books
 * (one row per payout made, keyed by the record id) sit in the same schema, reached directly. The queue, its
 * dead-letter exchange and queue, and the schema are this run's own (random suffix), removed afterwards.
 */
import { randomBytes } from 'node:crypto';
import { connect, type ChannelModel, type ConfirmChannel, type GetMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { AMQP_URL, POSTGRES_URL, serviceAvailable } from '../services.js';
import { dropSchema } from '../stores/cleanup.js';
import { ConsumerGroup, poll } from './group.js';
import { openLedger, type Ledger } from './ledger.js';
import type { Payout } from './payouts.js';
import * as scenario from './scenarios.js';

const available =
  (await serviceAvailable('RabbitMQ', AMQP_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));

const suffix = randomBytes(5).toString('hex');
const QUEUE = `idem.payouts.${suffix}`;
const DLX = `${QUEUE}.dlx`;
const DLQ = `${QUEUE}.dead`;
const DELIVERY_LIMIT = 3;
const SCHEMA = `idem_rabbitmq_${suffix}`;

const payouts = scenario.cast();
const { twice, concurrent, declined, flaky, outage } = payouts;

describe.skipIf(!available)('RabbitMQ: the documented consumer, with idempotent() on PostgreSQL', () => {
  let ledger: Ledger;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let proxy: FaultProxy;
  let group: ConsumerGroup;
  let published = 0;
  const measured: string[] = [];

  const publish = async (p: Payout, messageId: string) => {
    channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify(p)), {
      messageId,
      persistent: true,
      contentType: 'application/json',
    });
    await channel.waitForConfirms();
    published++;
  };
  const messagesIn = async (queue: string) => (await channel.checkQueue(queue)).messageCount;
  const rig = (): scenario.Rig => ({
    broker: 'RabbitMQ',
    group,
    ledger,
    proxy,
    // x-delivery-count counts the earlier deliveries: the message is dead-lettered after it reaches the limit.
    lastDelivery: DELIVERY_LIMIT + 1,
    publish,
    deadLetters: () => messagesIn(DLQ),
  });

  beforeAll(async () => {
    ledger = await openLedger(scenario.booksUrl(SCHEMA), { create: true });
    proxy = await startFaultProxy(new URL(POSTGRES_URL).hostname, Number(new URL(POSTGRES_URL).port));
    connection = await connect(AMQP_URL);
    channel = await connection.createConfirmChannel();
    group = new ConsumerGroup('rabbitmq-consumer.ts', {
      AMQP_URL,
      PAYOUT_QUEUE: QUEUE,
      PAYOUT_DELIVERY_LIMIT: String(DELIVERY_LIMIT),
      ...scenario.consumerEnv(proxy, SCHEMA, payouts),
    });
    // The consumers declare the queue, its dead-letter exchange and queue (as documented) before they consume.
    await group.start(['c1', 'c2', 'c3']);
  }, 90_000);

  afterAll(async () => {
    await group?.stop();
    if (channel) {
      await channel.deleteQueue(QUEUE);
      await channel.deleteQueue(DLQ);
      await channel.deleteExchange(DLX);
      await connection.close();
    }
    await ledger?.close();
    await proxy?.close();
    if (available) await dropSchema(SCHEMA);
    console.log(measured.join('\n'));
  }, 30_000);

  it('the same message published twice (producer retry, same message id): two deliveries, one payout made', async () => {
    await publish(twice, 'msg-twice');
    await publish(twice, 'msg-twice');
    await group.count('acked', twice.payoutId, 2);
    await scenario.ranOnce(rig(), twice);
  });

  it('a second copy delivered while the work runs: deferred (held, requeued, then held at the last delivery), never dead-lettered; the work runs once', async () => {
    measured.push(
      await scenario.copyWhileWorking(
        rig(),
        concurrent,
        () => publish(concurrent, 'msg-concurrent-1'),
        () => publish(concurrent, 'msg-concurrent-2'),
      ),
    );
    expect(await group.count('acked', concurrent.payoutId, 2)).toHaveLength(2);
    expect(await messagesIn(QUEUE)).toBe(0);
  }, 40_000);

  it('a payout declined for good runs once and is dead-lettered, and so is its producer retry (replayed), never requeued', async () => {
    await publish(declined, 'msg-declined-1');
    await group.next('dead-lettered', (e) => e.payoutId === declined.payoutId);
    await publish(declined, 'msg-declined-2');
    await group.count('dead-lettered', declined.payoutId, 2);
    await poll(
      () => messagesIn(DLQ),
      (n) => n === 2,
      'dead-letter queue',
    );
    // The test reads (and so removes) both dead letters; later scenarios count none.
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
        ];
      }),
    ).toEqual([
      ['msg-declined-1', declined, QUEUE, 'rejected'],
      ['msg-declined-2', declined, QUEUE, 'rejected'],
    ]);
    expect(group.of('received', declined.payoutId).map((e) => e.deliveries)).toEqual([1, 1]);
    expect(group.of('requeued', declined.payoutId)).toEqual([]);
    expect((await ledger.runs(declined.payoutId)).length).toBe(1);
    expect(await ledger.entries(declined.payoutId)).toEqual([]);
  });

  it('kill -9 after the work, before the ack: redelivered to another consumer, which replays and acks; the work ran once', async () => {
    await scenario.killedBeforeAck(rig(), payouts.killedBeforeAck);
  });

  it('kill -9 in the middle of the work: the redelivery waits out the lease, takes over with the same id, and finds the first payout', async () => {
    await scenario.killedInWork(rig(), payouts.killedInWork);
  }, 40_000);

  it('a retryable error in the work: held 1 s, requeued, the next delivery runs it again with the same id; one payout made', async () => {
    measured.push(await scenario.retryableError(rig(), flaky));
  });

  it('the store is down for 2 s while payouts arrive: no consumer crashes, no dead letter; afterwards each is made exactly once', async () => {
    measured.push(await scenario.storeOutage(rig(), outage));
  }, 40_000);

  it('the books hold exactly one payout per payout that went through; nothing is left in the queue', async () => {
    const made = await scenario.booksBalance(rig(), payouts);
    expect(await messagesIn(QUEUE)).toBe(0);
    const received = group.events.filter((e) => e.event === 'received');
    measured.push(
      `RabbitMQ: ${published} messages published for 11 payouts; ${received.length} deliveries; ` +
        `${group.events.filter((e) => e.event === 'requeued').length} requeues; ` +
        `${made} payouts made`,
    );
  });
});
