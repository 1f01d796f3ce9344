/**
 * @module One request from the lab page: what the browser sent and saw, joined with the server's own account of it
 * (`GET /v1/lab/history`), and the outcome the page shows, read from that account first.
 */
import type { LabEntry } from './api.js';

/** What happened to a request, as the server's history tells it (or the browser, while there is none to read). */
export type Outcome =
  /** Sent by this page; no answer yet. */
  | 'pending'
  /** The server is still working on it (sent before this page loaded, or from another tab). */
  | 'running'
  /** The server process stopped while it ran: its record and ledger row were read back afterwards. */
  | 'interrupted'
  /** The lab refused it before it ran (its history is full, or could not be written): nothing was charged. */
  | 'refused'
  | 'charged'
  | 'replayed'
  | 'in-flight'
  /** A takeover the `reconcile` hook answered from the ledger: the charge it found was recorded and sent; nothing ran. */
  | 'reconciled'
  /** A takeover under `'quarantine'`: 409 `operation_state: "unknown"`, nothing ran, until an operator resolves the key. */
  | 'quarantined'
  | 'mismatch'
  /** The work committed; the connection was cut before the answer. */
  | 'dropped'
  /** The attempt died after calling the processor: no completion, no answer. */
  | 'crashed'
  | 'processor-failed'
  | 'declined'
  /** An answer the lab does not expect (a 5xx from the store, say). */
  | 'error'
  /** No answer, and the server's history could not be read: nothing is known. */
  | 'unknown';

/**
 * One logical request: what the person asked for. Its fields mean what they mean in the server's history entry
 * (`takeover`: the policy and processor it asks for; absent, the defaults), but for `payment`, which the page always
 * names.
 */
export interface Spec extends Pick<
  LabEntry,
  'control' | 'group' | 'key' | 'amount' | 'source' | 'faults' | 'takeover'
> {
  readonly payment: string;
}

/** One request as sent: its spec, and what the browser and the server's history say happened to it. */
export interface Attempt extends Spec {
  /** The page's id for the request (`Idem-Lab-Request`); the history finds it by this. */
  readonly request: string;
  /** Epoch ms when it was sent (or, from the history, received). */
  readonly sentAt: number;
  /** What this browser saw: null for a request this page did not send (another tab, an earlier load). */
  seen: {
    status: number | null;
    retryAfter: string | null;
    latencyMs: number | null;
    answered: boolean;
    /** The problem+json `type` of the answer, if it was one. */
    problem: string | null;
  } | null;
  /** The server's account, once read back. */
  entry: LabEntry | null;
}

/** The problem types of a request the lab refused before running it. */
export const LAB_REFUSALS: readonly string[] = [
  'urn:idem:problem:lab-history-full',
  'urn:idem:problem:lab-history-unavailable',
  'urn:idem:problem:lab-busy',
];

/** The problem type of a quarantined key's answer (409, `operation_state: "unknown"`). */
export const OUTCOME_UNKNOWN = 'urn:idem:problem:idempotency-outcome-unknown';

/** An attempt known only from the server's history. */
export function fromEntry(entry: LabEntry): Attempt {
  return {
    request: entry.request,
    control: entry.control,
    payment: entry.payment ?? `request ${entry.request}`,
    group: entry.group,
    key: entry.key,
    amount: entry.amount,
    source: entry.source,
    faults: entry.faults,
    ...(entry.takeover ? { takeover: entry.takeover } : {}),
    sentAt: entry.at,
    seen: null,
    entry,
  };
}

/**
 * The outcome, from the server's history when it has the request, else from what the browser saw.
 *
 * @example
 * outcome(attempt) // → 'replayed'
 */
export function outcome(a: Attempt): Outcome {
  const e = a.entry;
  if (e === null && a.seen?.problem && LAB_REFUSALS.includes(a.seen.problem)) return 'refused';
  if (e === null || e.state === 'running') {
    if (a.seen === null) return e === null ? 'unknown' : 'running';
    if (a.seen.latencyMs === null) return 'pending';
    return e === null ? 'unknown' : 'running';
  }
  if (e.state === 'interrupted') return 'interrupted';
  if (e.work === 'crashed') return 'crashed';
  if (e.faults.drop && e.answer === null) return e.work === null ? 'error' : 'dropped';
  if (e.claim === 'replayed') return 'replayed';
  if (e.claim === 'reconciled') return 'reconciled';
  if (e.answer?.problem === OUTCOME_UNKNOWN) return 'quarantined';
  if (e.claim === 'in-flight') return 'in-flight';
  if (e.claim === 'mismatch') return 'mismatch';
  if (e.work === 'processor-failed') return 'processor-failed';
  if (e.work === 'declined') return 'declined';
  if (e.work === 'charged') return 'charged';
  return 'error';
}

/**
 * The request log's words for an outcome: short, and true of what the server reported.
 *
 * @example
 * describeOutcome(attempt) // → '409 in flight'
 */
export function describeOutcome(a: Attempt): string {
  const e = a.entry;
  switch (outcome(a)) {
    case 'pending':
      return 'waiting…';
    case 'running':
      return 'running on the server';
    case 'interrupted':
      return e?.charge?.status === 'succeeded' ? 'server stopped; charged' : 'server stopped';
    case 'refused':
      return `${a.seen?.status ?? ''} not run`.trim();
    case 'charged':
      return e?.claim === 'taken-over'
        ? 'took over, charged'
        : e?.claim === 'reclaimed'
          ? 'reclaimed, charged'
          : 'charged';
    case 'replayed':
      return `${e?.answer?.status ?? ''} replayed`.trim();
    case 'in-flight':
      return '409 in flight';
    case 'reconciled':
      return `${e?.answer?.status ?? ''} reconciled, not charged`.trim();
    case 'quarantined':
      return '409 outcome unknown';
    case 'mismatch':
      return `${e?.answer?.status ?? 400} mismatch`;
    case 'dropped':
      return e?.charge?.status === 'succeeded' ? 'charged, answer dropped' : 'answer dropped';
    case 'crashed':
      return 'crashed mid-charge';
    case 'processor-failed':
      return '503 processor failed';
    case 'declined':
      return `${e?.answer?.status ?? 402} declined`;
    case 'error':
      return `error ${e?.status ?? a.seen?.status ?? ''}`.trim();
    case 'unknown':
      return a.seen?.answered ? `${a.seen.status ?? ''} (not read back)`.trim() : 'no answer, unknown';
  }
}

/** True when the server has the request and is done with it (or nothing more will be learnt from this page). */
export const settled = (a: Attempt): boolean => {
  const o = outcome(a);
  return o !== 'pending' && o !== 'running';
};

/** How long the request took: as this browser measured it, else as the server did. Null while it runs. */
export const latencyOf = (a: Attempt): number | null => a.seen?.latencyMs ?? a.entry?.ms ?? null;
