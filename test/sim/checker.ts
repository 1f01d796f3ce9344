/**
 * @module The invariants, checked as each step happens (every store call, every handler step, every answer)
 * and at quiescence. The first broken one stops the run.
 *
 * A record's *life* runs from the write that creates it (no record, or an expired one) until it is deleted or
 * a claim finds it expired. Its id may not change within a life: a claim that replaces a live record's id does
 * not start a new life, so the double charge it allows is counted against the one life.
 */
import type { IdempotencyRecord, RunResult, StoredResponse, WriteResult } from 'idem';
import type { LedgerRow } from './backend.js';
import { T0 } from './scenario.js';

export type InvariantName =
  /** More than one charge (processor charge or ledger row) in one life of a (scope, key). */
  | 'double-charge'
  /**
   * A final answer (2xx, or a deterministic refusal) for a key differs, byte for byte, from the first final
   * answer of that life; or a retryable one (5xx) was decided after the life's final outcome was committed.
   */
  | 'answer-changed'
  /** A completion, renewal or release with a stale token changed the record or reported success. */
  | 'stale-write'
  /** A record stayed `in_progress` past its lease once every process was idle (a retry could not get an answer). */
  | 'stuck-in-progress'
  /** The work ran with a payload whose fingerprint is not the record's. */
  | 'mismatch-executed'
  /** A write with the current token, on an `in_progress` record, was refused. */
  | 'fenced-write-refused'
  /** The engine rejected with something other than an `IdempotencyError` (or the handler's own error). */
  | 'unexpected-error'
  /** The simulation kept going (timers firing for ever) after every client was done. */
  | 'no-quiescence'
  /**
   * A claim decided against the contract (docs/DESIGN.md: Claim) on the record it found: refused though that record
   * was claimable (absent, expired, or — same fingerprint — failed and retryable, or in progress past its lease),
   * or granted though it was not.
   */
  | 'claim-decision'
  /**
   * A completion recorded an outcome its response's status class does not allow (the simulated handler never
   * overrides the class): 2xx → succeeded; a deterministic 4xx → failed, final; 5xx, 408, 409, 425, 429 → failed,
   * retryable. Or a retryable response was replayed, or a fault-free retry at quiescence got one.
   */
  | 'outcome-class'
  /** Work ran on a live, unfrozen process for longer than `renewEveryMs` past its start (or its last renewal's reply) without a renewal sent. */
  | 'lease-not-renewed'
  /** The work's `effects` (its ledger write) committed with a retryable outcome: effects commit only with a final one. */
  | 'effects-on-retryable'
  /**
   * A live lease was expired by TTL: a claim replaced an `in_progress` record whose lease was still running (by
   * the claimer's clock) because its `expiresAt` had passed; or a record was `in_progress` with `expiresAt` before
   * its `leaseExpiresAt` (renewals must carry `expiresAt` forward: max(old, now + leaseMs)).
   */
  | 'ttl-takeover'
  /** The engine answered with a fresh (not replayed) response whose completion was never committed to the record. */
  | 'answer-without-record'
  /** Two handlers of one key ran at once, both with a live signal (test/sim/time.ts says which pairs are excused). */
  | 'concurrent-work'
  /** A lease was still renewed `maxHoldMs` plus one lease after its work began. */
  | 'key-held-forever'
  /** The engine's own part of a request outlasted every store timeout it may wait for. */
  | 'request-hung';

export interface Violation {
  readonly invariant: InvariantName;
  readonly message: string;
}

interface Life {
  readonly n: number;
  readonly pk: string;
  readonly fingerprint: string;
  readonly ids: Set<string>;
  /** The latest `expiresAt` seen on a record of this life. */
  expiresAt: number;
  readonly charges: Set<string>;
  ledgerRows: number;
  firstFinal: { readonly bytes: string; readonly by: string } | undefined;
  /** When each token's completion was committed (a store-call count) and its response's bytes; and the first final one. */
  readonly commits: Map<string, { readonly at: number; readonly bytes: string | undefined }>;
  finalCommit: number | undefined;
}

/** What a fenced write was asked to do. */
export interface WriteInfo {
  readonly token?: string | undefined;
  readonly now?: number | undefined;
  /** A claim's fingerprint. */
  readonly fingerprint?: string | undefined;
}

/**
 * The invariant checker of one run.
 *
 * @example
 * const checker = new Checker((line) => trace.push(line))
 * checker.onAnswer('a3', result)
 */
export class Checker {
  violation: Violation | undefined;
  /** What happened to records, for coverage reports: lives begun, of which after an expiry. */
  readonly counts = { lives: 0, livesAfterExpiry: 0 };
  readonly #note: (line: string) => void;
  readonly #current = new Map<string, Life | undefined>();
  readonly #byId = new Map<string, Life>();
  #lives = 0;
  #ops = 0;

