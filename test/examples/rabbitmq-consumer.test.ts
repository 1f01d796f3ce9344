/**
 * examples/rabbitmq-consumer: an amqplib consumer whose payouts run once per `payoutId`, installed from the
 * packed tarball. The test publishes a payout, then the same payout again (a producer's retry), each asking for
 * the result (`replyTo`): both replies are the same bytes and the payouts table holds one row. The same
 * `payoutId` with another amount is dead-lettered, unpaid; so are, at once, a message that is not JSON and a payout
 * without a `merchantId` (they were requeued every second, forever). Queues, exchange and schema are the test's own, and
 * deleted afterwards.
 */
import { connect, type ConsumeMessage } from 'amqplib';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, POSTGRES_URL, serviceAvailable } from '../services.js';
import { startExample, useExample } from './kit.js';

const available =
  (await serviceAvailable('RabbitMQ', AMQP_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const QUEUE = `idem-example-${process.pid}`;
const schema = `idem_example_amqp_${process.pid}`;
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
const example = useExample('rabbitmq-consumer', {
  enabled: available,
  cleanup: async () => {
    if (available) {
      const connection = await connect(AMQP_URL);
      const channel = await connection.createChannel();
      for (const queue of [QUEUE, `${QUEUE}.dead`, `${QUEUE}.results`]) await channel.deleteQueue(queue);
      await channel.deleteExchange(`${QUEUE}.dlx`);
      await connection.close();
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    }
    await pool.end();
  },
});

/** The messages arriving on a queue, one at a time, as they come (no polling, no sleeps). */
async function arrivals(
  channel: Awaited<ReturnType<Awaited<ReturnType<typeof connect>>['createChannel']>>,
  queue: string,
) {
  const arrived: ConsumeMessage[] = [];
  const waiting: Array<(message: ConsumeMessage) => void> = [];
  await channel.consume(
    queue,
    (message) => {
      if (message) (waiting.shift() ?? ((m: ConsumeMessage) => arrived.push(m)))(message);
    },
    { noAck: true },
  );
  return () =>
    new Promise<ConsumeMessage>((resolve) => {
      const message = arrived.shift();
      if (message) resolve(message);
      else waiting.push(resolve);
    });
}

describe.skipIf(!available)('examples/rabbitmq-consumer', () => {
  it('a payout delivered twice runs once, both replies the same bytes; poison and a reused payoutId are dead-lettered', async () => {
    const consumer = await startExample(process.execPath, ['consumer.js'], {
      cwd: example().dir,
      env: { AMQP_URL, PAYOUT_QUEUE: QUEUE, DATABASE_URL: POSTGRES_URL, PG_SCHEMA: schema },
      ready: /consuming \S+/,
    });
    const connection = await connect(AMQP_URL);
    try {
      const channel = await connection.createChannel();
      await channel.assertQueue(`${QUEUE}.results`, { durable: false });
      const reply = await arrivals(channel, `${QUEUE}.results`);
      const dead = await arrivals(channel, `${QUEUE}.dead`);
      const publish = (payout: object) =>
        channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify(payout)), { replyTo: `${QUEUE}.results` });
      const payouts = async () =>
        (await pool.query<{ id: string }>(`SELECT id FROM ${schema}.payouts`)).rows.map((row) => row.id);
      const payout = { payoutId: 'po_1', merchantId: 'acct_dave', amount: 5000 };

      publish(payout);
      const first = (await reply()).content;
      publish(payout);
      const second = (await reply()).content;
      const ran = await payouts(); // the record ids the work ran under
      // Poison: no delivery can process these, so they are dead-lettered at once (not requeued every second).
      channel.sendToQueue(QUEUE, Buffer.from('not json'));
      channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify({ payoutId: 'po_2', amount: 100 })));
      const poison = [(await dead()).content.toString(), (await dead()).content.toString()];
      publish({ ...payout, amount: 9000 });
      const deadLettered = JSON.parse((await dead()).content.toString()) as unknown;
      expect({
        first: JSON.parse(first.toString()) as unknown,
        sameBytes: first.equals(second),
        ran,
        poison,
        deadLettered,
        after: await payouts(),
      }).toEqual({
        first: { transferId: `tr_${ran[0] ?? 'none'}`, payoutId: 'po_1', amount: 5000 },
        sameBytes: true,
        ran: [ran[0]],
        poison: ['not json', '{"payoutId":"po_2","amount":100}'],
        deadLettered: { payoutId: 'po_1', merchantId: 'acct_dave', amount: 9000 },
        after: [ran[0]],
      });
    } finally {
      await connection.close();
      await consumer.stop();
    }
  }, 120_000);
});
