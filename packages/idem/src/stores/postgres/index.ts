/**
 * @module `idem/stores/postgres` — records in a PostgreSQL table, through your own `pg.Pool` (or anything of
 * the same shape). The work's own writes can commit in the same transaction as the record's completion.
 */
import { createHash } from 'node:crypto';
import { configError } from '../../core/errors.js';
import type { LocalTransactionRequest, LocalTransactionResult } from '../contract.js';
import type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  ListRequest,
  ReleaseRequest,
  RenewRequest,
  RoundTrip,
  SweepRequest,
  WriteResult,
} from '../contract.js';
import { claim, heldUntilWaitedOn, sqlState } from './claim.js';
import { outcomeValues, toRecord, type Row } from './codec.js';
import { asError, runLocal } from './local.js';
import type {
  PostgresPool,
  PostgresPoolClient,
  PostgresQueryable,
  PostgresQueryResult,
  PostgresRoundTripRequest,
  PostgresStore,
  PostgresStoreOptions,
} from './options.js';
import { checkIdentifier, DEFAULT_SCHEMA, DEFAULT_TABLE, migrate, postgresSchemaSql, quote } from './schema.js';
import { statements, type Query, type Statements } from './statements.js';

export { postgresSchemaSql };
export type * from './options.js';

/** pg's config form of `query()`, used for the store's own statements when `preparedStatements` is on. */
interface NamedQueryable {
  query(config: { name: string; text: string; values: unknown[] }): Promise<PostgresQueryResult>;
}

const DEFAULT_SWEEP_BATCH = 500;

/**
 * Creates a PostgreSQL store over your pool. Run `migrate()` once (or `schema.sql`) before first use.
 *
 * Round trips (each statement sent is one): claim 1, or 2 when it waited on a concurrent claim's insert or
 * update (see claim.ts); complete 1; complete with `effects` 3 (`BEGIN`, the conditional
 * `UPDATE`, `COMMIT`/`ROLLBACK`) plus the statements the effects send themselves, which are the work's and not
 * counted; renew, release, get, list 1; sweep 1 per batch. `runLocal` (database-local work) 4 for a new key
 * (`BEGIN`, the claim, the fenced `UPDATE`, `COMMIT`: one commit, the work's own statements between) and 3 for
 * a refusal (`BEGIN`, the claim, `ROLLBACK`), plus 3 more each time it met a concurrent transaction on the key;
 * on a pipelining client (pg's `pipeline: true`) they travel in pairs, so a new key waits on 2 network round
 * trips of the store's and a refusal on 2. Checking a connection out of the pool is not counted.
 * `onRoundTrip` sees each counted statement as a {@link PostgresRoundTripRequest} with its `{ rows, rowCount }`.
 *
 * The pool stays yours: `close()` only ends it with `endPoolOnClose: true`.
 *
 * @example
 * import pg from 'pg'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * const store = postgresStore<pg.PoolClient>({ pool })
 * await store.migrate()
 * const engine = createEngine({ store })
 * await engine.run({ scope, key, fingerprint }, async ({ id }) => ({
 *   response: jsonResponse(201, { id }),
 *   // Commits with the record's completion, or not at all.
 *   effects: (tx) => tx.query('INSERT INTO ledger (record_id, amount) VALUES ($1, $2)', [id, 500]),
 * }))
 */
export function postgresStore<Tx extends PostgresQueryable = PostgresQueryable>({
  pool,
  schema = DEFAULT_SCHEMA,
  table = DEFAULT_TABLE,
  endPoolOnClose = false,
  preparedStatements = true,
  onRoundTrip,
  claimBarrier,
}: PostgresStoreOptions<Tx & PostgresPoolClient>): PostgresStore<Tx> {
  if (typeof pool?.query !== 'function' || typeof pool.connect !== 'function') {
    throw configError('pool', 'a pg.Pool (an object with query() and connect())');
  }
  checkIdentifier('schema', schema);
  checkIdentifier('table', table);
  if (typeof endPoolOnClose !== 'boolean') throw configError('endPoolOnClose', 'a boolean', endPoolOnClose);
  if (endPoolOnClose && typeof pool.end !== 'function')
    throw configError('pool', 'a pool with end() when endPoolOnClose is true');
  if (typeof preparedStatements !== 'boolean') throw configError('preparedStatements', 'a boolean', preparedStatements);
  if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
    throw configError('onRoundTrip', 'a function', onRoundTrip);
  }
  if (claimBarrier !== undefined && typeof claimBarrier !== 'function') {
    throw configError('claimBarrier', 'a function', claimBarrier);
  }
  return new Store<Tx>(pool, schema, table, endPoolOnClose, preparedStatements, onRoundTrip, claimBarrier);
}

class Store<Tx extends PostgresQueryable> implements PostgresStore<Tx> {
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
  readonly #onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  readonly #claimBarrier: ((request: ClaimRequest) => Promise<void>) | undefined;
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
  /** `#query`, bound once, for the parts in other files (claim, migrate, runLocal). */
  readonly #send: Query = (op, on, text, values) => this.#query(op, on, text, values);
  #roundTrips = 0;
  #closed = false;

  constructor(
    pool: PostgresPool<Tx & PostgresPoolClient>,
    schema: string,
    table: string,
    endPoolOnClose: boolean,
    preparedStatements: boolean,
    onRoundTrip: ((trip: RoundTrip) => void) | undefined,
    claimBarrier: ((request: ClaimRequest) => Promise<void>) | undefined,
  ) {
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
    this.#onRoundTrip = onRoundTrip;
    this.#claimBarrier = claimBarrier;
  }

