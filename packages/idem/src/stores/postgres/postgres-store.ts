/** The PostgreSQL store: one class, every statement sent through `#query` (counted, reported, prepared). */
import { createHash } from 'node:crypto';
import { configError } from '../../core/errors.js';
import type * as C from '../contract.js';
import { bindMethods, RoundTripMeter } from '../shared/round-trips.js';
import { checkPoolOptions, sweepInBatches, transaction, type Transactions } from '../shared/sql.js';
import { claim, heldUntilWaitedOn, sqlState } from './claim.js';
import { outcomeValues, toRecord, type Row } from './codec.js';
import { runLocal } from './local.js';
import type {
  PostgresPool,
  PostgresPoolClient,
  PostgresQueryable,
  PostgresQueryResult,
  PostgresRoundTripRequest,
  PostgresStore,
  PostgresStoreOptions,
} from './postgres-options.js';
import { checkIdentifier, DEFAULT_SCHEMA, DEFAULT_TABLE, migrate, quote } from './schema.js';
import { statements, type Query, type Statements } from './statements.js';

/** pg's config form of `query()`, used for the store's own statements when `preparedStatements` is on. */
interface NamedQueryable {
  query(config: { name: string; text: string; values: unknown[] }): Promise<PostgresQueryResult>;
}

const DEFAULT_SWEEP_BATCH = 500;

export class PostgresStoreImpl<Tx extends PostgresQueryable> implements PostgresStore<Tx> {
  readonly name = 'postgres';
  /** The work may await: it runs on the transaction's own connection, which nothing else uses meanwhile. */
  readonly localWork = 'async';
  readonly #pool: PostgresPool<Tx & PostgresPoolClient>;
  readonly #schema: string;
  readonly #table: string;
  readonly #endPoolOnClose: boolean;
  readonly #sql: Statements;
  /** Statement names by text, for the statements sent prepared; empty when `preparedStatements` is false. */
  readonly #names = new Map<string, string>();
  readonly #meter: RoundTripMeter;
  readonly #claimBarrier: ((request: C.ClaimRequest) => Promise<void>) | undefined;
  /** `#query`, bound once, for the parts in other files (claim, migrate, runLocal). */
  readonly #send: Query = (op, on, text, values) => this.#query(op, on, text, values);

  constructor({
    pool,
    schema = DEFAULT_SCHEMA,
    table = DEFAULT_TABLE,
    endPoolOnClose = false,
    preparedStatements = true,
    onRoundTrip,
    claimBarrier,
  }: PostgresStoreOptions<Tx & PostgresPoolClient>) {
    if (typeof pool?.query !== 'function' || typeof pool.connect !== 'function') {
      throw configError('pool', 'a pg.Pool (an object with query() and connect())');
    }
    checkIdentifier('schema', schema);
    checkIdentifier('table', table);
    checkPoolOptions(pool, endPoolOnClose, preparedStatements);
    this.#meter = new RoundTripMeter('postgres', onRoundTrip);
    if (claimBarrier !== undefined && typeof claimBarrier !== 'function') {
      throw configError('claimBarrier', 'a function', claimBarrier);
    }
    this.#pool = pool;
    this.#schema = schema;
    this.#table = table;
    this.#endPoolOnClose = endPoolOnClose;
    this.#sql = statements(`${quote(schema)}.${quote(table)}`);
    if (preparedStatements) {
      for (const op of ['claim', 'complete', 'completeLocal', 'renew', 'release', 'get'] as const) {
        // The hash tells apart the same op on two tables sharing a pool: pg refuses one name for two texts.
        const text = this.#sql[op];
        this.#names.set(text, `idem_${op}_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`);
      }
    }
    this.#claimBarrier = claimBarrier;
    bindMethods(this);
  }

  get roundTrips(): number {
    return this.#meter.count;
  }

  get pool(): PostgresPool<Tx & PostgresPoolClient> {
    return this.#pool;
  }

  get schema(): string {
    return this.#schema;
  }

  get table(): string {
    return this.#table;
  }

