/**
 * @module The guided runs: one click each to a state, the problem first. Each sends real requests with a fresh key
 * (or none) and a fresh payment, then tells what happened from the server's account of each request; when that
 * account differs from the story the run expected, it tells each request as it was instead.
 */
import type { Attempt } from './attempt.js';
import { outcome } from './attempt.js';
import { abbreviate, dollars } from './format.js';
import type { Payment } from './history.js';
import { tell, type Told } from './narrate.js';
import { crashStory } from './takeover-text.js';
import type { Spec } from './send.js';

export const CHARGE_CENTS = 50_000;
export const TAMPER_CENTS = 500_000;

/** What a guided run needs from the page. */
export interface Runner {
  /** A fresh payment id. */
  readonly payment: () => string;
  /** A fresh Idempotency-Key. */
  readonly key: () => string;
  /** Sends one request with no client retries; resolves once it is answered and the history read back. */
  readonly send: (spec: Spec) => Promise<Attempt>;
  /** Resolves once the key's record is `in_progress` (the first attempt holds it), or `over()` says to stop waiting. */
  readonly held: (key: string, over: () => boolean) => Promise<void>;
  /** Resolves once the key's record lease has lapsed, saying how long is left meanwhile. */
  readonly lapsed: (key: string) => Promise<void>;
  readonly paymentOf: (a: Attempt) => Payment | undefined;
  /** The takeover policy and processor the lab's switches ask for now (the crash run sends them). */
  readonly takeover: () => NonNullable<Spec['takeover']>;
}

const QUICK = { drop: false, crash: false, fail: false, delayMs: 0 } as const;
const row = (a: Attempt): string => abbreviate(a.entry?.charge?.id ?? '', 7, 4);
const chargedRow = (a: Attempt): boolean => a.entry?.charge?.status === 'succeeded';

/** The story when the readings match it, else each request as it was. */
function story(run: Runner, sent: readonly Attempt[], matches: boolean, text: () => string): Told {
  const told = tell(sent, run.paymentOf);
  if (!matches) return { text: sent.map((a) => tell([a], run.paymentOf).text).join(' '), claims: told.claims };
  return { text: text(), claims: told.claims };
}

type Guide = (run: Runner) => Promise<Told>;

/** A spec for one step of a guided run. */
const step = (payment: string, key: string | null, control: string, extra: Partial<Spec> = {}): Spec => ({
  control,
  payment,
  group: null,
  key,
  amount: CHARGE_CENTS,
  source: 'tok_visa',
  faults: QUICK,
  ...extra,
});

/** A charge of a fresh payment, under a fresh key when `keyed`, with `fault` on; then its plain retry. */
async function faultThenRetry(run: Runner, keyed: boolean, fault: 'drop' | 'fail'): Promise<[Attempt, Attempt]> {
  const p = run.payment();
  const key = keyed ? run.key() : null;
  const first = await run.send(step(p, key, 'Show me: charge', { faults: { ...QUICK, [fault]: true } }));
  return [first, await run.send(step(p, key, 'Show me: retry'))];
}

const double: Guide = async (run) => {
  const [first, retry] = await faultThenRetry(run, false, 'drop');
  const payment = run.paymentOf(retry);
  return story(run, [first, retry], chargedRow(first) && chargedRow(retry), () => {
    const total = dollars(payment?.charged ?? 0);
    return `Without a key the server could not tell your retry from a new payment. The dropped request had charged $500.00 (${row(first)}) before its answer was lost, and the retry charged $500.00 again (${row(retry)}): ${total} for the $500.00 you meant.`;
  });
};

const replay: Guide = async (run) => {
  const [first, retry] = await faultThenRetry(run, true, 'drop');
  return story(
    run,
    [first, retry],
    chargedRow(first) && outcome(retry) === 'replayed',
    () =>
      `The server charged $500.00 (${row(first)}) and stored the 201 with the key, but the connection was cut before the answer reached you. Your retry with the same key got that stored ${retry.entry?.answer?.status ?? 201} back, marked as a replay: charged once.`,
  );
};

