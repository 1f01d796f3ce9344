/**
 * What the two consumer processes (`rabbitmq-consumer.ts`, `nats-consumer.ts`) share: the payment work under
 * `idempotent()`, the verdict for one delivery (ack, defer, dead-letter, retry: docs/CONSUMERS.md), and the line
 * protocol the tests read — one JSON event per stdout line — and write: `release <paymentId>` on stdin.
 *
 * Environment: CONSUMER (this process's name), LEDGER (the store and ledger, see `ledger.ts`), LEASE_MS,
 * DEFER_MAX_MS (the longest a deferral waits), HOLD_IN_WORK and HOLD_BEFORE_ACK (comma-separated payment ids
 * at which a FIRST attempt stops and waits for `release` or a kill: in the work after its ledger row is written,
 * or after the idempotent call returned and before the ack).
 */
import { createInterface } from 'node:readline';
import { idempotent, IdempotentFailure, isIdempotencyError } from 'idem';
import { LIMIT, openLedger, type Ledger, type LedgerEntry, type Payment } from './ledger.js';

/** The payment processor's final refusal: recorded once, replayed to every redelivery, dead-lettered. */
export class Declined extends Error {
  override readonly name = 'Declined';
}

export type ConsumerEvent = { readonly consumer: string } & (
  | { readonly event: 'ready' }
  | {
      readonly event: 'received';
      readonly paymentId: string;
      readonly redelivered: boolean;
      readonly deliveries: number | null;
    }
  /** The work ran and wrote (or, on a takeover, found) its ledger row. */
  | { readonly event: 'worked'; readonly paymentId: string; readonly recordId: string; readonly reclaimed: boolean }
  | { readonly event: 'holding'; readonly paymentId: string; readonly at: Hold }
  /** The idempotent call returned; the ack comes next. `ran` is false for a replay. */
  | {
      readonly event: 'about-to-ack';
      readonly paymentId: string;
      readonly ran: boolean;
      readonly reclaimed: boolean;
      readonly result: LedgerEntry;
    }
  | { readonly event: 'acked'; readonly paymentId: string; readonly ran: boolean }
  | { readonly event: 'deferred'; readonly paymentId: string; readonly code: string; readonly delayMs: number }
  | { readonly event: 'dead-lettered'; readonly paymentId: string; readonly ran: boolean; readonly error: string }
  | { readonly event: 'requeued'; readonly paymentId: string; readonly error: string }
  | { readonly event: 'crashed'; readonly error: string }
);
type Hold = 'in-work' | 'before-ack';
type Body<E> = E extends unknown ? Omit<E, 'consumer'> : never;

/** What to do with a delivery once the idempotent call has settled. */
export type Verdict =
  | { readonly action: 'ack'; readonly result: LedgerEntry; readonly ran: boolean; readonly reclaimed: boolean }
  /** Another attempt holds the key, or the store is down: redeliver later, do not count it as a failure. */
  | { readonly action: 'defer'; readonly code: string; readonly delayMs: number }
  /** Will never succeed: a final failure (recorded, replayed), a reused key with another payload, a bad key. */
  | { readonly action: 'dead-letter'; readonly error: string; readonly ran: boolean }
  /** The work failed in a way the next delivery may not: redeliver (bounded by the broker's delivery limit). */
  | { readonly action: 'retry'; readonly error: string };

export function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') {
    process.stderr.write(`consumer: ${name} is required\n`);
    process.exit(2);
  }
  return value;
}

export const NAME = env('CONSUMER');
const LEASE_MS = Number(env('LEASE_MS'));
const DEFER_MAX_MS = Number(env('DEFER_MAX_MS'));
const holdsAt: Record<Hold, Set<string>> = {
  'in-work': new Set((process.env.HOLD_IN_WORK ?? '').split(',').filter(Boolean)),
  'before-ack': new Set((process.env.HOLD_BEFORE_ACK ?? '').split(',').filter(Boolean)),
};

export function say(event: Body<ConsumerEvent>): void {
  process.stdout.write(`${JSON.stringify({ consumer: NAME, ...event })}\n`);
}

const released = new Map<string, () => void>();
createInterface({ input: process.stdin }).on('line', (line) => {
  const [command, paymentId = ''] = line.trim().split(' ');
  if (command === 'release') released.get(paymentId)?.();
});

/** Stops here (announcing it) when the test asked to, until `release <paymentId>` arrives or the process is killed. */
export async function holdPoint(at: Hold, paymentId: string): Promise<void> {
  if (!holdsAt[at].has(paymentId)) return;
  const go = new Promise<void>((resolve) => released.set(paymentId, resolve));
  say({ event: 'holding', paymentId, at });
  await go;
  released.delete(paymentId);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The ledger and the idempotent payment work; `decide(payment)` runs it and says what to do with the delivery. */
export async function paymentWork(): Promise<{ ledger: Ledger; decide: (payment: Payment) => Promise<Verdict> }> {
  const ledger = await openLedger(env('LEDGER'));

  interface Call {
    readonly payment: Payment;
    /** Filled in by the work when it runs: a replay leaves it untouched. */
    readonly trace: { ran: boolean; reclaimed: boolean };
  }
  const post = idempotent(
    async ({ payment, trace }: Call, { id, reclaimed }) => {
      trace.ran = true;
      trace.reclaimed = reclaimed;
      await ledger.noteRun({ paymentId: payment.paymentId, recordId: id, consumer: NAME, reclaimed });
      if (payment.amount > LIMIT) throw new Declined(`amount ${payment.amount} is over the limit`);
      // The effect, keyed by the record id: a takeover (same id) finds this row instead of writing another.
      const entry = await ledger.post(id, payment, NAME);
      say({ event: 'worked', paymentId: payment.paymentId, recordId: id, reclaimed });
      if (!reclaimed) await holdPoint('in-work', payment.paymentId);
      return entry;
    },
    {
      store: ledger.store,
      scope: 'single-tenant',
      key: ({ payment }) => payment.paymentId, // the business key: a producer's retry under a new message id is the same payment
      payload: ({ payment }) => payment,
      leaseMs: LEASE_MS,
      isFinal: (error) => error instanceof Declined,
    },
  );

  const decide = async (payment: Payment): Promise<Verdict> => {
    const trace = { ran: false, reclaimed: false };
    try {
      const result = await post({ payment, trace });
      return { action: 'ack', result, ...trace };
    } catch (error) {
      if (error instanceof IdempotentFailure)
        return { action: 'dead-letter', error: `${error.originalName}: ${error.message}`, ran: trace.ran };
      if (isIdempotencyError(error)) {
        if (error.code === 'IN_FLIGHT' || error.code === 'STORE_UNAVAILABLE' || error.code === 'LEASE_LOST') {
          const delayMs = Math.min(Math.max(error.retryAfterMs ?? DEFER_MAX_MS, 100), DEFER_MAX_MS);
          return { action: 'defer', code: error.code, delayMs };
        }
        return { action: 'dead-letter', error: `${error.code}: ${error.message}`, ran: false };
      }
      return { action: 'retry', error: String(error) };
    }
  };
  return { ledger, decide };
}

/** Reports a crash of the consumer loop on stdout (so the test sees it) and exits non-zero. */
export function crash(error: unknown): never {
  say({ event: 'crashed', error: String(error) });
  process.exit(1);
}
