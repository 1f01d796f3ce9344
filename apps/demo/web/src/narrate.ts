/**
 * @module What just happened, in one or two plain sentences: the lab's narration after each control.
 */
import type { Attempt } from './attempt.js';
import { dollars, plural } from './format.js';

/**
 * One attempt, told from the person's side. `earlier` are the attempts sent before it (to know whether a keyless
 * retry charged a payment a second time).
 *
 * @example
 * narrateOne(attempt, attempts.slice(0, attempt.n - 1))
 */
export function narrateOne(a: Attempt, earlier: readonly Attempt[]): string {
  const amount = dollars(a.amount);
  const keyless = a.key === null;
  const chargedBefore = earlier.some(
    (e) => e.intent === a.intent && (e.outcome === 'executed' || e.outcome === 'dropped'),
  );
  switch (a.outcome) {
    case 'pending':
      return 'Waiting for the answer…';
    case 'executed':
      if (keyless && chargedBefore) {
        return `Without a key the server cannot tell a retry from a new payment, so it charged ${amount} again. You meant to pay once.`;
      }
      if (keyless)
        return `The server charged ${amount} and answered ${a.status ?? 201}. No key was sent, so nothing would stop a retry from charging again.`;
      if (a.reclaim)
        return `The key's last attempt had failed and was marked retryable, so this retry reclaimed the key and charged ${amount}: once.`;
      return `The server claimed the key, charged ${amount} and answered ${a.status ?? 201}. Retry with the same key and you get this same answer back, with no second charge.`;
    case 'dropped':
      if (keyless) {
        return `The server charged ${amount} and committed; the connection died before the answer reached you. Without a key, a retry will be a second charge.`;
      }
      return `The server charged ${amount} and committed; the connection died before the answer reached you. Retry with the same key.`;
    case 'replayed':
      return `The key was already completed, so the server sent the stored ${a.status ?? 201} again, marked as a replay, and charged nothing. Still charged once.`;
    case 'in-flight':
      return `The first attempt still held the key, so the server answered 409${a.retryAfter ? ` (Retry-After ${a.retryAfter} s)` : ''} instead of starting a second charge. Retry once it has finished to get its answer.`;
    case 'mismatch':
      return `Same key, different body (${amount}): the server refused with ${a.status ?? 400} and ran nothing. A key belongs to one request.`;
    case 'processor-failed':
      return keyless
        ? 'The processor failed and the server answered 503; nothing was charged. Without a key, the server keeps no record of it.'
        : 'The processor failed, so the server answered 503 and marked the key failed but retryable. Retry with the same key to run the charge again.';
    case 'declined':
      return 'The card was declined (402). That is a final answer: a retry with this key gets the same refusal.';
    case 'error':
      return `The request failed (${a.status ?? 'no answer'}).`;
  }
}

/**
 * A race of identical requests, told as one event.
 *
 * @example
 * narrateRace(raceAttempts)
 */
export function narrateRace(race: readonly Attempt[]): string {
  const n = race.length;
  const count = (outcome: Attempt['outcome']) => race.filter((a) => a.outcome === outcome).length;
  const executed = count('executed');
  const amount = dollars(race[0]?.amount ?? 0);
  if (race[0]?.key === null) {
    return `${n} identical requests without a key: each one ran, so ${plural(executed, 'charge')} of ${amount} went through for one payment.`;
  }
  const inFlight = count('in-flight');
  const replayed = count('replayed');
  if (executed === 0 && replayed === n) {
    return `All ${n} found the key already completed, so each got the stored answer back and nothing was charged. To see 409s, race a fresh key: press New key, then Race.`;
  }
  const parts = [
    executed ? `${executed} ran the charge` : '',
    inFlight ? `${inFlight} got 409 because the first still held the key` : '',
    replayed ? `${replayed} arrived after it finished and got the replay` : '',
  ].filter(Boolean);
  return `${n} identical requests with one key left together: ${parts.join(', ')}. ${executed === 1 ? `${amount} charged once.` : ''}`.trim();
}
