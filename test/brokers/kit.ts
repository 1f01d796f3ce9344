/**
 * What the broker consumer processes share besides the documented code they run (`payouts.ts`, `verdict.ts`,
 * `rabbitmq-consumer.ts`, `nats-consumer.ts`): the line protocol the tests read — one JSON event per stdout line
 * — and write (`release <payoutId>` on stdin), and the hold points the tests stop a consumer at.
 *
 * The events come from outside the documented code: the test bank (`bank.ts`: the work ran, where it holds) and
 * the broker watches (`watch-rabbitmq.ts`, `watch-nats.ts`: what the consumer asked the broker to do).
 *
 * Environment: CONSUMER (this process's name), HOLD_IN_WORK and HOLD_BEFORE_ACK (comma-separated payout ids at
 * which a process stops and waits for `release` or a kill: in the work, after its ledger row is written, on the
 * first run of the payout's record; or at the ack, in the process that ran the work).
 */
import { createInterface } from 'node:readline';

export type ConsumerEvent = { readonly consumer: string } & (
  | { readonly event: 'ready' }
  /** `deliveries`: 1 for the first delivery of the message, then the broker's count. */
  | { readonly event: 'received'; readonly payoutId: string; readonly deliveries: number }
  /** The bank made (or, on a rerun of the same record, found) the payout's ledger row. */
  | { readonly event: 'worked'; readonly payoutId: string; readonly recordId: string; readonly rerun: boolean }
  | { readonly event: 'holding'; readonly payoutId: string; readonly at: Hold }
  | { readonly event: 'acked'; readonly payoutId: string }
  /** JetStream `nak(delayMs)`, RabbitMQ `nack(requeue)` (after the consumer held it: `delayMs` null). */
  | { readonly event: 'requeued'; readonly payoutId: string; readonly delayMs: number | null }
  /** RabbitMQ `nack` without requeue, JetStream `term()` (after the dead letter was published). */
  | { readonly event: 'dead-lettered'; readonly payoutId: string }
  /** Written by the group when a process exits that the test did not stop. */
  | { readonly event: 'crashed'; readonly error: string }
);
export type Hold = 'in-work' | 'before-ack';
type Body<E> = E extends unknown ? Omit<E, 'consumer'> : never;

export function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') {
    process.stderr.write(`consumer: ${name} is required\n`);
    process.exit(2);
  }
  return value;
}

export const NAME = env('CONSUMER');
const holdsAt: Record<Hold, Set<string>> = {
  'in-work': new Set((process.env.HOLD_IN_WORK ?? '').split(',').filter(Boolean)),
  'before-ack': new Set((process.env.HOLD_BEFORE_ACK ?? '').split(',').filter(Boolean)),
};
/** Payouts whose work ran in this process (a replay does not add one). */
export const ranHere = new Set<string>();
/** Payouts held in their work in this process now. */
export const heldInWork = new Set<string>();

export function say(event: Body<ConsumerEvent>): void {
  process.stdout.write(`${JSON.stringify({ consumer: NAME, ...event })}\n`);
}

const released = new Map<string, () => void>();
createInterface({ input: process.stdin }).on('line', (line) => {
  const [command, payoutId = ''] = line.trim().split(' ');
  if (command === 'release') released.get(payoutId)?.();
});

/** Whether the test asked this process to stop at `at` for `payoutId`. */
export const holdsFor = (at: Hold, payoutId: string): boolean => holdsAt[at].has(payoutId);

/** Stops here (announcing it) until `release <payoutId>` arrives or the process is killed. */
export async function holdPoint(at: Hold, payoutId: string): Promise<void> {
  const go = new Promise<void>((resolve) => released.set(payoutId, resolve));
  if (at === 'in-work') heldInWork.add(payoutId);
  say({ event: 'holding', payoutId, at });
  await go;
  released.delete(payoutId);
  heldInWork.delete(payoutId);
}

/** The payout id in a message body (every message the tests publish is a payout). */
export function payoutIdOf(body: Uint8Array): string {
  return (JSON.parse(new TextDecoder().decode(body)) as { payoutId: string }).payoutId;
}
