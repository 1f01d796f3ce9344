/**
 * The chaos run's history and the checker that judges it once the run has quiesced. Pure: it reads what the
 * clients saw, the ledger rows and the idempotency records, and the faults' time windows, and returns the
 * figures and every violation of the invariants (issue 6, item 1):
 *
 * - exactly one charge per logical operation (the ledger, read from its database, matched by the operation's
 *   unique amount), and it is the charge the client was told about;
 * - every answer a client accepted (2xx, or the 402 of a declined card) for a key is byte-identical;
 * - no 5xx (or dropped answer) hid a committed charge from a client that then got a different answer;
 * - no record left `in_progress` (past its lease, or at all) once the run quiesces, and each record holds the
 *   operation's outcome;
 * - slow work undisturbed by the nemesis keeps its lease by renewal: it completes itself, and a probe sent
 *   after the lease would have lapsed is refused with 409.
 */

export interface Operation {
  readonly index: number;
  readonly account: string;
  readonly key: string;
  /** Unique within the run: it ties ledger rows to operations. */
  readonly amount: number;
  /** `tok_chargeDeclined`: the accepted answer is a 402, and the ledger holds one failed charge. */
  readonly declined: boolean;
}

export type Role = 'client' | 'racer' | 'probe' | 'replay' | 'tamper';
export type HeaderFault = 'drop-after-commit' | 'slow' | 'processor-fail';

export interface Attempt {
  readonly op: number;
  readonly role: Role;
  readonly slot: number;
  readonly faults: readonly HeaderFault[];
  readonly start: number;
  readonly end: number;
  /** The status, or what happened instead of one. */
  readonly outcome: number | 'network' | 'timeout';
  readonly replayed: boolean;
  /** The problem type slug of a problem+json answer. */
  readonly problem: string | null;
  readonly body: string;
}

export interface LedgerRow {
  readonly id: string;
  readonly account: string;
  readonly amount: number;
  readonly status: string;
}

export interface RecordRow {
  readonly key: string;
  readonly status: string;
  readonly resultId: string | null;
  readonly responseStatus: number | null;
  readonly retryable: boolean | null;
  readonly leaseExpiresAt: number;
}

export interface FaultWindow {
  readonly kind: string;
  readonly slots: readonly number[];
  readonly start: number;
  readonly end: number;
  readonly inFlight?: number;
}

export interface History {
  readonly ops: readonly Operation[];
  readonly attempts: readonly Attempt[];
  readonly ledger: readonly LedgerRow[];
  /** Records by account. */
  readonly records: ReadonlyMap<string, readonly RecordRow[]>;
  readonly faults: readonly FaultWindow[];
  /** When the records were read (epoch ms, wall clock). */
  readonly readAt: number;
  readonly skews: readonly number[];
}

export interface Verdict {
  readonly figures: Record<string, number | string>;
  readonly violations: string[];
}

/** How long after a fault ends its process may still feel it (a store client reconnecting with backoff). */
const RECOVERY_MS = 2_000;

export const isAccepted = (a: Pick<Attempt, 'outcome'>): boolean => typeof a.outcome === 'number' && ((a.outcome >= 200 && a.outcome < 300) || a.outcome === 402);
const isFailure = (a: Attempt): boolean => typeof a.outcome !== 'number' || a.outcome >= 500;

