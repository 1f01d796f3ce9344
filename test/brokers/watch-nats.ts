/**
 * Imported first by `nats-consumer.ts`: wraps the nats client's pull consumer and JetStream message so that the
 * documented consumer, unchanged, reports to the test what it asks of the broker (`ready` once it pulls;
 * `received`, `acked`, `requeued` with the nak delay as given, `dead-lettered` per message), and:
 * - stops at the ack where the test asked (HOLD_BEFORE_ACK, in the process that ran the work): the ack then
 *   reaches the server on `release`, or never if the process is killed;
 * - drops `working()` for a payout held in its work, as if the heartbeats were lost on the way: `ack_wait` then
 *   lapses and JetStream redelivers a message that is still being worked on.
 */
import type { JsMsg } from 'nats';
import { PullConsumerImpl } from 'nats/lib/jetstream/consumer.js';
import { JsMsgImpl } from 'nats/lib/jetstream/jsmsg.js';
import { heldInWork, holdPoint, holdsFor, payoutIdOf, ranHere, say } from './kit.js';

// eslint-disable-next-line @typescript-eslint/unbound-method -- each is called with .call(this) below
const { next } = PullConsumerImpl.prototype;
// eslint-disable-next-line @typescript-eslint/unbound-method -- each is called with .call(this) below
const { ackAck, nak, term, working } = JsMsgImpl.prototype;
let pulling = false;

PullConsumerImpl.prototype.next = async function (this: PullConsumerImpl, options) {
  if (!pulling) say({ event: 'ready' });
  pulling = true;
  const message = await next.call(this, options);
  if (message) say({ event: 'received', payoutId: payoutIdOf(message.data), deliveries: message.info.deliveryCount });
  return message;
};

JsMsgImpl.prototype.ackAck = async function (this: JsMsg, options) {
  const payoutId = payoutIdOf(this.data);
  if (ranHere.has(payoutId) && holdsFor('before-ack', payoutId)) await holdPoint('before-ack', payoutId);
  const acked = await ackAck.call(this, options);
  say({ event: 'acked', payoutId });
  return acked;
};

JsMsgImpl.prototype.nak = function (this: JsMsg, delayMs) {
  nak.call(this, delayMs);
  say({ event: 'requeued', payoutId: payoutIdOf(this.data), delayMs: delayMs ?? null });
};

JsMsgImpl.prototype.term = function (this: JsMsg, reason) {
  term.call(this, reason);
  say({ event: 'dead-lettered', payoutId: payoutIdOf(this.data) });
};

JsMsgImpl.prototype.working = function (this: JsMsg) {
  if (!heldInWork.has(payoutIdOf(this.data))) working.call(this);
};
