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
  /**
   * What the servers logged, by the key's hash (`keyHash` of demo/log.ts: the logs never carry the key itself).
   * Optional: only for the excerpts of violations.
   */
  readonly logsFor?: (key: string) => readonly string[];
}

/** The invariants of the module comment, by name: what a violation reports, and what a replay looks for. */
export type ChaosInvariant =
  | 'one-charge'
  | 'told-the-charge'
  | 'identical-answers'
  | 'right-answer'
  | 'no-answer-accepted'
  | 'record-outcome'
  | 'tamper-refused'
  | 'unexpected-answer'
  | 'lease-kept-by-renewal'
  | 'probe-refused'
  | 'in-progress-after-quiesce'
  | 'stray-charge';

/**
 * One broken invariant, in full: which, a one-line message, and the part of the history that shows it — every
 * attempt of the operation (times relative to the run's first request), its ledger rows, its record, the fault
 * windows that overlap it, and the servers' log lines for its key (when the history carries them).
 */
export interface ChaosViolation {
  readonly invariant: ChaosInvariant;
  readonly message: string;
  /** The operation it concerns, when there is one. */
  readonly op?: number;
  readonly excerpt: readonly string[];
}

export interface Verdict {
  readonly figures: Record<string, number | string>;
  /** One line per violation: `message` of each of `details`, in the same order. */
  readonly violations: string[];
  readonly details: ChaosViolation[];
}

/** How long after a fault ends its process may still feel it (a store client reconnecting with backoff). */
const RECOVERY_MS = 2_000;