  constructor(note: (line: string) => void) {
    this.#note = note;
  }

  fail(invariant: InvariantName, message: string): void {
    if (!this.violation) this.violation = { invariant, message };
  }

  /** After every store call: lives, and the fencing of every token-conditional write. */
  onStoreOp(
    op: string,
    pk: string,
    info: WriteInfo,
    before: IdempotencyRecord | null,
    after: IdempotencyRecord | null,
    result: unknown,
    threw: boolean,
  ): void {
    if (op === 'claim' && !threw && info.now !== undefined && info.fingerprint !== undefined) {
      this.#checkClaim(pk, info, before, result as ClaimResultLike | undefined);
    }
    const known = after ? this.#byId.get(after.id) : undefined;
    if (after && after.id !== before?.id && known) {
      // An id this checker already knows (a claim's reply named it; its write landed after a yield): same life.
      this.#current.set(pk, known);
    } else if (after && after.id !== before?.id) {
      const current = this.#current.get(pk);
      // Only a claim (or a planted defect's unconditional put in its place) may start a life over an expired record.
      const creates = op === 'claim' || op === 'put';
      const expired = before !== null && creates && info.now !== undefined && before.expiresAt <= info.now;
      if (!current || before === null || expired) {
        this.#begin(pk, after, expired);
      } else {
        current.ids.add(after.id);
        this.#byId.set(after.id, current);
        this.#note(`    ! id of ${pk} replaced within life L${current.n}: ${before.id} → ${after.id}`);
      }
    }
    if (!after && before) this.#current.set(pk, undefined); // deleted (released)
    // A claim's reply names the record it wrote: register its id even if the write is not visible yet (a store
    // that yields between its read and its write lands it later).
    const claimed = op === 'claim' && !threw ? (result as ClaimResultLike | undefined) : undefined;
    if (claimed?.kind === 'claimed' && !this.#byId.has(claimed.record.id)) {
      const current = this.#current.get(pk);
      if (current && info.now !== undefined && current.expiresAt > info.now) {
        current.ids.add(claimed.record.id);
        this.#byId.set(claimed.record.id, current);
        this.#note(
          `    ! claim of ${pk} granted id ${claimed.record.id} within life L${current.n}, not yet visible in the store`,
        );
      } else {
        this.#begin(pk, claimed.record, current !== undefined);
      }
    }
    const life = after ? this.#byId.get(after.id) : undefined;
    if (life && after) life.expiresAt = after.expiresAt;
    if (after?.status === 'in_progress' && after.expiresAt < after.leaseExpiresAt) {
      this.fail(
        'ttl-takeover',
        `${op} left ${pk} in_progress with expiresAt ${after.expiresAt - T0} before its lease (→${after.leaseExpiresAt - T0}): ${describe(after)}`,
      );
    }

