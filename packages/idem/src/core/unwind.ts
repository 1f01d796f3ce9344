/**
 * @module A claim the work will not run under (docs/DESIGN.md: Takeover policy): answered past the holder's
 * deadline, or not answered at all (a timeout, a dropped connection) though the store may have applied it.
 */
import type { ClaimResult, IdempotencyStore } from './record.js';

/** What the claim sent, and how to reach the store (through the engine's timed `call`). */
export interface UnusedClaim {
  readonly store: Pick<IdempotencyStore<unknown>, 'get' | 'release' | 'complete'>;
  readonly call: <T>(op: 'get' | 'release' | 'complete', fn: () => Promise<T>) => Promise<T>;
  readonly pk: string;
  readonly token: string;
  readonly freshId: string;
  /** The claim's own `now`: the undo says nothing happened since, and the store fences it by the token. */
  readonly now: number;
}

/**
 * Undoes a claim nothing ran under, so that it never becomes a takeover of an outcome that was not unknown (under
 * `'quarantine'` the key would answer "unknown" for work that never started). Fenced by the claim's token, so it
 * changes nothing another attempt holds. A record the claim made fresh is released; one it reclaimed from a
 * retryable failure is failed again, retryable. A takeover is left to lapse (its outcome was unknown before), and
 * so is a reclaim whose answer never came (whether it was a takeover cannot be known). A store call that fails
 * rejects (STORE_UNAVAILABLE, as the claim did): the record then lapses, as it would have.
 */
export async function unwindClaim(unused: UnusedClaim, claim?: ClaimResult): Promise<void> {
  const { store, call, pk, token, freshId } = unused;
  const record = claim ? (claim.kind === 'claimed' ? claim.record : null) : await call('get', () => store.get(pk));
  if (!record || record.token !== token || record.status !== 'in_progress') return;
  if (record.id === freshId) {
    await call('release', () => store.release({ pk, token }));
  } else if (claim?.kind === 'claimed' && claim.takeover === false) {
    const outcome = { status: 'failed', retryable: true, resultId: null, response: null } as const;
    await call('complete', () => store.complete({ pk, token, now: unused.now, outcome }));
  }
}