export const isAccepted = (a: Pick<Attempt, 'outcome'>): boolean =>
  typeof a.outcome === 'number' && ((a.outcome >= 200 && a.outcome < 300) || a.outcome === 402);
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
  const details: ChaosViolation[] = [];
  const origin = Math.min(...attempts.map((a) => a.start), ...faults.map((f) => f.start), readAt);
  const violate = (invariant: ChaosInvariant, message: string, op?: Operation): void => {
    details.push({ invariant, message, ...(op ? { op: op.index } : {}), excerpt: excerpt(history, origin, op) });
  };
  const byOp = new Map<number, Attempt[]>();
  for (const a of attempts) byOp.set(a.op, [...(byOp.get(a.op) ?? []), a]);
  const rowsByAmount = new Map<string, LedgerRow[]>();
  for (const row of ledger)
    rowsByAmount.set(`${row.account}/${row.amount}`, [
      ...(rowsByAmount.get(`${row.account}/${row.amount}`) ?? []),
      row,
    ]);

  let failedThenResolved = 0;
  let divergent = 0;
  for (const op of ops) {
    const mine = byOp.get(op.index) ?? [];
    const accepted = mine.filter((a) => a.role !== 'tamper' && isAccepted(a));
    const tag = `op ${op.index} (${op.account} ${op.key})`;
    if (accepted.length === 0) {
      violate('no-answer-accepted', `${tag}: no answer accepted (${mine.map((a) => a.outcome).join(', ')})`, op);
      continue;
    }
    const distinct = new Set(accepted.map((a) => `${a.outcome} ${a.body}`));
    if (distinct.size > 1) {
      divergent++;
      violate(
        'identical-answers',
        `${tag}: ${distinct.size} different accepted answers: ${[...distinct].map((d) => d.slice(0, 120)).join(' | ')}`,
        op,
      );
    }
    const first = accepted[0] as Attempt;
    const wantStatus = op.declined ? 402 : 201;
    if (first.outcome !== wantStatus)
      violate('right-answer', `${tag}: accepted ${first.outcome}, expected ${wantStatus}`, op);
    const chargeId = chargeIdOf(first.body);
    const rows = rowsByAmount.get(`${op.account}/${op.amount}`) ?? [];
    if (rows.length !== 1)
      violate(
        'one-charge',
        `${tag}: ${rows.length} charges in the ledger (expected exactly 1): ${rows.map((r) => r.id).join(', ')}`,
        op,
      );
    else if (rows[0]?.id !== chargeId)
      violate('told-the-charge', `${tag}: the client was told ${chargeId}, the ledger holds ${rows[0]?.id}`, op);
    else if (rows[0]?.status !== (op.declined ? 'failed' : 'succeeded'))
      violate('told-the-charge', `${tag}: ledger status ${rows[0]?.status}`, op);
    // A 5xx or a dropped answer before acceptance: the charge it may have committed is the one later answered.
    if (mine.some((a) => isFailure(a) && a.start < first.end)) failedThenResolved++;

    const record = records.get(op.account)?.find((r) => r.key === op.key);
    if (!record) violate('record-outcome', `${tag}: no idempotency record`, op);
    else {
      const want = op.declined ? ['failed', 402, false] : ['succeeded', 201, null];
      const got = [record.status, record.responseStatus, record.retryable];
      if (JSON.stringify(got) !== JSON.stringify(want))
        violate('record-outcome', `${tag}: record ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`, op);
      if (record.resultId !== chargeId)
        violate('record-outcome', `${tag}: record resultId ${record.resultId}, answered ${chargeId}`, op);
    }

    for (const t of mine.filter((a) => a.role === 'tamper')) {
      if (isAccepted(t))
        violate('tamper-refused', `${tag}: a tampered body (another amount) was accepted with ${t.outcome}`, op);
      else if (t.outcome === 400 && t.problem !== 'idempotency-key-reused')
        violate('tamper-refused', `${tag}: tamper answered 400 ${t.problem}`, op);
    }
    for (const a of mine) {
      if (
        typeof a.outcome === 'number' &&
        a.outcome >= 400 &&
        a.outcome < 500 &&
        ![402, 409].includes(a.outcome) &&
        a.role !== 'tamper'
      ) {
        violate('unexpected-answer', `${tag}: unexpected ${a.outcome} ${a.problem}`, op);
      }
      if (a.outcome === 500) violate('unexpected-answer', `${tag}: 500 ${a.problem}: ${a.body.slice(0, 200)}`, op);
    }
  }

  // Slow work keeps its lease by renewal — judged where nothing was done to its own process meanwhile (nor
  // shortly before: a store client takes a moment to reconnect after its link comes back), and where no freeze
  // stalled every process at once (see `stalls`).
  const stalled = stalls(history);
  const disturbed = (a: Attempt) =>
    faults.some((f) => f.slots.includes(a.slot) && f.start < a.end && f.end + RECOVERY_MS > a.start) ||
    stalled.some((w) => w.start < a.end && w.end + RECOVERY_MS > a.start);
  let slowJudged = 0;
  let probesRefused = 0;
  let preempted = 0;
  let excusedByStall = 0;
  for (const slow of attempts.filter((a) => a.faults.includes('slow') && a.role !== 'probe')) {
    if (disturbed(slow)) {
      if (stalled.some((w) => w.start < slow.end && w.end + RECOVERY_MS > slow.start)) excusedByStall++;
      continue;
    }
    const op = ops[slow.op] as Operation;
    // Answered with another attempt's outcome (a replay, or 409 in use): the slow work never held the key. That is
    // a race it lost at the claim — sent first is not claimed first on a loaded machine — if another attempt of
    // the operation was under way before it ended; with none, no claim but its own could have answered it.
    if (slow.replayed || slow.problem === 'idempotency-key-in-use') {
      if ((byOp.get(slow.op) ?? []).some((a) => a !== slow && a.role !== 'probe' && a.start < slow.end)) {
        preempted++;
        continue;
      }
      violate(
        'lease-kept-by-renewal',
        `op ${op.index}: undisturbed slow work was answered ${slow.outcome} ${slow.problem ?? ''}${slow.replayed ? ' replayed' : ''} with no other attempt under way`,
        op,
      );
      continue;
    }
    slowJudged++;
    if (slow.problem === 'idempotency-lease-lost') {
      violate(
        'lease-kept-by-renewal',
        `op ${op.index}: undisturbed slow work lost its lease (answered ${slow.outcome} ${slow.problem})`,
        op,
      );
    }
    for (const probe of (byOp.get(slow.op) ?? []).filter(
      (a) => a.role === 'probe' && a.start > slow.start && a.end < slow.end,
    )) {
      if (probe.outcome === 409 && probe.problem === 'idempotency-key-in-use') probesRefused++;
      else if (isAccepted(probe))
        violate('probe-refused', `op ${op.index}: a probe took over undisturbed slow work (${probe.outcome})`, op);
    }
  }

  // Quiesced: nothing may be left in progress.
  let inProgress = 0;
  for (const [account, rows] of records) {
    for (const row of rows.filter((r) => r.status === 'in_progress')) {
      inProgress++;
      violate(
        'in-progress-after-quiesce',
        `${account} ${row.key}: in_progress ${row.leaseExpiresAt <= readAt ? 'past its lease' : 'with a live lease'} after the run quiesced`,
        ops.find((o) => o.account === account && o.key === row.key),
      );
    }
  }
  const known = new Set(ops.map((op) => `${op.account}/${op.amount}`));
  for (const row of ledger)
    if (!known.has(`${row.account}/${row.amount}`))
      violate('stray-charge', `stray charge ${row.id} (${row.account}, ${row.amount})`);

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
    statuses: [...statuses]
      .sort()
      .map(([s, n]) => `${s}×${n}`)
      .join(' '),
    'fault: drop-after-commit (answers dropped)': count(
      (a) => a.faults.includes('drop-after-commit') && a.outcome === 'network',
    ),
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
    'slow work that lost the claim to a racer / stalled by a freeze elsewhere': `${preempted} / ${excusedByStall}`,
    'freezes that stalled every process (SQLite write lock)': stalled.length,
    'operations with a 5xx or dropped answer, resolved to the one charge': failedThenResolved,
    'charges in the ledger': ledger.length,
    'records in progress after quiesce': inProgress,
    'operations with divergent answers': divergent,
    violations: details.length,
  };
  return { figures, violations: details.map((d) => d.message), details };
}

