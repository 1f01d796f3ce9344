/**
 * @module How `idem records resolve` gets the key: it waits for the record's lease to lapse and claims it in the
 * gap. Under `takeover: 'quarantine'` a client retrying the key re-arms that lease with every takeover (each answers
 * 409 and leaves a fresh lease to lapse), so a resolve that only looked once would be refused for as long as the
 * client retries; one that re-reads every few ms and claims the moment the lease lapses gets in between.
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyRecord, IdempotencyStore } from '../core/record.js';
import { CommandError } from './args.js';
import { visible } from './escape.js';

/** How often a live lease is looked at again while waiting for it to lapse. */
const POLL_MS = 10;
/** How long the resolving claim holds the key: ample for its one completion, short if the CLI dies in between. */
export const RESOLVE_LEASE_MS = 30_000;

export interface LapsedClaim {
  /** The key, its scope, and how messages name them. */
  readonly pk: string;
  readonly scope: string;
  readonly key: string;
  readonly about: string;
  /** How long to wait for a live lease to lapse, in ms (0: refuse a live lease at once). */
  readonly waitMs: number;
  /** A line of progress (stderr). */
  readonly progress: (line: string) => void;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** What was seen of the lease while waiting: takeovers (a new token: retries) and renewals (a holder running). */
interface Seen {
  takeovers: number;
  renewals: number;
}

/**
 * Claims the record's lapsed lease, as a retry would (the same fenced claim: a retry racing it gets one or the
 * other), waiting up to `waitMs` for a live one to lapse. Returns the record as it was and the claim's token.
 */
export async function claimLapsed(
  store: Pick<IdempotencyStore<never>, 'get' | 'claim' | 'release'>,
  { pk, scope, key, about, waitMs, progress, sleep = (ms) => new Promise((done) => setTimeout(done, ms)) }: LapsedClaim,
): Promise<{ record: IdempotencyRecord; token: string }> {
  const until = Date.now() + waitMs;
  const seen: Seen = { takeovers: 0, renewals: 0 };
  let record = await store.get(pk);
  let waiting = false;
  for (;;) {
    const now = Date.now();
    const current = resolvable(record, now, about);
    if (current.leaseExpiresAt <= now) {
      const token = randomUUID();
      const ttlMs = Math.max(current.expiresAt - now, RESOLVE_LEASE_MS + 1);
      const { fingerprint, id } = current;
      const claim = await store.claim({
        pk,
        scope,
        key,
        fingerprint,
        token,
        id: randomUUID(),
        now,
        leaseMs: RESOLVE_LEASE_MS,
        ttlMs,
      });
      if (claim.kind === 'claimed' && claim.record.id === id) return { record: current, token };
      if (claim.kind === 'claimed') {
        await store.release({ pk, token });
        throw new CommandError(
          `${about} changed while resolving it (a new record took its place): look again with records show.`,
        );
      }
      // Another attempt claimed it first (a retry taking it over): wait for the lease it left.
      record = observe(seen, current, claim.record, progress, about);
      continue;
    }
    if (current.leaseExpiresAt > until) throw new CommandError(refusal(current, now, about, waitMs, seen));
    if (!waiting) {
      waiting = true;
      progress(`waiting for the lease on ${about} to lapse (${Math.ceil((current.leaseExpiresAt - now) / 1000)} s)…`);
    }
    await sleep(Math.max(1, Math.min(POLL_MS, current.leaseExpiresAt - now)));
    record = observe(seen, current, await store.get(pk), progress, about);
  }
}

/** The record, if `resolve` may settle it: live and in progress (its lease live or not). */
function resolvable(record: IdempotencyRecord | null, now: number, about: string): IdempotencyRecord {
  if (record === null || record.expiresAt <= now) throw new CommandError(`no live record for ${about}.`);
  if (record.status !== 'in_progress')
    throw new CommandError(
      `the record for ${about} is ${visible(record.status)}, not in progress: nothing to resolve.`,
    );
  return record;
}

/** Counts what changed between two reads of the record, saying so on a takeover. */
function observe(
  seen: Seen,
  before: IdempotencyRecord,
  after: IdempotencyRecord | null,
  progress: (line: string) => void,
  about: string,
): IdempotencyRecord | null {
  if (after === null || after.status !== 'in_progress' || after.id !== before.id) return after;
  if (after.token !== before.token) {
    seen.takeovers++;
    progress(`another attempt (a retry) took ${about} over, leaving a fresh lease: waiting for it to lapse…`);
  } else if (after.leaseExpiresAt > before.leaseExpiresAt) seen.renewals++;
  return after;
}

/** Why a live lease is not resolved: what holds it, as far as the reads could tell. */
function refusal(record: IdempotencyRecord, now: number, about: string, waitMs: number, seen: Seen): string {
  const left = Math.ceil((record.leaseExpiresAt - now) / 1000);
  const holder =
    seen.renewals > 0
      ? `its holder renewed it ${seen.renewals} time(s) while we waited: it is still running`
      : seen.takeovers > 0
        ? `retries took it over ${seen.takeovers} time(s) while we waited, each leaving a fresh lease: stop them, or wait longer`
        : `claimed ${Math.max(0, Math.round((now - record.claimedAt) / 1000))} s ago: its holder may still be running`;
  return `the lease on ${about} is live for ${left} s more, past --wait ${Math.round(waitMs / 1000)} s; ${holder}. Resolve it once the lease has lapsed, or give a longer --wait.`;
}
