/**
 * @module The invariants, checked as each step happens (every store call, every handler step, every answer)
 * and at quiescence. The first broken one stops the run.
 *
 * A record's *life* runs from the write that creates it (no record, or an expired one) until it is deleted or
 * a claim finds it expired. Its id may not change within a life: a claim that replaces a live record's id does
 * not start a new life, so the double charge it allows is counted against the one life.
 */
import { classifyStatus, type IdempotencyRecord, type RunResult, type StoredResponse, type WriteResult } from 'idem';
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
  | 'no-quiescence';

export interface Violation {
  readonly invariant: InvariantName;
  readonly message: string;
}

interface Life {
  readonly n: number;
  readonly pk: string;
  readonly fingerprint: string;
  readonly ids: Set<string>;
  readonly charges: Set<string>;
  ledgerRows: number;
  firstFinal: { readonly bytes: string; readonly by: string } | undefined;
  /** When each token's completion was committed (a store-call count), and when the first final one was. */
  readonly commits: Map<string, number>;
  finalCommit: number | undefined;
}

/** What a fenced write was asked to do. */
export interface WriteInfo {
  readonly token?: string | undefined;
  readonly now?: number | undefined;
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
    if (after && after.id !== before?.id) {
      const current = this.#current.get(pk);
      // Only a claim (or a planted defect's unconditional put in its place) may start a life over an expired record.
      const creates = op === 'claim' || op === 'put';
      const expired = before !== null && creates && info.now !== undefined && before.expiresAt <= info.now;
      if (!current || before === null || expired) {
        this.counts.lives++;
        if (expired) this.counts.livesAfterExpiry++;
        const life: Life = {
          n: ++this.#lives,
          pk,
          fingerprint: after.fingerprint,
          ids: new Set([after.id]),
          charges: new Set(),
          ledgerRows: 0,
          firstFinal: undefined,
          commits: new Map(),
          finalCommit: undefined,
        };
        this.#current.set(pk, life);
        this.#byId.set(after.id, life);
        this.#note(`    life L${life.n} of ${pk} begins: id=${after.id}`);
      } else {
        current.ids.add(after.id);
        this.#byId.set(after.id, current);
        this.#note(`    ! id of ${pk} replaced within life L${current.n}: ${before.id} → ${after.id}`);
      }
    }
    if (!after) this.#current.set(pk, undefined);

    if (op !== 'complete' && op !== 'renew' && op !== 'release') return;
    const held = before !== null && before.status === 'in_progress' && before.token === info.token;
    const ok = !threw && (result as WriteResult | undefined)?.ok === true;
    const life = after && this.#byId.get(after.id);
    if (op === 'complete' && held && ok && life && info.token !== undefined) {
      const at = ++this.#ops;
      life.commits.set(info.token, at);
      if (after.response && isFinal(after.response.status) && life.finalCommit === undefined) life.finalCommit = at;
    }
    if (!held) {
      if (!sameRecord(before, after)) {
        this.fail('stale-write', `${op} with stale token ${info.token} changed ${pk}: ${describe(before)} → ${describe(after)}`);
      } else if (ok) {
        this.fail('stale-write', `${op} with stale token ${info.token} on ${pk} reported ok (record: ${describe(before)})`);
      }
    } else if (!threw && !ok) {
      this.fail('fenced-write-refused', `${op} with the current token ${info.token} on in_progress ${pk} was refused`);
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
      this.fail('double-charge', `${life.pk} charged ${life.charges.size} times in life L${life.n}: ${[...life.charges].join(', ')}`);
    }
  }

  onLedgerRow(row: LedgerRow): void {
    const life = this.#byId.get(row.recordId);
    if (!life) return this.fail('double-charge', `ledger row ${row.chargeId} for id ${row.recordId}, which no record ever held`);
    life.ledgerRows++;
    this.#note(`    ledger row for ${row.pk} (${row.chargeId}, life L${life.n})`);
    if (life.ledgerRows > 1) this.fail('double-charge', `${life.pk} has ${life.ledgerRows} ledger rows in life L${life.n}`);
  }

  /**
   * The engine gave this answer. Final answers of one life must all be the same bytes. A retryable one (a 5xx
   * from the work) is not remembered, by design: it may reach its client after another attempt succeeded, but
   * it must have been committed before that success was.
   */
  onAnswer(by: string, result: RunResult): void {
    if (!result.record) return; // Released: the key was freed, nothing was remembered.
    const life = this.#byId.get(result.record.id);
    if (!life) return this.fail('answer-changed', `${by}: an answer for id ${result.record.id}, which no record ever held`);
    const bytes = responseBytes(result.response);
    if (!isFinal(result.response.status)) {
      const committed = life.commits.get(result.record.token);
      if (!result.replayed && life.finalCommit !== undefined && (committed === undefined || committed > life.finalCommit)) {
        this.fail('answer-changed', `${by} got ${preview(result.response)} for ${life.pk} (life L${life.n}), decided after its final outcome`);
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

/** A response the engine records for replay: 2xx, or a deterministic refusal. */
function isFinal(status: number): boolean {
  return classifyStatus(status) !== 'failed-retryable';
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
