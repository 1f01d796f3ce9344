/**
 * A NATS JetStream payment consumer process for `nats.test.ts` (docs/CONSUMERS.md has the same loop to copy).
 *
 * Usage: `node --import tsx test/brokers/nats-consumer.ts` with NATS_URL, STREAM, DURABLE (a pull consumer with
 * explicit acks, made by the test), DLQ_SUBJECT and MAX_DELIVER besides the variables of `kit.ts`. It pulls one
 * message at a time (`next()`), so a message redelivered while this process works goes to another process. Ack
 * after the idempotent call returned (a replay included); on IN_FLIGHT / STORE_UNAVAILABLE `nak(delay)`; on a
 * final failure publish to the dead-letter subject (deduplicated by the stream on `dlq:<key>`), then `term()`;
 * a retryable error naks, and is dead-lettered the same way at the last delivery the consumer allows.
 *
 * It does not call `working()` while the work runs: the tests let `ack_wait` lapse on purpose, to redeliver a
 * message that is still being worked on.
 */
import { connect, headers, type JsMsg } from 'nats';
import type { Payment } from './ledger.js';
import { crash, env, holdPoint, paymentWork, say } from './kit.js';

const stream = env('STREAM');
const dlqSubject = env('DLQ_SUBJECT');
const maxDeliver = Number(env('MAX_DELIVER'));
const { ledger, decide } = await paymentWork();
const nc = await connect({ servers: env('NATS_URL'), name: process.env.CONSUMER ?? 'consumer' });
const js = nc.jetstream();
const consumer = await js.consumers.get(stream, env('DURABLE'));

async function deadLetter(message: JsMsg, paymentId: string, reason: string): Promise<void> {
  const h = headers();
  h.set('Idem-Dead-Letter-Reason', reason);
  h.set('Idem-Original-Subject', message.subject);
  // Deduplicated by the stream: a crash between this publish and term() redelivers, replays, publishes again.
  await js.publish(dlqSubject, message.data, { msgID: `dlq:${paymentId}`, headers: h });
  message.term();
}

async function handle(message: JsMsg): Promise<void> {
  const payment = message.json<Payment>();
  const { paymentId } = payment;
  say({ event: 'received', paymentId, redelivered: message.redelivered, deliveries: message.info.deliveryCount });
  const verdict = await decide(payment);
  switch (verdict.action) {
    case 'ack':
      say({ event: 'about-to-ack', paymentId, ran: verdict.ran, reclaimed: verdict.reclaimed, result: verdict.result });
      if (verdict.ran && !verdict.reclaimed) await holdPoint('before-ack', paymentId);
      await message.ackAck();
      say({ event: 'acked', paymentId, ran: verdict.ran });
      return;
    case 'defer':
      message.nak(verdict.delayMs);
      say({ event: 'deferred', paymentId, code: verdict.code, delayMs: verdict.delayMs });
      return;
    case 'dead-letter':
      await deadLetter(message, paymentId, verdict.error);
      say({ event: 'dead-lettered', paymentId, ran: verdict.ran, error: verdict.error });
      return;
    case 'retry':
      if (message.info.deliveryCount >= maxDeliver) {
        await deadLetter(
          message,
          paymentId,
          `gave up after ${message.info.deliveryCount} deliveries: ${verdict.error}`,
        );
        say({ event: 'dead-lettered', paymentId, ran: true, error: verdict.error });
      } else {
        message.nak(1_000);
        say({ event: 'requeued', paymentId, error: verdict.error });
      }
      return;
  }
}

let stopping = false;
process.once('SIGTERM', () => (stopping = true));
say({ event: 'ready' });
try {
  while (!stopping) {
    const message = await consumer.next({ expires: 1_000 });
    if (message) await handle(message);
  }
  await nc.drain();
  await ledger.close();
  process.exit(0);
} catch (error) {
  crash(error);
}
