/**
 * The NATS JetStream payout consumer of docs/CONSUMERS.md, run by `nats.test.ts` as it stands: the region below
 * is the documented code byte for byte (`docs.test.ts` checks it). Outside it, only `watch-nats.ts`, which
 * reports what the consumer asks of the broker and lets the tests stop it at the ack.
 *
 * Usage: `node --import tsx test/brokers/nats-consumer.ts` with NATS_URL and PAYOUT_STREAM (made by
 * `setUpPayouts()`) besides the variables of `payouts.ts`, `bank.ts` and `kit.ts`.
 */
import './watch-nats.js';
// #region nats-consumer
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, headers, millis, nanos, type JsMsg } from 'nats';
import { settle, type Payout } from './payouts.js';

const STREAM = process.env.PAYOUT_STREAM ?? 'PAYOUTS';
const nc = await connect({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222' });
const js = nc.jetstream();
const consumer = await js.consumers.get(STREAM, 'payout-sender');
// The heartbeat and the last delivery follow the consumer's own settings (setUpPayouts()).
const { ack_wait: ackWait = nanos(30_000), max_deliver: maxDeliver = -1 } = (await consumer.info()).config;

async function deadLetter(message: JsMsg, payout: Payout, reason: string): Promise<void> {
  const h = headers();
  h.set('Dead-Letter-Reason', reason);
  // The msgID makes a second dead letter for the same payout (after a crash before term()) a duplicate.
  await js.publish(`${STREAM}.dead`, message.data, { msgID: `dead:${payout.payoutId}`, headers: h });
  message.term();
}

async function handle(message: JsMsg): Promise<void> {
  const payout = message.json<Payout>();
  const last = maxDeliver > 0 && message.info.deliveryCount >= maxDeliver; // JetStream will not deliver it again
  const heartbeat = setInterval(() => message.working(), millis(ackWait) / 3); // ack_wait must not lapse meanwhile
  try {
    for (;;) {
      const next = await settle(payout);
      if (next.action === 'ack') {
        await message.ackAck(); // only now: a crash before this line redelivers, and the redelivery replays
        return;
      }
      if (next.action === 'dead-letter') return await deadLetter(message, payout, next.reason);
      if (!last) return message.nak(next.delayMs); // whole milliseconds (verdict()), or it comes back at once
      if (next.action === 'retry') return await deadLetter(message, payout, `gave up: ${next.reason}`);
      // The last delivery, and the key is busy or the store is down: a nak would strand it. Try again here.
      await sleep(next.delayMs);
    }
  } finally {
    clearInterval(heartbeat);
  }
}

for (;;) {
  const message = await consumer.next({ expires: 30_000 }); // one at a time: a redelivery goes to another process
  if (message) await handle(message);
}
// #endregion nats-consumer
