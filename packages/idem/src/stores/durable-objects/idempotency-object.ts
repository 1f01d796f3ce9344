/**
 * The Durable Object that holds the records of one scope (or one shard of it) in its own SQLite database, and
 * deletes them with an alarm once they expire. The Worker-side store (durable-objects-store.ts) calls it by
 * `fetch`; export the class from your Worker's main module and bind a namespace to it.
 */
import { claimedRecord, isClaimable, isTakeover } from '../contract.js';
import { decodeHeaders, encodeHeaders } from '../shared/headers.js';
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  ListRequest,
  ReleaseRequest,
  RenewRequest,
} from '../contract.js';
import type { DurableObjectStateLike } from './durable-objects-options.js';
import { SCHEMA, SQL } from './schema.js';
import { OPERATIONS, readOutcome, sendRecord, type Operation, type WireOutcome } from './wire.js';

/** Rows an alarm deletes at most before it hands the rest to the next alarm, at once. */
export const ALARM_BATCH = 1_000;

const answer = (value: unknown, status = 200): Response =>
  new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json' } });

/** A row as `SQL.get` and `SQL.list` read it: the record's fields, but for the ones stored otherwise. */
type Row = Omit<IdempotencyRecord, 'retryable' | 'response'> & {
  readonly retryable: number;
  readonly response_status: number | null;
  readonly response_headers: string | null;
  readonly response_body: ArrayBuffer | null;
};

function toRecord({ retryable, response_status, response_headers, response_body, ...fields }: Row): IdempotencyRecord {
  const response =
    response_status === null
      ? null
      : {
          status: response_status,
          headers: decodeHeaders(response_headers ?? '[]'),
          body: new Uint8Array(response_body ?? new ArrayBuffer(0)),
        };
  return { ...fields, retryable: retryable === 1, response };
}

/**
 * The object class. In `wrangler.toml`: a binding (`durable_objects.bindings`, e.g. `IDEM`) to this class, and a
 * migration with `new_sqlite_classes` (the key-value backend has no SQL). The constructor creates the table.
 *
 * @example
 * // worker.ts
 * export { IdempotencyDurableObject } from 'idem/durable-objects'
 */
export class IdempotencyDurableObject {
  readonly #storage: DurableObjectStateLike['storage'];
  /** When the alarm is set for, as this object last set or read it; null when none is set. */
  #alarmAt: number | null = null;