    if (op !== 'complete' && op !== 'renew' && op !== 'release') return;
    const held = before !== null && before.status === 'in_progress' && before.token === info.token;
    const ok = !threw && (result as WriteResult | undefined)?.ok === true;
    if (op === 'complete' && held && ok && life && after && info.token !== undefined) {
      const at = ++this.#ops;
      life.commits.set(info.token, { at, bytes: after.response ? responseBytes(after.response) : undefined });
      if (after.response && isFinal(after.response.status) && life.finalCommit === undefined) life.finalCommit = at;
      if (after.response && after.status !== 'in_progress') {
        const want = statusClass(after.response.status);
        const got = after.status === 'succeeded' ? 'succeeded' : after.retryable ? 'retryable' : 'final';
        if (want !== got) {
          this.fail(
            'outcome-class',
            `${pk} recorded ${describe(after)}: a ${after.response.status} is ${want}, not ${got}`,
          );
        }
      }
    }
    if (!held) {
      if (!sameRecord(before, after)) {
        this.fail(
          'stale-write',
          `${op} with stale token ${info.token} changed ${pk}: ${describe(before)} → ${describe(after)}`,
        );
      } else if (ok) {
        this.fail(
          'stale-write',
          `${op} with stale token ${info.token} on ${pk} reported ok (record: ${describe(before)})`,
        );
      }
    } else if (!threw && !ok) {
      this.fail('fenced-write-refused', `${op} with the current token ${info.token} on in_progress ${pk} was refused`);
    }
  }

  #begin(pk: string, record: IdempotencyRecord, afterExpiry: boolean): void {
    this.counts.lives++;
    if (afterExpiry) this.counts.livesAfterExpiry++;
    const life: Life = {
      n: ++this.#lives,
      pk,
      fingerprint: record.fingerprint,
      ids: new Set([record.id]),
      expiresAt: record.expiresAt,
      charges: new Set(),
      ledgerRows: 0,
      firstFinal: undefined,
      commits: new Map(),
      finalCommit: undefined,
    };
    this.#current.set(pk, life);
    this.#byId.set(record.id, life);
    this.#note(`    life L${life.n} of ${pk} begins: id=${record.id}`);
  }

  /** The claim's decision against the contract, on the record as it was when the claim ran. */
  #checkClaim(
    pk: string,
    info: WriteInfo,
    before: IdempotencyRecord | null,
    result: ClaimResultLike | undefined,
  ): void {
    if (!result) return;
    const now = info.now as number;
    const claimable = contractClaimable(before, info.fingerprint as string, now);
    if (result.kind === 'claimed' && !claimable) {
      this.fail(
        'claim-decision',
        `a claim of ${pk} at ${now - T0} was granted over ${describe(before)} (exp→${before ? before.expiresAt - T0 : '-'}), which was not claimable`,
      );
    } else if (result.kind === 'existing' && claimable) {
      this.fail(
        'claim-decision',
        `a claim of ${pk} at ${now - T0} was refused by ${describe(before)} (exp→${before ? before.expiresAt - T0 : '-'}), which was claimable`,
      );
    } else if (
      result.kind === 'claimed' &&
      before?.status === 'in_progress' &&
      before.expiresAt <= now &&
      before.leaseExpiresAt > now
    ) {
      this.fail(
        'ttl-takeover',
        `a claim of ${pk} at ${now - T0} took over a live lease (→${before.leaseExpiresAt - T0}) because the record expired at ${before.expiresAt - T0}: ${describe(before)}`,
      );
    }
  }

  /** The work is about to run for `id` with a payload of this fingerprint. */
  onWorkStart(by: string, id: string, fingerprint: string): void {
    const life = this.#byId.get(id);
    if (!life) return this.fail('mismatch-executed', `${by}: the work ran for id ${id}, which no record ever held`);
    if (life.fingerprint !== fingerprint) {
      this.fail(
        'mismatch-executed',
        `${by}: the work ran with fingerprint ${fingerprint.slice(0, 8)}… on ${life.pk} (life L${life.n}, fingerprint ${life.fingerprint.slice(0, 8)}…)`,
      );
    }
  }

  /** The processor made a new charge for this record id. */
  onCharge(by: string, id: string, chargeId: string): void {
    const life = this.#byId.get(id);
    if (!life) return this.fail('double-charge', `${by}: charge ${chargeId} for id ${id}, which no record ever held`);
    life.charges.add(chargeId);
    if (life.charges.size > 1) {
      this.fail(
        'double-charge',
        `${life.pk} charged ${life.charges.size} times in life L${life.n}: ${[...life.charges].join(', ')}`,
      );
    }
  }

  /** A ledger row was written; `committedWith`: the record as the completion that committed it left it. */
  onLedgerRow(row: LedgerRow, committedWith?: IdempotencyRecord | null): void {
    if (committedWith && committedWith.status === 'failed' && committedWith.retryable) {
      this.fail(
        'effects-on-retryable',
        `ledger row ${row.chargeId} for ${row.pk} committed with a retryable outcome: ${describe(committedWith)}`,
      );
    }
    const life = this.#byId.get(row.recordId);
    if (!life)
      return this.fail('double-charge', `ledger row ${row.chargeId} for id ${row.recordId}, which no record ever held`);
    life.ledgerRows++;
    this.#note(`    ledger row for ${row.pk} (${row.chargeId}, life L${life.n})`);
    if (life.ledgerRows > 1)
      this.fail('double-charge', `${life.pk} has ${life.ledgerRows} ledger rows in life L${life.n}`);
  }

  /**
   * The engine gave this answer. Final answers of one life must all be the same bytes. A retryable one (a 5xx
   * from the work) is not remembered, by design: it may reach its client after another attempt succeeded, but
   * it must have been committed before that success was.
   */
  onAnswer(by: string, result: RunResult): void {
    if (!result.record) return; // Released: the key was freed, nothing was remembered.
    const life = this.#byId.get(result.record.id);
    if (!life)
      return this.fail('answer-changed', `${by}: an answer for id ${result.record.id}, which no record ever held`);
    const bytes = responseBytes(result.response);
    const committed = life.commits.get(result.record.token);
    if (!result.replayed && committed?.bytes !== bytes) {
      return this.fail(
        'answer-without-record',
        `${by} got ${preview(result.response)} for ${life.pk} (life L${life.n}), but no completion with token ${result.record.token} committed it`,
      );
    }
    if (result.replayed && !isFinal(result.response.status)) {
      return this.fail(
        'outcome-class',
        `${by} got a replay of a retryable ${preview(result.response)} for ${life.pk} (life L${life.n})`,
      );
    }
    if (!isFinal(result.response.status)) {
      if (
        !result.replayed &&
        life.finalCommit !== undefined &&
        (committed === undefined || committed.at > life.finalCommit)
      ) {
        this.fail(
          'answer-changed',
          `${by} got ${preview(result.response)} for ${life.pk} (life L${life.n}), decided after its final outcome`,
        );
      }
      return;
    }
    if (!life.firstFinal) {
      life.firstFinal = { bytes, by };
    } else if (bytes !== life.firstFinal.bytes) {
      this.fail(
        'answer-changed',
        `${by} got ${preview(result.response)} for ${life.pk} (life L${life.n}), but ${life.firstFinal.by} got ${previewBytes(life.firstFinal.bytes)}`,
      );
    }
  }

  lifeOf(id: string): number | undefined {
    return this.#byId.get(id)?.n;
  }
}

