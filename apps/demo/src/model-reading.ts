/**
 * @module What a model operation did, read from the store's answer and the row read just before and just after it:
 * the state machine's transition it made (or none), and one sentence that says so. The sentence starts with the
 * claim it makes (`claimed:`, `taken over:`, `reclaimed:`, `written:`, `renewed:`, `released:`, `refused:`,
 * `nothing written:`, `found:`, `no row:`), so a test can check each claim against the record.
 */
import type { ClaimResult, IdempotencyRecord, Outcome, WriteResult } from 'idem';

/** A row's place in the state machine: `expired` is a row still stored after its `expiresAt`. */
export type ModelState = 'absent' | 'in_progress' | 'succeeded' | 'failed-final' | 'failed-retryable' | 'expired';

/** The state machine's transitions, as the model page draws them. */
export type TransitionName =
  | 'fresh-claim'
  | 'complete'
  | 'fail-final'
  | 'fail-retryable'
  | 'release'
  | 'renew'
  | 'takeover'
  | 'reclaim'
  | 'expire'
  | 'delete'
  | 'reclaim-expired';

/** What one operation did, in the state machine's terms. */
export interface Reading {
  /** `written`: the store changed the row; `refused` / `nothing-written`: it did not; `read`: a get. */
  readonly verdict: 'written' | 'refused' | 'nothing-written' | 'read';
  /** The transition this operation made; for a read, the one time made that the read saw (expiry); else null. */
  readonly transition: TransitionName | null;
  /** The row's state just before the operation, and just after it. */
  readonly from: ModelState;
  readonly to: ModelState;
  readonly text: string;
}

/** Where the row stands at `now`. */
export function stateOf(record: IdempotencyRecord | null, now: number): ModelState {
  if (record === null) return 'absent';
  if (record.expiresAt <= now) return 'expired';
  if (record.status === 'failed') return record.retryable ? 'failed-retryable' : 'failed-final';
  return record.status;
}

/**
 * A span of time in words.
 *
 * @example
 * duration(1_234) // → '1.2 s'
 */
