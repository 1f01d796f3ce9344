/**
 * @module What the lab page knows, and where it learns it: the server's history of this sandbox account (every
 * request and what the server did with it), the account's charges, its idempotency records and balance — all read
 * back, never remembered — joined with the requests this page has in flight. A reload, another tab or a fresh page
 * makes the same reads and so shows the same past.
 */
import { ApiError, getJson, type Balance, type Charge, type LabHistory, type List, type PublicRecord } from './api.js';
import { fromEntry, outcome, settled, type Attempt } from './attempt.js';

export interface State {
  /** Every request, in the order the server received them; this page's unread ones last. */
  attempts: Attempt[];
  /** The account's ledger rows, newest first, as last read. */
  charges: readonly Charge[];
  records: readonly PublicRecord[];
  balance: Balance | null;
  /** Why the last read failed (the server could not be reached), or null after a good read. */
  unreachable: string | null;
  /** The server refused the sandbox key: lab mode is off. */
  labOff: boolean;
}

export const state: State = { attempts: [], charges: [], records: [], balance: null, unreachable: null, labOff: false };

/** Bumped when the page moves to a fresh sandbox account (Reset): reads started for the old one are dropped. */
let epoch = 0;

/** Adds a request this page has just sent. */
export function track(attempt: Attempt): void {
  state.attempts.push(attempt);
}

/** Forgets everything: the page has moved to a fresh sandbox account. */
export function forget(): void {
  epoch++;
  state.attempts = [];
  state.charges = [];
  state.records = [];
  state.balance = null;
}

/** True while a request of this page is unanswered, or the server reports one still running. */
export const busyRequests = (): boolean => state.attempts.some((a) => !settled(a));

function failed(error: unknown): void {
  if (error instanceof ApiError && error.status === 401) state.labOff = true;
  state.unreachable = error instanceof Error ? error.message : String(error);
}

/**
 * Reads everything back: the history, the balance and the records, in one go. Returns false when the server could
 * not be read (the figures then stay as last read, and `state.unreachable` says why).
 *
 * @example
 * if (!(await refresh())) narrate('Could not reach the server…')
 */
export async function refresh(): Promise<boolean> {
  const mine = epoch;
  try {
    const [history, balance, records] = await Promise.all([
      getJson<LabHistory>('/v1/lab/history'),
      getJson<Balance>('/v1/balance'),
      getJson<List<PublicRecord>>('/v1/idempotency_records'),
    ]);
    if (mine !== epoch) return true;
    const local = new Map(state.attempts.map((a) => [a.request, a]));
    const known = history.entries.map((entry) => {
      const mineToo = local.get(entry.request);
      local.delete(entry.request);
      if (!mineToo) return fromEntry(entry);
      mineToo.entry = entry;
      return mineToo;
    });
    // Kept beside the history: this page's requests the server has not journaled (unanswered yet, refused, lost).
    // One the history held before and holds no more was deleted by a Reset (another tab): it is gone.
    state.attempts = [...known, ...[...local.values()].filter((a) => a.entry === null)];
    state.charges = history.charges;
    state.balance = balance;
    state.records = records.data;
    state.unreachable = null;
    state.labOff = false;
    return true;
  } catch (error) {
    if (mine === epoch) failed(error);
    return false;
  }
}

/** Reads the records alone (while requests run, so an in_progress row is seen as it is). */
export async function refreshRecords(): Promise<void> {
  const mine = epoch;
  try {
    const list = await getJson<List<PublicRecord>>('/v1/idempotency_records');
    if (mine === epoch) state.records = list.data;
  } catch (error) {
    if (mine === epoch) failed(error);
  }
}

/** A payment: what the person meant once, and every request sent for it. */
export interface Payment {
  readonly id: string;
  /** 1-based, in the order the payments were first sent. */
  readonly n: number;
  readonly key: string | null;
  /** The first request's amount: what the person meant to pay. */
  readonly intended: number;
  readonly attempts: readonly Attempt[];
  /** The ledger's succeeded rows left by its requests (each once), as last read. */
  readonly charges: readonly Charge[];
  readonly charged: number;
  /**
   * `over`: charged more than meant (a double charge); `once`: charged what was meant; `declined`: refused for good;
   * `in-progress`: a request or the key's record is still in progress; `unknown`: a request's fate could not be
   * read; `unpaid`: nothing charged yet (a retryable failure, a connection cut before the work).
   */
  readonly verdict: 'over' | 'once' | 'declined' | 'in-progress' | 'unknown' | 'unpaid';
}

function verdictOf(intended: number, charged: number, attempts: readonly Attempt[], records: readonly PublicRecord[]) {
  if (charged > intended) return 'over';
  if (charged === intended) return 'once';
  if (attempts.some((a) => !settled(a))) return 'in-progress';
  const keys = new Set(attempts.map((a) => a.key));
  // A record in progress whose lease has lapsed (on this browser's clock) holds nothing: a retry takes it over.
  if (records.some((r) => keys.has(r.key) && r.status === 'in_progress' && r.leaseExpiresAt > Date.now()))
    return 'in-progress';
  const last = attempts.at(-1)?.entry;
  if (last?.record?.status === 'failed' && last.record.retryable === false) return 'declined';
  // A request the lab refused before running it ran nothing: it is known, not unknown.
  if (attempts.some((a) => a.entry === null && outcome(a) !== 'refused')) return 'unknown';
  return 'unpaid';
}

/**
 * Groups the requests into payments, each with its own Intended and Charged read from the ledger. `stray`: ledger
 * rows no request in the history names (the history is whole: a request that cannot be journaled does not run).
 *
 * @example
 * const { list, stray } = payments()
 */
export function payments(): { list: Payment[]; stray: Charge[] } {
  const byId = new Map(state.charges.map((c) => [c.id, c]));
  const groups = new Map<string, Attempt[]>();
  for (const a of state.attempts) groups.set(a.payment, [...(groups.get(a.payment) ?? []), a]);
  const accounted = new Set<string>();
  const list = [...groups].map(([id, attempts], i): Payment => {
    const ids = new Set(attempts.flatMap((a) => (a.entry?.charge ? [a.entry.charge.id] : [])));
    const charges = [...ids].flatMap((chargeId) => {
      accounted.add(chargeId);
      const row = byId.get(chargeId);
      return row?.status === 'succeeded' ? [row] : [];
    });
    const first = attempts[0] as Attempt;
    const charged = charges.reduce((sum, c) => sum + c.amount, 0);
    return {
      id,
      n: i + 1,
      key: first.key,
      intended: first.amount,
      attempts,
      charges,
      charged,
      verdict: verdictOf(first.amount, charged, attempts, state.records),
    };
  });
  return { list, stray: state.charges.filter((c) => c.status === 'succeeded' && !accounted.has(c.id)) };
}