  get roundTrips(): number {
    return this.#roundTrips;
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

  /** Every statement the store sends goes through here, so `roundTrips` counts each one and `onRoundTrip` sees it. */
  #query(op: RoundTrip['op'], on: PostgresQueryable, text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    if (this.#closed) return Promise.reject(new Error('postgres store is closed'));
    this.#roundTrips++;
    const name = this.#names.get(text);
    const sent = (
      name !== undefined
        ? (on as unknown as NamedQueryable).query({ name, text, values: values ?? [] })
        : values === undefined
          ? on.query(text)
          : on.query(text, values)
    ).catch(this.#missingTable);
    if (!this.#onRoundTrip) return sent;
    const request: PostgresRoundTripRequest = values === undefined ? { text } : { text, values };
    return sent.then(
      (result) => {
        this.#report({ op, request, response: { rows: result.rows, rowCount: result.rowCount } });
        return result;
      },
      (error: unknown) => {
        this.#report({ op, request, error });
        throw error;
      },
    );
  }

  #report(trip: RoundTrip): void {
    try {
      this.#onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the statement already ran, and its result stands.
    }
  }

  async migrate(): Promise<void> {
    await migrate(this.#send, (op, body) => this.#transaction(op, body), this.#schema, this.#table);
  }

  /** The claim statement and the race it closes: claim.ts. */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    if (!this.#claimBarrier) return claim(this.#send, this.#sql.claim, request, this.#pool);
    await this.#claimBarrier(request);
    let result: ClaimResult | undefined;
    await this.#transaction('claim', async (client) => {
      result = await claim(this.#send, this.#sql.claim, request, client, () => heldUntilWaitedOn(this.#send, client));
      return true;
    });
    return result as ClaimResult;
  }

  async complete({ pk, token, outcome, effects }: CompleteRequest<Tx>): Promise<WriteResult> {
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

  /** One transaction for the claim, the work and the completion, and the race it closes: local.ts. */
  runLocal(request: LocalTransactionRequest<Tx>): Promise<LocalTransactionResult> {
    const closed = (): boolean => this.#closed;
    return runLocal({ pool: this.#pool, sql: this.#sql, query: this.#send, closed }, request);
  }

  async renew({ pk, token, now, leaseMs, expiresAt }: RenewRequest): Promise<WriteResult> {
    const values = [pk, token, now + leaseMs, expiresAt];
    return { ok: (await this.#query('renew', this.#pool, this.#sql.renew, values)).rowCount === 1 };
  }

  async release({ pk, token }: ReleaseRequest): Promise<WriteResult> {
    return { ok: (await this.#query('release', this.#pool, this.#sql.release, [pk, token])).rowCount === 1 };
  }

  async get(pk: string): Promise<IdempotencyRecord | null> {
    const row = (await this.#query('get', this.#pool, this.#sql.get, [pk])).rows[0] as Row | undefined;
    return row ? toRecord(row) : null;
  }

  /**
   * Deletes expired records in batches of `batchSize` (default 500), one short statement each, so no statement
   * holds many locks or a long transaction. Rows locked by a concurrent claim are skipped, never waited for;
   * a batch that comes back short ends the sweep (the next sweep picks up what was skipped).
   */
  async sweep({ now, batchSize = DEFAULT_SWEEP_BATCH, limit = Infinity }: SweepRequest): Promise<number> {
    if (!Number.isInteger(batchSize) || batchSize <= 0) throw configError('batchSize', 'a positive integer', batchSize);
    if (limit !== Infinity && (!Number.isInteger(limit) || limit < 0)) {
      throw configError('limit', 'a non-negative integer', limit);
    }
    let deleted = 0;
    while (deleted < limit) {
      const batch = Math.min(batchSize, limit - deleted);
      const count = (await this.#query('sweep', this.#pool, this.#sql.sweep, [now, batch])).rowCount ?? 0;
      deleted += count;
      if (count < batch) break;
    }
    return deleted;
  }

  async list({ scope, limit }: ListRequest): Promise<IdempotencyRecord[]> {
    const { rows } = await this.#query('list', this.#pool, this.#sql.list, [scope, limit]);
    return rows.map((row) => toRecord(row as Row));
  }

  /** Ends the pool only when `endPoolOnClose` was set; otherwise the pool is the caller's to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#endPoolOnClose) await this.#pool.end?.();
  }

  /**
   * BEGIN, `body`, then COMMIT when it returns true, ROLLBACK when it returns false or throws (rethrown).
   */
  async #transaction(
    op: RoundTrip['op'],
    body: (client: Tx & PostgresPoolClient) => Promise<boolean>,
  ): Promise<boolean> {
    if (this.#closed) throw new Error('postgres store is closed');
    const client = await this.#pool.connect();
    // Set when BEGIN/COMMIT/ROLLBACK itself fails: the connection's state is unknown, so the pool discards it.
    // An error from the body (the work's effects, the UPDATE) leaves a healthy connection once rolled back.
    let broken: Error | undefined;
    const control = async (command: 'BEGIN' | 'COMMIT' | 'ROLLBACK'): Promise<void> => {
      try {
        await this.#query(op, client, command);
      } catch (error) {
        broken = asError(error);
        throw error;
      }
    };
    try {
      await control('BEGIN');
      let commit: boolean;
      try {
        commit = await body(client);
      } catch (error) {
        await control('ROLLBACK').catch(() => {}); // The body's error is the one to report.
        throw error;
      }
      await control(commit ? 'COMMIT' : 'ROLLBACK');
      return commit;
    } finally {
      client.release(broken);
    }
  }
}
