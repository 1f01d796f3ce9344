/**
 * Issue 19 and issue 27 on NATS JetStream: three processes run the documented consumer (`nats-consumer.ts`, the
 * code docs/CONSUMERS.md shows) on one durable pull consumer made by the documented `setUpPayouts()` (explicit
 * acks, `ack_wait` 2 s, 4 deliveries at most). They share one PostgreSQL schema, reached through a fault proxy,
 * for the idempotency records; the test bank's books (one row per payout made, keyed by the record id) sit in the
 * same schema, reached directly. The stream (and with it the consumer) and the schema are this run's own (random
 * suffix), deleted afterwards.
 */
import { randomBytes } from 'node:crypto';
import { connect, JSONCodec, type JetStreamManager, type NatsConnection, type Subscription } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { NATS_URL, POSTGRES_URL, serviceAvailable } from '../services.js';
import { dropSchema } from '../stores/cleanup.js';
import { ConsumerGroup, poll } from './group.js';
import { LIMIT, openLedger, type Ledger } from './ledger.js';
import { setUpPayouts } from './nats-setup.js';
import type { Payout } from './payouts.js';
import * as scenario from './scenarios.js';

const available = (await serviceAvailable('NATS', NATS_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));

const suffix = randomBytes(5).toString('hex');
const STREAM = `IDEM_PAYOUTS_${suffix}`;
const DLQ_SUBJECT = `${STREAM}.dead`;
const MAX_DELIVER = 4;
const SCHEMA = `idem_nats_${suffix}`;

const payouts = scenario.cast();
const { twice, concurrent, declined, flaky, outage } = payouts;