export function duration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(abs)} ms`;
  if (abs < 60_000) return `${(abs / 1_000).toFixed(1)} s`;
  if (abs < 3_600_000) return `${Math.round(abs / 60_000)} min`;
  return `${Math.round(abs / 3_600_000)} h`;
}

/** A row's status as the page words it: `succeeded`, `failed, final`, `failed, retryable`, `in_progress`. */
function label(record: IdempotencyRecord): string {
  if (record.status !== 'failed') return record.status;
  return record.retryable ? 'failed, retryable' : 'failed, final';
}

const outcomeLabel = (outcome: Outcome): string =>
  outcome.status === 'succeeded' ? 'succeeded' : outcome.retryable ? 'failed, retryable' : 'failed, final';

const sameRecord = (a: IdempotencyRecord | null, b: IdempotencyRecord | null): boolean =>
  a === null || b === null
    ? a === b
    : a.status === b.status &&
      a.token === b.token &&
      a.id === b.id &&
      a.retryable === b.retryable &&
      a.resultId === b.resultId &&
      a.leaseExpiresAt === b.leaseExpiresAt &&
      a.expiresAt === b.expiresAt &&
      (a.response?.status ?? null) === (b.response?.status ?? null);

/** Why a write conditional on `token` and `in_progress` did not apply to `before`. */
function whyRefused(before: IdempotencyRecord | null, token: string): string {
  if (before === null) return 'There is no row under this key.';
  if (before.token !== token) {
    return before.status === 'in_progress'
      ? 'The row is in_progress under another token: the key was taken over, and only its current holder may write.'
      : `The row is ${label(before)}, under another token.`;
  }
  return `The row is already ${label(before)}: its outcome is written once.`;
}

/** What a retry meets in `record` at `now`, for a refused claim. */
function whatARetryGets(record: IdempotencyRecord, fingerprint: string, now: number): string {
  if (record.fingerprint !== fingerprint) return 'held for a different request (fingerprint): a retry gets 400';
  if (record.status === 'in_progress') {
    return `in_progress, its lease holds for another ${duration(record.leaseExpiresAt - now)}: a retry gets 409 and comes back later`;
  }
  return `${label(record)}: a retry gets its stored ${record.response?.status ?? 'answer'} replayed`;
}

/** The store-specific reason a store answers ok to a write that changed nothing (docs/DESIGN.md: A resent write). */
function okButUnchanged(store: string, what: string): string {
  return store === 'redis' || store === 'dynamodb'
    ? ` ${store === 'redis' ? 'Redis' : 'DynamoDB'} answers ok to a ${what}: it takes the call for a resend of a write whose reply was lost.`
    : '';
}

/**
 * A claim: `before` is the row read just before, `result` the store's answer.
 *
 * @example
 * readClaim(null, { kind: 'claimed', record }, fingerprint, now) // → { verdict: 'written', transition: 'fresh-claim', … }
 */
export function readClaim(
  before: IdempotencyRecord | null,
  result: ClaimResult,
  fingerprint: string,
  now: number,
): Reading {
  const from = stateOf(before, now);
  const record = result.record;
  if (result.kind === 'existing') {
    return {
      verdict: 'refused',
      transition: null,
      from: stateOf(record, now),
      to: stateOf(record, now),
      text: `refused: nothing written. The row is ${whatARetryGets(record, fingerprint, now)}.`,
    };
  }
  const lease = `a lease of ${duration(record.leaseExpiresAt - now)} and a TTL of ${duration(record.expiresAt - now)}`;
  const to = 'in_progress';
  if (before !== null && before.id === record.id && (from === 'in_progress' || from === 'failed-retryable')) {
    const takeover = from === 'in_progress';
    return {
      verdict: 'written',
      transition: takeover ? 'takeover' : 'reclaim',
      from,
      to,
      text: takeover
        ? `taken over: the holder's lease had lapsed ${duration(now - before.leaseExpiresAt)} ago with no renewal, so this claim took the key with a new token and the same id (${record.id}), ${lease}: the processor gets the same id as its key and does not charge twice.`
        : `reclaimed: the last attempt failed and may be retried, so this claim runs the work again with a new token and the same id (${record.id}), ${lease}.`,
    };
  }
  if (before !== null && from === 'expired') {
    return {
      verdict: 'written',
      transition: 'reclaim-expired',
      from,
      to,
      text: `claimed: the row under this key had expired ${duration(now - before.expiresAt)} ago but was still stored; the claim counted it as absent and wrote a fresh one with a new id (${record.id}, was ${before.id}), ${lease}.`,
    };
  }
  return {
    verdict: 'written',
    transition: 'fresh-claim',
    from,
    to,
    text: `claimed: no row under this key, so the claim wrote one: in_progress with a new id (${record.id}), its own token, ${lease}.`,
  };
}

/** What a write conditional on the token knows: the store, the rows before and after, the token, the time. */
interface Fenced {
  readonly store: string;
  readonly before: IdempotencyRecord | null;
  readonly after: IdempotencyRecord | null;
  readonly token: string;
  readonly now: number;
  readonly from: ModelState;
  readonly to: ModelState;
}

/** A reader of one kind of fenced write: a refusal reads the same for all of them; `read` words the rest. */
function fenced(read: (write: Fenced) => Reading) {
  return (
    store: string,
    before: IdempotencyRecord | null,
    after: IdempotencyRecord | null,
    token: string,
    result: WriteResult,
    now: number,
  ): Reading => {
    const from = stateOf(before, now);
    const to = stateOf(after, now);
    if (result.ok) return read({ store, before, after, token, now, from, to });
    return {
      verdict: 'refused',
      transition: null,
      from,
      to,
      text: `refused: nothing written. ${whyRefused(before, token)}`,
    };
  };
}

