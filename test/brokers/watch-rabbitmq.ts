/**
 * Imported first by `rabbitmq-consumer.ts`: wraps amqplib's `Channel` so that the documented consumer, unchanged,
 * reports to the test what it asks of the broker (`ready` once it consumes; `received`, `acked`, `requeued`,
 * `dead-lettered` per message), and stops at the ack where the test asked (HOLD_BEFORE_ACK, in the process that
 * ran the work): the ack then reaches the broker on `release`, or never if the process is killed.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Channel as ChannelType, ConsumeMessage } from 'amqplib';
import { holdPoint, holdsFor, payoutIdOf, ranHere, say } from './kit.js';

const require = createRequire(import.meta.url);
// amqplib's `exports` hides its channel class; the module is the one `import 'amqplib'` loads.
const { Channel } = require(join(dirname(require.resolve('amqplib')), 'lib/channel_model.js')) as {
  Channel: { prototype: ChannelType };
};
// eslint-disable-next-line @typescript-eslint/unbound-method -- each is called with .call(this) below
const { consume, ack, nack } = Channel.prototype;

Channel.prototype.consume = async function (this: ChannelType, queue, onMessage, options) {
  const reply = await consume.call(
    this,
    queue,
    (message: ConsumeMessage | null) => {
      if (message) {
        const deliveries = Number(message.properties.headers?.['x-delivery-count'] ?? 0) + 1;
        say({ event: 'received', payoutId: payoutIdOf(message.content), deliveries });
      }
      onMessage(message);
    },
    options,
  );
  say({ event: 'ready' });
  return reply;
};

Channel.prototype.ack = function (this: ChannelType, message, allUpTo) {
  const payoutId = payoutIdOf(message.content);
  const done = () => {
    ack.call(this, message, allUpTo);
    say({ event: 'acked', payoutId });
  };
  if (ranHere.has(payoutId) && holdsFor('before-ack', payoutId)) void holdPoint('before-ack', payoutId).then(done);
  else done();
};

Channel.prototype.nack = function (this: ChannelType, message, allUpTo, requeue) {
  nack.call(this, message, allUpTo, requeue);
  const payoutId = payoutIdOf(message.content);
  say(requeue === false ? { event: 'dead-lettered', payoutId } : { event: 'requeued', payoutId, delayMs: null });
};
