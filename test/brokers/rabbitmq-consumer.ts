/**
 * A RabbitMQ payment consumer process for `rabbitmq.test.ts` (docs/CONSUMERS.md has the same loop to copy).
 *
 * Usage: `node --import tsx test/brokers/rabbitmq-consumer.ts` with AMQP_URL and QUEUE (declared by the test with
 * a dead-letter exchange) besides the variables of `kit.ts`. Manual acks, one unacknowledged message at a time:
 * ack after the idempotent call returned (a replay included); on IN_FLIGHT / STORE_UNAVAILABLE wait, then
 * nack with requeue; on a final failure nack without requeue, so the queue's dead-letter exchange takes it.
 */
import { connect, type ConsumeMessage } from 'amqplib';
import type { Payment } from './ledger.js';
import { crash, env, holdPoint, paymentWork, say, sleep } from './kit.js';

const queue = env('QUEUE');
const { ledger, decide } = await paymentWork();
const connection = await connect(env('AMQP_URL'));
const channel = await connection.createChannel();
await channel.prefetch(1);

async function handle(message: ConsumeMessage): Promise<void> {
  const payment = JSON.parse(message.content.toString('utf8')) as Payment;
  const { paymentId } = payment;
  say({ event: 'received', paymentId, redelivered: message.fields.redelivered, deliveries: null });
  const verdict = await decide(payment);
  switch (verdict.action) {
    case 'ack':
      say({ event: 'about-to-ack', paymentId, ran: verdict.ran, reclaimed: verdict.reclaimed, result: verdict.result });
      if (verdict.ran && !verdict.reclaimed) await holdPoint('before-ack', paymentId);
      channel.ack(message);
      say({ event: 'acked', paymentId, ran: verdict.ran });
      return;
    case 'defer':
      // Classic queues have no delayed requeue: hold the message for the delay (prefetch 1 keeps this consumer
      // from taking another meanwhile), then put it back at the head of the queue.
      say({ event: 'deferred', paymentId, code: verdict.code, delayMs: verdict.delayMs });
      await sleep(verdict.delayMs);
      channel.nack(message, false, true);
      return;
    case 'dead-letter':
      channel.nack(message, false, false);
      say({ event: 'dead-lettered', paymentId, ran: verdict.ran, error: verdict.error });
      return;
    case 'retry':
      say({ event: 'requeued', paymentId, error: verdict.error });
      await sleep(1_000);
      channel.nack(message, false, true);
      return;
  }
}

await channel.consume(
  queue,
  (message) => {
    if (message === null) crash(new Error('the broker cancelled the consumer'));
    handle(message).catch(crash);
  },
  { noAck: false },
);
process.once('SIGTERM', () => {
  connection
    .close()
    .then(() => ledger.close())
    .then(() => process.exit(0), crash);
});
say({ event: 'ready' });