/**
 * Freezes during which no other process answered anything, while requests to them were held until it ended: the whole
 * cluster stood still with the frozen process. On SQLite that is a process frozen inside a write transaction — it
 * holds the database's one write lock, and every other process's next write (a renewal, a claim, a completion)
 * waits in a synchronous busy wait (busy_timeout 5 s, longer than the freeze) that blocks its event loop too. No
 * renewal can run anywhere meanwhile, so slow work elsewhere is not "undisturbed". Seen in the chaos run under
 * load (docs/RELIABILITY.md); judged from the history, not assumed for every freeze.
 *
 * @example
 * stalls(history) // [{ start, end }] of each freeze that stalled everyone
 */
export function stalls(history: History): Array<{ readonly start: number; readonly end: number }> {
  const out: Array<{ start: number; end: number }> = [];
  for (const f of history.faults.filter((x) => x.kind === 'pause' && !Number.isNaN(x.end))) {
    const from = f.start + STALL_GRACE_MS;
    if (f.end - from < STALL_GRACE_MS) continue;
    // Requests to the other processes: some held until the freeze ended (answered only after it), none answered during it.
    const others = history.attempts.filter((a) => !f.slots.includes(a.slot) && typeof a.outcome === 'number');
    const held = others.filter((a) => a.start < f.end - STALL_GRACE_MS && a.end >= f.end).length;
    const answered = others.filter((a) => a.end > from && a.end < f.end).length;
    if (held > 0 && answered === 0) out.push({ start: f.start, end: f.end });
  }
  return out;
}

/** A freeze must last this long past its start, with nothing answered elsewhere, to count as a stall. */
const STALL_GRACE_MS = 500;

/**
 * The part of a history that shows what happened to one operation (or, with none, the run's faults): every
 * attempt in start order, the ledger rows for its amount, its record, the faults that overlap it, and the
 * servers' log lines for its key. Times are milliseconds after `origin` (the run's first request or fault).
 *
 * @example
 * excerpt(history, origin, ops[3]).join('\n')
 */
export function excerpt(history: History, origin: number, op?: Operation): string[] {
  const at = (ms: number) => `+${String(ms - origin).padStart(6)} ms`;
  const lines: string[] = [];
  const windowOf = (from: number, to: number) =>
    history.faults.filter((f) => f.start <= to && (Number.isNaN(f.end) || f.end + RECOVERY_MS >= from));
  const faultLine = (f: FaultWindow) =>
    `fault ${f.kind.padEnd(5)} slots ${f.slots.join(',')} ${at(f.start)} … ${Number.isNaN(f.end) ? 'never healed' : at(f.end)}` +
    (f.inFlight !== undefined ? ` (${f.inFlight} in flight)` : '');
  if (!op) {
    lines.push(`clock skews ${history.skews.join(' / ')} ms; records read ${at(history.readAt)}`);
    for (const f of history.faults) lines.push(faultLine(f));
    return lines;
  }
  lines.push(`op ${op.index}: ${op.account} key ${op.key} amount ${op.amount}${op.declined ? ' (declined card)' : ''}`);
  const mine = history.attempts.filter((a) => a.op === op.index).sort((a, b) => a.start - b.start);
  for (const a of mine) {
    const what =
      typeof a.outcome === 'number'
        ? `${a.outcome}${a.replayed ? ' replayed' : ''}${a.problem ? ` ${a.problem}` : ''}`
        : a.outcome;
    lines.push(
      `attempt ${a.role.padEnd(6)} slot ${a.slot} ${at(a.start)} … ${at(a.end)} ${a.faults.length ? `[${a.faults.join(',')}] ` : ''}→ ${what}` +
        (a.body ? `  ${a.body.slice(0, 240)}` : ''),
    );
  }
  const rows = history.ledger.filter((r) => r.account === op.account && r.amount === op.amount);
  lines.push(`ledger: ${rows.length === 0 ? 'no row' : rows.map((r) => `${r.id} ${r.status}`).join(', ')}`);
  const record = history.records.get(op.account)?.find((r) => r.key === op.key);
  lines.push(`record: ${record ? JSON.stringify(record) : 'none'}`);
  const from = Math.min(...mine.map((a) => a.start));
  const to = Math.max(...mine.map((a) => a.end));
  if (mine.length > 0) for (const f of windowOf(from, to)) lines.push(faultLine(f));
  lines.push(`clock skews ${history.skews.join(' / ')} ms (by slot)`);
  for (const line of history.logsFor?.(op.key) ?? []) lines.push(`log: ${line}`);
  return lines;
}

/**
 * A violation as the test output and the results file print it: the invariant, the message, and its excerpt.
 *
 * @example
 * console.log(formatViolation(verdict.details[0]))
 */
export function formatViolation(v: ChaosViolation): string {
  return [`✗ [${v.invariant}] ${v.message}`, ...v.excerpt.map((line) => `    ${line}`)].join('\n');
}
