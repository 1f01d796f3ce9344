/**
 * The RabbitMQ payout consumer of docs/CONSUMERS.md, run by `rabbitmq.test.ts` as it stands: the region below is
 * the documented code byte for byte (`docs.test.ts` checks it). Outside it, only `watch-rabbitmq.ts`, which
 * reports what the consumer asks of the broker and lets the tests stop it at the ack.
 *
 * Usage: `node --import tsx test/brokers/rabbitmq-consumer.ts` with AMQP_URL, PAYOUT_QUEUE and
 * PAYOUT_DELIVERY_LIMIT besides the variables of `payouts.ts`, `bank.ts` and `kit.ts`.
 */
import './watch-rabbitmq.js';
// #region rabbitmq-consumer
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type ConsumeMessage } from 'amqplib';
import { settle, type Payout } from './payouts.js';

const QUEUE = process.env.PAYOUT_QUEUE ?? 'payouts'; // dead letters go by `${QUEUE}.dlx` to `${QUEUE}.dead`
const DELIVERY_LIMIT = Number(process.env.PAYOUT_DELIVERY_LIMIT ?? 50);

const connection = await connect(process.env.AMQP_URL ?? 'amqp://localhost');
const channel = await connection.createChannel();
await channel.assertExchange(`${QUEUE}.dlx`, 'fanout', { durable: true });
await channel.assertQueue(`${QUEUE}.dead`, { durable: true });
await channel.bindQueue(`${QUEUE}.dead`, `${QUEUE}.dlx`, '');
await channel.assertQueue(QUEUE, {
  durable: true,
  deadLetterExchange: `${QUEUE}.dlx`,
  arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': DELIVERY_LIMIT },
});
await channel.prefetch(10);

async function handle(message: ConsumeMessage): Promise<void> {
  const payout = JSON.parse(message.content.toString('utf8')) as Payout;
  // The quorum queue counts the earlier deliveries (a requeue is one) and dead-letters past the limit.
  const last = Number(message.properties.headers?.['x-delivery-count'] ?? 0) >= DELIVERY_LIMIT;
  for (;;) {
    const next = await settle(payout);
    // Ack only now: a crash before this line redelivers the message, and the redelivery replays.
    if (next.action === 'ack') return channel.ack(message);
    if (next.action === 'dead-letter') return channel.nack(message, false, false); // → QUEUE.dlx → QUEUE.dead
    // RabbitMQ cannot requeue with a delay: hold the message (one of the 10 prefetched) for the delay.
    await sleep(next.delayMs);
    if (next.action === 'retry' || !last) return channel.nack(message, false, true);
    // The last delivery: a requeue would dead-letter a payout whose key is busy or whose store is down. Try again.
  }
}

await channel.consume(
  QUEUE,
  (message) => {
    if (!message) return; // the broker cancelled the consumer (the queue was deleted)
    handle(message).catch((error: unknown) => {
      console.error(error);
      process.exit(1);
    });
  },
  { noAck: false },
);
// #endregion rabbitmq-consumer