  constructor(ctx: DurableObjectStateLike, env?: unknown) {
    void env;
    this.#storage = ctx.storage;
    this.#storage.sql.exec(SCHEMA);
    void ctx.blockConcurrencyWhile(async () => {
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  /** `POST https://idem/<op>` with the request as JSON, answered as JSON (a 500 with `error` when it throws). */
  async fetch(request: Request): Promise<Response> {
    const op = new URL(request.url).pathname.slice(1);
    if (request.method !== 'POST' || !OPERATIONS.has(op)) return answer({ error: `no operation ${op}` }, 404);
    try {
      const body: unknown = await request.json();
      const value = this.#run(op as Operation, body);
      if (op === 'claim' && (value as ClaimResult).kind === 'claimed') {
        await this.#expireBy((value as ClaimResult).record.expiresAt);
      }
      return answer(value);
    } catch (error) {
      return answer({ error: error instanceof Error ? error.message : String(error) }, 500);
    }
  }

  /**
   * Deletes what has expired by the wall clock, then sets the alarm for the next expiry (at once when a full
   * batch went: more may be due). A record renewed past the alarm is not due, and only moves the next alarm on.
   */
  async alarm(): Promise<void> {
    const now = Date.now();
    const deleted = this.#sweep(now, ALARM_BATCH);
    const earliest = this.#storage.sql.exec(SQL.earliest).toArray()[0]?.at as number | null | undefined;
    this.#alarmAt = deleted === ALARM_BATCH ? now : (earliest ?? null);
    if (this.#alarmAt !== null) await this.#storage.setAlarm(this.#alarmAt);
  }

  /** Synchronous from the read to the answer: no other event of this object runs in between. */
  #run(op: Operation, body: unknown): unknown {
    switch (op) {
      case 'claim': {
        const result = this.#claim(body as ClaimRequest);
        const takeover = result.kind === 'claimed' ? { takeover: result.takeover } : {};
        return { kind: result.kind, record: sendRecord(result.record), ...takeover };
      }
      case 'complete': {
        const { pk, token, outcome } = body as { pk: string; token: string; outcome: WireOutcome };
        const { status, retryable, resultId, response } = readOutcome(outcome);
        const raw = response?.body;
        const bytes = raw ? raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength) : null;
        const values = [status, retryable ? 1 : 0, resultId, response?.status ?? null];
        const stored = [response ? encodeHeaders(response.headers) : null, bytes];
        return { ok: this.#changed(SQL.complete, ...values, ...stored, pk, token) };
      }
      case 'renew': {
        const { pk, token, now, leaseMs, expiresAt } = body as RenewRequest;
        return { ok: this.#changed(SQL.renew, now + leaseMs, expiresAt, pk, token) };
      }
      case 'release': {
        const { pk, token } = body as ReleaseRequest;
        return { ok: this.#changed(SQL.release, pk, token) };
      }
      case 'get': {
        const record = this.#get((body as { pk: string }).pk);
        return record && sendRecord(record);
      }
      case 'list': {
        const { scope, limit } = body as ListRequest;
        return this.#storage.sql
          .exec(SQL.list, scope, limit)
          .toArray()
          .map((row) => sendRecord(toRecord(row as unknown as Row)));
      }
      case 'sweep': {
        const { now, take } = body as { now: number; take: number };
        return this.#sweep(now, take);
      }
    }
  }

  // The claim, in one place. The race it closes: two requests with the same new key, from two Workers anywhere,
  // both reach this one object (one object per scope, or per shard of a scope). The object runs one event at a
  // time, and the read, the decision (`isClaimable`, at the request's `now`) and the write below contain no
  // `await`: no other request's claim can run between this read and this write, so the second claim reads the
  // first one's row and is refused ('existing'). A read-then-write spread over two calls to the object would let
  // both read "no record". The output gate holds the answer until the write is durable, so no caller is told
  // 'claimed' for a row that could still be lost. An expired record (`expiresAt <= now`) counts as absent here
  // even before the alarm has deleted it.
  #claim(request: ClaimRequest): ClaimResult {
    const existing = this.#get(request.pk);
    if (existing !== null && !isClaimable(existing, request.fingerprint, request.now)) {
      return { kind: 'existing', record: existing };
    }
    const record = claimedRecord(existing, request);
    this.#storage.sql.exec(
      SQL.put,
      record.pk,
      record.scope,
      record.key,
      record.fingerprint,
      record.id,
      record.token,
      record.claimedAt,
      record.leaseExpiresAt,
      record.expiresAt,
    );
    return { kind: 'claimed', record, takeover: isTakeover(existing, request.now) };
  }

  #get(pk: string): IdempotencyRecord | null {
    const row = this.#storage.sql.exec(SQL.get, pk).toArray()[0];
    return row ? toRecord(row as unknown as Row) : null;
  }

  /** A fenced write (`RETURNING "pk"`): true when it changed the record. */
  #changed(statement: string, ...bindings: unknown[]): boolean {
    return this.#storage.sql.exec(statement, ...bindings).toArray().length === 1;
  }

  #sweep(now: number, take: number): number {
    return this.#storage.sql.exec(SQL.sweep, now, take).toArray().length;
  }

  /** Sets the alarm for `expiresAt` unless one is already set for then or earlier. */
  async #expireBy(expiresAt: number): Promise<void> {
    if (this.#alarmAt !== null && this.#alarmAt <= expiresAt) return;
    this.#alarmAt = expiresAt;
    await this.#storage.setAlarm(expiresAt);
  }
}
