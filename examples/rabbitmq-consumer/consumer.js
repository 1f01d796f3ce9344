// A RabbitMQ consumer, records in PostgreSQL. AMQP_URL, PAYOUT_QUEUE, DATABASE_URL, PG_SCHEMA; `node consumer.js`.
// docs/CONSUMERS.md has the full treatment: delivery limits, deferring a key in use, timers.
import amqp from 'amqplib';
import pg from 'pg';
import { idempotent, IdempotentFailure, isIdempotencyError } from 'idem';
import { postgresStore } from 'idem/stores/postgres';

const QUEUE = process.env.PAYOUT_QUEUE ?? 'payouts'; // copies that can never succeed go to `${QUEUE}.dead`
const schema = process.env.PG_SCHEMA ?? 'payments';
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
});
pool.on('error', (error) => console.error(`PostgreSQL: ${error.message}`)); // an idle connection dropped
await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
await pool.query(`CREATE TABLE IF NOT EXISTS ${schema}.payouts (
  id text PRIMARY KEY, payout_id text NOT NULL, amount bigint NOT NULL)`);
const store = postgresStore({ pool, schema });
await store.migrate();

const sendPayout = idempotent(
  async (payout, { id }) => {
    // Written under the record's id (stable across takeovers): a takeover after a crash finds it, pays nothing.
    await pool.query(
      `INSERT INTO ${schema}.payouts (id, payout_id, amount) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
      [id, payout.payoutId, payout.amount],
    );
    return { transferId: `tr_${id}`, payoutId: payout.payoutId, amount: payout.amount };
  },
  {
    store,
    scope: (payout) => payout.merchantId,
    key: (payout) => payout.payoutId, // the business key, not the message id
  },
);

/** Errors a later delivery can get past: another consumer holds the key, the store is down, a lease was lost. */
const passing = (error) =>
  !(error instanceof IdempotentFailure) &&
  (!isIdempotencyError(error) || ['IN_FLIGHT', 'STORE_UNAVAILABLE', 'LEASE_LOST'].includes(error.code));

const connection = await amqp.connect(process.env.AMQP_URL ?? 'amqp://localhost');
const channel = await connection.createChannel();
await channel.assertExchange(`${QUEUE}.dlx`, 'fanout', { durable: true });
await channel.assertQueue(`${QUEUE}.dead`, { durable: true });
await channel.bindQueue(`${QUEUE}.dead`, `${QUEUE}.dlx`, '');
await channel.assertQueue(QUEUE, { durable: true, deadLetterExchange: `${QUEUE}.dlx` });
await channel.prefetch(10);

/** The payout a message carries, or null for one no delivery can process (not JSON, no merchant or payout id). */
function payoutOf(message) {
  try {
    const payout = JSON.parse(message.content.toString('utf8'));
    const ids = [payout?.merchantId, payout?.payoutId];
    return ids.every((id) => typeof id === 'string' && id !== '') ? payout : null;
  } catch {
    return null;
  }
}

await channel.consume(QUEUE, async (message) => {
  if (!message) return; // the broker cancelled the consumer
  const payout = payoutOf(message);
  if (payout === null) return channel.nack(message, false, false); // poison: → QUEUE.dead at once, never retried
  try {
    const result = await sendPayout(payout);
    const { replyTo, correlationId } = message.properties; // the producer asked for the result
    if (replyTo) channel.sendToQueue(replyTo, Buffer.from(JSON.stringify(result)), { correlationId });
    channel.ack(message); // only now: a crash before this line redelivers, and the redelivery replays
  } catch (error) {
    if (!passing(error)) return channel.nack(message, false, false); // e.g. the payoutId reused: → QUEUE.dead
    // Deliver it again in a second. This classic queue retries without bound; a quorum queue's x-delivery-limit
    // would bound it (docs/CONSUMERS.md).
    setTimeout(() => channel.nack(message, false, true), 1_000);
  }
});
console.log(`consuming ${QUEUE}`);
