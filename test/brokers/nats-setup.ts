/**
 * The JetStream stream and consumer the documented NATS consumer reads from. The region below is
 * docs/CONSUMERS.md's setup, byte for byte (`docs.test.ts` checks it); `nats.test.ts` runs it with its own stream
 * name and shorter timers.
 */
// #region nats-setup
import { AckPolicy, nanos, type JetStreamManager } from 'nats';

/**
 * Once, when deploying: the stream of payout requests (`<stream>.requested.<payoutId>`, dead letters on
 * `<stream>.dead`) and the durable pull consumer every payout sender shares.
 */
export async function setUpPayouts(
  jsm: JetStreamManager,
  { stream = 'PAYOUTS', ackWaitMs = 30_000, maxDeliver = 50 } = {},
): Promise<void> {
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: nanos(120_000) });
  await jsm.consumers.add(stream, {
    durable_name: 'payout-sender',
    filter_subject: `${stream}.requested.>`,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(ackWaitMs),
    max_deliver: maxDeliver,
  });
}
// #endregion nats-setup