/** The charge id an accepted answer names: `id` of a 201 charge, `charge` of a 402 card-declined problem. */
export function chargeIdOf(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { id?: unknown; charge?: unknown };
    const id = parsed.charge ?? parsed.id;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Judges a quiesced run.
 *
 * @example
 * const { figures, violations } = check(history)
 */
export function check(history: History): Verdict {
  const { ops, attempts, ledger, records, faults, readAt } = history;
  const violations: string[] = [];
  const byOp = new Map<number, Attempt[]>();
  for (const a of attempts) byOp.set(a.op, [...(byOp.get(a.op) ?? []), a]);
  const rowsByAmount = new Map<string, LedgerRow[]>();
  for (const row of ledger) rowsByAmount.set(`${row.account}/${row.amount}`, [...(rowsByAmount.get(`${row.account}/${row.amount}`) ?? []), row]);

  let failedThenResolved = 0;
  let divergent = 0;
  for (const op of ops) {
    const mine = byOp.get(op.index) ?? [];
    const accepted = mine.filter((a) => a.role !== 'tamper' && isAccepted(a));
    const tag = `op ${op.index} (${op.account} ${op.key})`;
    if (accepted.length === 0) {
      violations.push(`${tag}: no answer accepted (${mine.map((a) => a.outcome).join(', ')})`);
      continue;
    }
    const distinct = new Set(accepted.map((a) => `${a.outcome} ${a.body}`));
    if (distinct.size > 1) {
      divergent++;
      violations.push(`${tag}: ${distinct.size} different accepted answers: ${[...distinct].map((d) => d.slice(0, 120)).join(' | ')}`);
    }
    const first = accepted[0] as Attempt;
    const wantStatus = op.declined ? 402 : 201;
    if (first.outcome !== wantStatus) violations.push(`${tag}: accepted ${first.outcome}, expected ${wantStatus}`);
    const chargeId = chargeIdOf(first.body);
    const rows = rowsByAmount.get(`${op.account}/${op.amount}`) ?? [];
    if (rows.length !== 1) violations.push(`${tag}: ${rows.length} charges in the ledger (expected exactly 1): ${rows.map((r) => r.id).join(', ')}`);
    else if (rows[0]?.id !== chargeId) violations.push(`${tag}: the client was told ${chargeId}, the ledger holds ${rows[0]?.id}`);
    else if (rows[0]?.status !== (op.declined ? 'failed' : 'succeeded')) violations.push(`${tag}: ledger status ${rows[0]?.status}`);
    // A 5xx or a dropped answer before acceptance: the charge it may have committed is the one later answered.
    if (mine.some((a) => isFailure(a) && a.start < first.end)) failedThenResolved++;

    const record = records.get(op.account)?.find((r) => r.key === op.key);
    if (!record) violations.push(`${tag}: no idempotency record`);
    else {
      const want = op.declined ? ['failed', 402, false] : ['succeeded', 201, null];
      const got = [record.status, record.responseStatus, record.retryable];
      if (JSON.stringify(got) !== JSON.stringify(want)) violations.push(`${tag}: record ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
      if (record.resultId !== chargeId) violations.push(`${tag}: record resultId ${record.resultId}, answered ${chargeId}`);
    }

    for (const t of mine.filter((a) => a.role === 'tamper')) {
      if (isAccepted(t)) violations.push(`${tag}: a tampered body (another amount) was accepted with ${t.outcome}`);
      else if (t.outcome === 400 && t.problem !== 'idempotency-key-reused') violations.push(`${tag}: tamper answered 400 ${t.problem}`);
    }
    for (const a of mine) {
      if (typeof a.outcome === 'number' && a.outcome >= 400 && a.outcome < 500 && ![402, 409].includes(a.outcome) && a.role !== 'tamper') {
        violations.push(`${tag}: unexpected ${a.outcome} ${a.problem}`);
      }
      if (a.outcome === 500) violations.push(`${tag}: 500 ${a.problem}: ${a.body.slice(0, 200)}`);
    }
  }

  // Slow work keeps its lease by renewal — judged where nothing was done to its own process meanwhile (nor
  // shortly before: a store client takes a moment to reconnect after its link comes back).
  const disturbed = (a: Attempt) => faults.some((f) => f.slots.includes(a.slot) && f.start < a.end && f.end + RECOVERY_MS > a.start);
  let slowJudged = 0;
  let probesRefused = 0;
  for (const slow of attempts.filter((a) => a.faults.includes('slow') && a.role !== 'probe')) {
    if (disturbed(slow)) continue;
    slowJudged++;
    const op = ops[slow.op] as Operation;
    if (slow.replayed || slow.problem === 'idempotency-lease-lost' || slow.problem === 'idempotency-key-in-use') {
      violations.push(`op ${op.index}: undisturbed slow work lost its lease (answered ${slow.outcome} ${slow.problem ?? ''}${slow.replayed ? ' replayed' : ''})`);
    }
    for (const probe of (byOp.get(slow.op) ?? []).filter((a) => a.role === 'probe' && a.start > slow.start && a.end < slow.end)) {
      if (probe.outcome === 409 && probe.problem === 'idempotency-key-in-use') probesRefused++;
      else if (isAccepted(probe)) violations.push(`op ${op.index}: a probe took over undisturbed slow work (${probe.outcome})`);
    }
  }

  // Quiesced: nothing may be left in progress.
  let inProgress = 0;
  for (const [account, rows] of records) {
    for (const row of rows.filter((r) => r.status === 'in_progress')) {
      inProgress++;
      violations.push(`${account} ${row.key}: in_progress ${row.leaseExpiresAt <= readAt ? 'past its lease' : 'with a live lease'} after the run quiesced`);
    }
  }
  const known = new Set(ops.map((op) => `${op.account}/${op.amount}`));
  for (const row of ledger) if (!known.has(`${row.account}/${row.amount}`)) violations.push(`stray charge ${row.id} (${row.account}, ${row.amount})`);

  const count = (predicate: (a: Attempt) => boolean) => attempts.filter(predicate).length;
  const statuses = new Map<string, number>();
  for (const a of attempts) statuses.set(String(a.outcome), (statuses.get(String(a.outcome)) ?? 0) + 1);
  const kinds = (kind: string) => faults.filter((f) => f.kind === kind);
  const figures: Record<string, number | string> = {
    operations: ops.length,
    'declined operations': ops.filter((op) => op.declined).length,
    'operations raced by a second client': new Set(attempts.filter((a) => a.role === 'racer').map((a) => a.op)).size,
    requests: attempts.length,
    'answers accepted': count((a) => a.role !== 'tamper' && isAccepted(a)),
    statuses: [...statuses].sort().map(([s, n]) => `${s}×${n}`).join(' '),
    'fault: drop-after-commit (answers dropped)': count((a) => a.faults.includes('drop-after-commit') && a.outcome === 'network'),
    'fault: slow work past the lease': count((a) => a.faults.includes('slow')),
    'fault: processor failure (503, retryable)': count((a) => a.faults.includes('processor-fail')),
    'fault: kill -9 (restarted)': kinds('kill').length,
    'fault: kill -9 with requests in flight': kinds('kill').filter((f) => (f.inFlight ?? 0) > 0).length,
    'fault: SIGSTOP past the lease (zombie)': kinds('pause').length,
    'fault: store link cut': kinds('cut').length,
    'fault: store link stalled': kinds('stall').length,
    'fault: clock skew (ms, per process)': history.skews.join(' / '),
    'zombie completions refused (409 lease-lost)': count((a) => a.problem === 'idempotency-lease-lost'),
    'store unavailable (503, work not run)': count((a) => a.problem === 'idempotency-store-unavailable'),
    'client timeouts (gave up, retried)': count((a) => a.outcome === 'timeout'),
    'tampered retries (refused)': count((a) => a.role === 'tamper' && a.outcome === 400),
    'slow work judged for renewal / probes refused': `${slowJudged} / ${probesRefused}`,
    'operations with a 5xx or dropped answer, resolved to the one charge': failedThenResolved,
    'charges in the ledger': ledger.length,
    'records in progress after quiesce': inProgress,
    'operations with divergent answers': divergent,
    violations: violations.length,
  };
  return { figures, violations };
}