const inFlight: Guide = async (run) => {
  const p = run.payment();
  const key = run.key();
  let answered = false;
  const firstSent = run.send(step(p, key, 'Show me: charge', { faults: { ...QUICK, delayMs: 1_000 } })).then((a) => {
    answered = true;
    return a;
  });
  // A first attempt answered before it was seen holding the key (refused, say): the story is told as it was.
  await run.held(key, () => answered);
  const retry = await run.send(step(p, key, 'Show me: retry'));
  const first = await firstSent;
  const after = retry.entry?.answer?.retryAfter;
  return story(
    run,
    [first, retry],
    outcome(retry) === 'in-flight' && chargedRow(first),
    () =>
      `Your retry arrived while the first attempt still held the key (its processor takes 1 s), so the server answered 409${after ? ` with Retry-After ${after} s` : ''} and ran nothing. The first attempt then finished: $500.00 charged once (${row(first)}).`,
  );
};

const failed: Guide = async (run) => {
  const [first, retry] = await faultThenRetry(run, true, 'fail');
  return story(
    run,
    [first, retry],
    outcome(first) === 'processor-failed' && retry.entry?.claim === 'reclaimed' && chargedRow(retry),
    () =>
      `The processor failed: the server answered 503 and marked the key failed but retryable, charging nothing. Your retry with the same key reclaimed it under the same record id and charged $500.00 (${row(retry)}): once.`,
  );
};

const mismatch: Guide = async (run) => {
  const p = run.payment();
  const key = run.key();
  const first = await run.send(step(p, key, 'Show me: charge'));
  const other = await run.send(step(p, key, 'Show me: other amount', { amount: TAMPER_CENTS }));
  return story(
    run,
    [first, other],
    chargedRow(first) && outcome(other) === 'mismatch',
    () =>
      `The first request charged $500.00 (${row(first)}). The same key with $5,000.00 did not match the hash stored with it, so the server refused with ${other.entry?.answer?.status ?? 400} and ran nothing: still $500.00, once.`,
  );
};

const declined: Guide = async (run) => {
  const p = run.payment();
  const key = run.key();
  const card = { source: 'tok_chargeDeclined' };
  const first = await run.send(step(p, key, 'Show me: charge', card));
  const retry = await run.send(step(p, key, 'Show me: retry', card));
  return story(
    run,
    [first, retry],
    outcome(first) === 'declined' && outcome(retry) === 'replayed',
    () =>
      'The card was declined: the server answered 402 and stored it with the key as a final failure (the ledger keeps a failed row; no money moved). Your retry got the same 402 back, marked as a replay: a final answer is never run again.',
  );
};

const crash: Guide = async (run) => {
  const p = run.payment();
  const key = run.key();
  const takeover = run.takeover();
  const first = await run.send(step(p, key, 'Show me: charge', { faults: { ...QUICK, crash: true }, takeover }));
  const early = await run.send(step(p, key, 'Show me: retry', { takeover }));
  await run.lapsed(key);
  const sent = [first, early];
  let last = await run.send(step(p, key, 'Show me: retry', { takeover }));
  sent.push(last);
  // The lease is read on this browser's clock: should the server's still hold it, its Retry-After says how long.
  for (let i = 0; i < 3 && outcome(last) === 'in-flight'; i++) {
    await run.lapsed(key);
    last = await run.send(step(p, key, 'Show me: retry', { takeover }));
    sent.push(last);
  }
  if (takeover.keyless || takeover.takeover !== 'rerun') {
    const text = crashStory(sent, run.paymentOf(last));
    return story(run, sent, text !== null, () => text ?? '');
  }
  const id = abbreviate(last.entry?.recordId ?? '', 8, 4);
  const same = chargedRow(first);
  return story(
    run,
    sent,
    outcome(first) === 'crashed' &&
      outcome(early) === 'in-flight' &&
      last.entry?.claim === 'taken-over' &&
      last.entry.recordId === first.entry?.recordId,
    () =>
      `The first attempt crashed mid-charge, leaving its record in_progress, so an early retry got 409. Once the lease lapsed, a retry took the key over under the same record id (${id}), which the processor uses as its own key: ${
        same
          ? `the processor returned the charge it had made before the crash (${row(first)})`
          : `the crash had committed nothing, so it charged $500.00 (${row(last)})`
      }. One charge.`,
  );
};

/** The guided runs, by button id, in the order the page shows them: the problem first. */
export const GUIDES: ReadonlyArray<readonly [string, Guide]> = [
  ['show-double', double],
  ['show-replay', replay],
  ['show-409', inFlight],
  ['show-failed', failed],
  ['show-mismatch', mismatch],
  ['show-declined', declined],
  ['show-crash', crash],
];