  /** The claim statement and the race it closes: claim.ts. */
  async claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    if (!this.#claimBarrier) return claim(this.#send, this.#sql.claim, request, this.#pool);
    await this.#claimBarrier(request);
    let result: C.ClaimResult | undefined;
    await this.#transaction('claim', async (client) => {
      result = await claim(this.#send, this.#sql.claim, request, client, () => heldUntilWaitedOn(this.#send, client));
      return true;
    });
    return result as C.ClaimResult;
  }

  async complete({ pk, token, outcome, effects }: C.CompleteRequest<Tx>): Promise<C.WriteResult> {
    const values = [pk, token, ...outcomeValues(outcome)];
    if (!effects) return { ok: (await this.#query('complete', this.#pool, this.#sql.complete, values)).rowCount === 1 };
    // The work's writes first, then the fenced update: if the token no longer matches, both roll back. The row
    // lock is only held from the UPDATE to the COMMIT, so concurrent claims of this key are not kept waiting
    // while the effects run.
    const ok = await this.#transaction('complete', async (client) => {
      await effects(client);
      return (await this.#query('complete', client, this.#sql.complete, values)).rowCount === 1;
    });
    return { ok };
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    const values = [pk, token, now + leaseMs, expiresAt];
    return { ok: (await this.#query('renew', this.#pool, this.#sql.renew, values)).rowCount === 1 };
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    return { ok: (await this.#query('release', this.#pool, this.#sql.release, [pk, token])).rowCount === 1 };
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    const row = (await this.#query('get', this.#pool, this.#sql.get, [pk])).rows[0] as Row | undefined;
    return row ? toRecord(row) : null;
  }

  /** One transaction for the claim, the work and the completion, and the race it closes: local.ts. */
  runLocal(request: C.LocalTransactionRequest<Tx>): Promise<C.LocalTransactionResult> {
    const closed = (): boolean => this.#meter.closed;
    return runLocal({ pool: this.#pool, sql: this.#sql, query: this.#send, closed }, request);
  }

  /**
   * Deletes expired records in batches of `batchSize` (default 500), one short statement each, so no statement
   * holds many locks or a long transaction. Rows locked by a concurrent claim are skipped, never waited for;
   * a batch that comes back short ends the sweep (the next sweep picks up what was skipped).
   */
  sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: C.SweepRequest): Promise<number> {
    return sweepInBatches(
      batchSize,
      limit,
      async (take) => (await this.#query('sweep', this.#pool, this.#sql.sweep, [now, take])).rowCount ?? 0,
    );
  }

  async list({ scope, limit }: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    const { rows } = await this.#query('list', this.#pool, this.#sql.list, [scope, limit]);
    return rows.map((row) => toRecord(row as Row));
  }

  /** Ends the pool only when `endPoolOnClose` was set; otherwise the pool is the caller's to end. */
  async close(): Promise<void> {
    if (this.#meter.closed) return;
    this.#meter.close();
    if (this.#endPoolOnClose) await this.#pool.end?.();
  }

  async migrate(): Promise<void> {
    await migrate(this.#send, (op, body) => this.#transaction(op, body), this.#schema, this.#table);
  }

  /** Every statement the store sends goes through here, so `roundTrips` counts each one and `onRoundTrip` sees it. */
  #query(op: C.RoundTrip['op'], on: PostgresQueryable, text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    if (this.#meter.closed) return Promise.reject(new Error('postgres store is closed'));
    this.#meter.add();
    const name = this.#names.get(text);
    const sent = (
      name !== undefined
        ? (on as unknown as NamedQueryable).query({ name, text, values: values ?? [] })
        : values === undefined
          ? on.query(text)
          : on.query(text, values)
    ).catch(this.#missingTable);
    if (!this.#meter.onRoundTrip) return sent;
    const request: PostgresRoundTripRequest = values === undefined ? { text } : { text, values };
    return this.#meter.observe(op, request, sent, (result) => ({ rows: result.rows, rowCount: result.rowCount }));
  }

  /**
   * PostgreSQL says only `relation "…" does not exist` (undefined_table, 42P01) when Idem's table is missing: this
   * says which table, and the command that creates it. The code stays 42P01.
   */
  readonly #missingTable = (error: unknown): never => {
    if (sqlState(error) !== '42P01' || !String((error as Error).message).includes(this.#table)) throw error;
    const query = `schema=${this.#schema}${this.#table === DEFAULT_TABLE ? '' : `&table=${this.#table}`}`;
    const message =
      `postgres store: Idem's table ${this.#schema}.${this.#table} does not exist. Create it: ` +
      `idem migrate --store 'postgres://…?${query}', or await store.migrate().`;
    throw Object.assign(new Error(message, { cause: error }), { code: '42P01' });
  };

  /** BEGIN, `body` on one connection of the pool, then COMMIT or ROLLBACK (shared/sql.ts). */
  #transaction(op: C.RoundTrip['op'], body: (client: Tx & PostgresPoolClient) => Promise<boolean>): Promise<boolean> {
    return transaction(this.#meter, this.#transactions, op, body);
  }

  /** A failed BEGIN/COMMIT/ROLLBACK leaves the connection's state unknown: the pool discards it. */
  readonly #transactions: Transactions<Tx & PostgresPoolClient> = {
    begin: 'BEGIN',
    connect: () => this.#pool.connect(),
    send: (op, client, command) => this.#query(op, client, command),
    done: (client, broken) => client.release(broken),
  };
}