/**
 * docs/DESIGN.md (Failure policy), written here independently of the engine's `classifyStatus` (a checker that imported it
 * would agree with a defect in it): 2xx (and 3xx) succeed; a deterministic refusal — a 4xx but 408, 409, 425 and
 * 429 — is final; anything else (5xx, 408, 409, 425, 429) may be retried.
 *
 * @example
 * statusClass(429) // → 'retryable'
 */
export function statusClass(status: number): 'succeeded' | 'final' | 'retryable' {
  if (status >= 200 && status < 400) return 'succeeded';
  if (status >= 400 && status < 500 && status !== 408 && status !== 409 && status !== 425 && status !== 429)
    return 'final';
  return 'retryable';
}

/** A response the engine records for replay: a success, or a deterministic refusal. */
export function isFinal(status: number): boolean {
  return statusClass(status) !== 'retryable';
}

/**
 * The claim condition of docs/DESIGN.md (Claim), written here independently of `isClaimable` (src/core/record.ts),
 * for the same reason as {@link statusClass}.
 *
 * @example
 * contractClaimable(null, fp, now) // → true
 */
export function contractClaimable(existing: IdempotencyRecord | null, fingerprint: string, now: number): boolean {
  if (existing === null) return true;
  if (existing.expiresAt <= now) return true;
  if (existing.fingerprint !== fingerprint) return false;
  if (existing.status === 'failed') return existing.retryable;
  if (existing.status === 'in_progress') return existing.leaseExpiresAt <= now;
  return false;
}

/** What a claim replies, as far as the checker reads it. */
interface ClaimResultLike {
  readonly kind: 'claimed' | 'existing';
  readonly record: IdempotencyRecord;
}

/**
 * Status, headers and body bytes, as one comparable string.
 *
 * @example
 * responseBytes(a) === responseBytes(b) // byte-identical responses
 */
export function responseBytes(response: StoredResponse): string {
  return `${response.status}\n${JSON.stringify(response.headers)}\n${Buffer.from(response.body).toString('base64')}`;
}

function preview(response: StoredResponse): string {
  return `${response.status} ${Buffer.from(response.body).toString('utf8')}`;
}

function previewBytes(bytes: string): string {
  const [status, , body] = bytes.split('\n');
  return `${status} ${Buffer.from(body ?? '', 'base64').toString('utf8')}`;
}

/**
 * Every field of two records, the response bytes included, is equal (both null counts as equal).
 *
 * @example
 * if (!sameRecord(before, after)) fail('stale-write', '…')
 */
export function sameRecord(a: IdempotencyRecord | null, b: IdempotencyRecord | null): boolean {
  if (a === null || b === null) return a === b;
  return (
    a.pk === b.pk &&
    a.status === b.status &&
    a.fingerprint === b.fingerprint &&
    a.id === b.id &&
    a.token === b.token &&
    a.claimedAt === b.claimedAt &&
    a.leaseExpiresAt === b.leaseExpiresAt &&
    a.expiresAt === b.expiresAt &&
    a.retryable === b.retryable &&
    a.resultId === b.resultId &&
    (a.response === null || b.response === null
      ? a.response === b.response
      : responseBytes(a.response) === responseBytes(b.response))
  );
}

/**
 * A record in one line, for traces.
 *
 * @example
 * describe(record) // 'succeeded 201 id=… token=… lease→1979'
 */
export function describe(record: IdempotencyRecord | null): string {
  if (!record) return 'none';
  const status = record.status === 'failed' ? `failed${record.retryable ? '(retryable)' : '(final)'}` : record.status;
  const response = record.response ? ` ${record.response.status}` : '';
  return `${status}${response} id=${record.id} token=${record.token} lease→${record.leaseExpiresAt - T0}`;
}