describe.skipIf(!available)('NATS JetStream: the documented consumer, with idempotent() on PostgreSQL', () => {
  let ledger: Ledger;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let proxy: FaultProxy;
  let terminated: Subscription;
  const terminations: number[] = [];
  let published = 0;
  let group: ConsumerGroup;
  const measured: string[] = [];

  const publish = async (p: Payout, msgID: string) => {
    const ack = await nc.jetstream().publish(`${STREAM}.requested.${p.payoutId}`, JSON.stringify(p), { msgID });
    published++;
    return ack;
  };
  const messagesOn = async (subject: string) =>
    (await jsm.streams.info(STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
  const consumerState = async () => {
    const info = await jsm.consumers.info(STREAM, 'payout-sender');
    return { pending: info.num_pending, ackPending: info.num_ack_pending };
  };
  const rig = (): scenario.Rig => ({
    broker: 'NATS',
    group,
    ledger,
    proxy,
    lastDelivery: MAX_DELIVER,
    publish: async (p, id) => void (await publish(p, id)),
    deadLetters: () => messagesOn(DLQ_SUBJECT),
  });

  beforeAll(async () => {
    ledger = await openLedger(scenario.booksUrl(SCHEMA), { create: true });
    proxy = await startFaultProxy(new URL(POSTGRES_URL).hostname, Number(new URL(POSTGRES_URL).port));
    nc = await connect({ servers: NATS_URL });
    jsm = await nc.jetstreamManager();
    await setUpPayouts(jsm, { stream: STREAM, ackWaitMs: 2_000, maxDeliver: MAX_DELIVER });
    // JetStream announces every term(): the proof that a message is not redelivered.
    terminated = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${STREAM}.payout-sender`, {
      callback: (error, message) => {
        if (!error) terminations.push(JSONCodec<{ stream_seq: number }>().decode(message.data).stream_seq);
      },
    });
    group = new ConsumerGroup('nats-consumer.ts', {
      NATS_URL,
      PAYOUT_STREAM: STREAM,
      ...scenario.consumerEnv(proxy, SCHEMA, payouts),
    });
    await group.start(['n1', 'n2', 'n3']);
  }, 90_000);

  afterAll(async () => {
    await group?.stop();
    if (nc) {
      terminated.unsubscribe();
      await jsm.streams.delete(STREAM).catch(() => false);
      await nc.close();
    }
    await ledger?.close();
    await proxy?.close();
    if (available) await dropSchema(SCHEMA);
    console.log(measured.join('\n'));
  }, 30_000);

  it('the same payout published twice: JetStream drops the same msgID; a new msgID for the same payout replays; one payout made', async () => {
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
    await group.count('acked', twice.payoutId, 2);
    expect(await messagesOn(`${STREAM}.requested.${twice.payoutId}`)).toBe(2);
    await scenario.ranOnce(rig(), twice);
  });

  it('ack_wait lapses while the work runs: the redelivery is deferred (whole-ms naks, then held at the last delivery), never dead-lettered; the work runs once', async () => {
    // The holder's heartbeats are dropped while it is held (watch-nats.ts): JetStream redelivers the message.
    measured.push(
      await scenario.copyWhileWorking(
        rig(),
        concurrent,
        () => publish(concurrent, 'concurrent-1').then(() => undefined),
        async () => undefined,
      ),
    );
    await poll(consumerState, (s) => s.ackPending === 0, 'ack pending');
    expect(group.of('received', concurrent.payoutId).map((e) => e.deliveries)).toEqual([1, 2, 3, 4]);
  }, 40_000);

  it('a payout declined for good runs once, goes to the dead-letter subject once and is terminated; its retry replays', async () => {
    const first = await publish(declined, 'declined-1');
    await group.next('dead-lettered', (e) => e.payoutId === declined.payoutId);
    await poll(
      async () => terminations,
      (t) => t.includes(first.seq),
      'the term() advisory',
    );
    const retry = await publish(declined, 'declined-2');
    await group.count('dead-lettered', declined.payoutId, 2);
    await poll(
      async () => terminations,
      (t) => t.includes(retry.seq),
      'the term() advisory',
    );
    // One dead letter: the second publish carried the same Nats-Msg-Id (dead:<payoutId>) and was dropped.
    expect(await messagesOn(DLQ_SUBJECT)).toBe(1);
    const letter = await jsm.streams.getMessage(STREAM, { last_by_subj: DLQ_SUBJECT });
    expect([letter.json<Payout>(), letter.header.get('Dead-Letter-Reason')]).toEqual([
      declined,
      `Declined: amount ${LIMIT + 1} is over the limit`,
    ]);
    expect(group.of('received', declined.payoutId).map((e) => e.deliveries)).toEqual([1, 1]);
    expect(group.of('requeued', declined.payoutId)).toEqual([]);
    expect((await ledger.runs(declined.payoutId)).length).toBe(1);
    expect(await ledger.entries(declined.payoutId)).toEqual([]);
    // The test reads the dead letter; later scenarios count none.
    await jsm.streams.purge(STREAM, { filter: DLQ_SUBJECT });
  });

  it('kill -9 after the work, before the ack: redelivered after ack_wait to another consumer, which replays and acks', async () => {
    await scenario.killedBeforeAck(rig(), payouts.killedBeforeAck);
  });

  it('kill -9 in the middle of the work: the redelivery waits out the lease, takes over with the same id, and finds the first payout', async () => {
    await scenario.killedInWork(rig(), payouts.killedInWork);
  }, 40_000);

  it('a retryable error in the work: nak(1000), the next delivery runs it again with the same id; one payout made', async () => {
    measured.push(await scenario.retryableError(rig(), flaky));
    expect(group.of('requeued', flaky.payoutId).map((e) => e.delayMs)).toEqual([1_000]);
  });

  it('the store is down for 2 s while payouts arrive: whole-ms naks, no dead letter; afterwards each is made exactly once', async () => {
    measured.push(await scenario.storeOutage(rig(), outage));
  }, 40_000);

  it('the books hold exactly one payout per payout that went through; nothing is pending or awaiting an ack', async () => {
    const made = await scenario.booksBalance(rig(), payouts);
    expect(await poll(consumerState, (s) => s.ackPending === 0, 'ack pending')).toEqual({ pending: 0, ackPending: 0 });
    const received = group.events.filter((e) => e.event === 'received');
    measured.push(
      `NATS: ${published} messages published for 11 payouts (1 dropped by the stream as a duplicate); ${received.length} deliveries; ` +
        `${group.events.filter((e) => e.event === 'requeued').length} naks; ` +
        `${made} payouts made`,
    );
  });
});