const unchanged = ({ from, to }: Fenced, text: string): Reading => ({
  verdict: 'nothing-written',
  transition: null,
  from,
  to,
  text: `nothing written: the store answered ok, but ${text}`,
});

/**
 * A completion of `outcome`.
 *
 * @example
 * readComplete(outcome)('sqlite', before, after, token, { ok: true }, now) // → { transition: 'complete', … }
 */
export const readComplete = (outcome: Outcome) =>
  fenced((write) => {
    const { store, before, after, token, from, to } = write;
    if (sameRecord(before, after) || before?.status !== 'in_progress' || before.token !== token || after === null) {
      const asked =
        after !== null && label(after) !== outcomeLabel(outcome) ? ` (not the ${outcomeLabel(outcome)} you sent)` : '';
      return unchanged(
        write,
        `the row is unchanged: it was already ${before ? label(before) : 'absent'}${asked} under this token.${okButUnchanged(store, 'completion that finds its own token already settled with the same status')}`,
      );
    }
    const transition = after.status === 'succeeded' ? 'complete' : after.retryable ? 'fail-retryable' : 'fail-final';
    const next =
      transition === 'fail-retryable'
        ? 'a retry with the same request may claim the key again and run the work again'
        : `a retry gets this ${after.response?.status ?? ''} replayed`;
    return {
      verdict: 'written',
      transition,
      from,
      to,
      text: `written: in_progress → ${label(after)}, because the token still held and the row was in_progress; ${next}.`,
    };
  });

/** A renewal. */
export const readRenew = fenced((write) => {
  const { store, before, after, now, from, to } = write;
  if (before === null || after === null || after.leaseExpiresAt <= before.leaseExpiresAt) {
    return unchanged(
      write,
      `the lease did not move: it already ran at least as far (a renewal only pushes a lease forward).${okButUnchanged(store, 'renewal already overtaken by a later one')}`,
    );
  }
  const lapsed =
    before.leaseExpiresAt <= now
      ? ` Its lease had lapsed ${duration(now - before.leaseExpiresAt)} ago, but nobody had taken the key over, so the token still held; an engine's holder would have aborted its work at its own deadline all the same.`
      : '';
  return {
    verdict: 'written',
    transition: 'renew',
    from,
    to,
    text: `renewed: the lease now runs for another ${duration(after.leaseExpiresAt - now)} (leaseExpiresAt ${duration(after.leaseExpiresAt - before.leaseExpiresAt)} later), same token, same id.${lapsed}`,
  };
});

/** A release. */
export const readRelease = fenced((write) => {
  const { store, before, after, from, to } = write;
  if (before === null || after !== null) {
    return unchanged(write, `there was no row to delete.${okButUnchanged(store, 'release that finds no record')}`);
  }
  return {
    verdict: 'written',
    transition: 'release',
    from,
    to,
    text: 'released: the row is deleted and the key is free: the next claim is a fresh one, with a new id.',
  };
});

/** A get of the row at `now`. */
export function readGet(record: IdempotencyRecord | null, now: number): Reading {
  const state = stateOf(record, now);
  if (record === null) {
    return {
      verdict: 'read',
      transition: null,
      from: state,
      to: state,
      text: 'no row: the store holds nothing under this key.',
    };
  }
  const response = record.response ? `, response ${record.response.status}` : '';
  const lease =
    record.status === 'in_progress' && state !== 'expired'
      ? record.leaseExpiresAt > now
        ? `; its lease holds for another ${duration(record.leaseExpiresAt - now)}`
        : `; its lease lapsed ${duration(now - record.leaseExpiresAt)} ago: the next claim takes it over`
      : '';
  const expired =
    state === 'expired'
      ? `; expired ${duration(now - record.expiresAt)} ago and still stored: a claim treats it as absent`
      : '';
  return {
    verdict: 'read',
    transition: state === 'expired' ? 'expire' : null,
    from: state,
    to: state,
    text: `found: status ${label(record)}${response}${lease}${expired}.`,
  };
}
