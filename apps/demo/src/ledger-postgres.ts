/**
 * @module The demo's ledger in PostgreSQL: the `charges` table in the records' own database and schema, so a
 * charge commits in the same transaction as its record's completion (`insertIn` on the store's transaction).
 */
import type { PostgresPool, PostgresQueryable } from 'idem/stores/postgres';
import {
  INSERT_COLUMNS,
  chargeValues,
  toCharge,
  type Charge,
  type Ledger,
  type NewCharge,
  type Row,
} from './ledger.js';

/**
 * The charges table on a `pg` pool, in `schema` (the store's). `seq` orders charges made in the same second.
 *
 * @example
 * const ledger = new PostgresLedger(pool, 'public')
 * await ledger.migrate()
 * // in a shared-ledger work: context.declare({ effects: (tx) => ledger.insertIn(tx, charge, input) })
 */
export class PostgresLedger implements Ledger {
  readonly #pool: PostgresPool;
  readonly #table: string;
  readonly #journal: string;
  readonly #schema: string;

  /** `schema` must be a plain identifier (the store validates the same one). */
  constructor(pool: PostgresPool, schema: string) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema))
      throw new Error(`PostgresLedger: invalid schema name "${schema}"`);
    this.#pool = pool;
    this.#schema = schema;
    this.#table = `"${schema}"."charges"`;
    this.#journal = `"${schema}"."lab_requests"`;
  }

  /**
   * Creates the table if it is missing. Safe from several processes at once: a transaction-scoped advisory lock
   * serialises concurrent `CREATE TABLE IF NOT EXISTS` (which can otherwise collide on the catalog).
   */
  async migrate(): Promise<void> {
    await this.#locked(`idem:demo-ledger:${this.#schema}`, async (client) => {
      await client.query(`CREATE TABLE IF NOT EXISTS ${this.#table} (
  seq             bigserial PRIMARY KEY,
  id              text      NOT NULL UNIQUE,
  account         text      NOT NULL,
  amount          integer   NOT NULL CHECK (amount > 0),
  currency        text      NOT NULL,
  status          text      NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code    text,
  source          text      NOT NULL,
  created         bigint    NOT NULL,
  idempotency_ref text      UNIQUE
)`);
      await client.query(`CREATE INDEX IF NOT EXISTS charges_account_seq ON ${this.#table} (account, seq)`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${this.#journal} (seq bigserial PRIMARY KEY, account text NOT NULL, entry text NOT NULL)`,
      );
      await client.query(`CREATE INDEX IF NOT EXISTS lab_requests_account ON ${this.#journal} (account, seq)`);
    });
  }

  /** Runs `work` in a transaction holding the advisory lock `name` until it commits. */
  async #locked<T>(name: string, work: (client: PostgresQueryable) => Promise<T>): Promise<T> {
    const client = await this.#pool.connect();
    let failed: Error | undefined;
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [name]);
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      failed = error instanceof Error ? error : new Error(String(error));
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release(failed);
    }
  }

  /** Runs the INSERT on the store's transaction: the charge commits with the record's completion, or not at all. */
  insertIn(tx: unknown, charge: Charge, input: NewCharge): Promise<unknown> {
    return (tx as PostgresQueryable).query(
      `INSERT INTO ${this.#table} ${INSERT_COLUMNS} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      chargeValues(charge, input),
    );
  }

  async insert(charge: Charge, input: NewCharge): Promise<void> {
    await this.insertIn(this.#pool, charge, input);
  }

  /** One statement: insert unless the ref exists, else return the stored charge (a takeover finds the dead attempt's). */
  async insertOnce(charge: Charge, input: NewCharge & { readonly ref: string }): Promise<Charge> {
    for (let attempt = 1; ; attempt++) {
      const { rows } = await this.#pool.query(
        `WITH ins AS (
  INSERT INTO ${this.#table} ${INSERT_COLUMNS} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
  ON CONFLICT (idempotency_ref) DO NOTHING RETURNING *
)
SELECT * FROM ins UNION ALL SELECT * FROM ${this.#table} WHERE idempotency_ref = $9 AND NOT EXISTS (SELECT 1 FROM ins)`,
        chargeValues(charge, input),
      );
      // Zero rows: a concurrent insert of the same ref committed after this statement's snapshot. Read again.
      const row = rows[0] as Row | undefined;
      if (row) return toCharge(row);
      if (attempt === 3) throw new Error(`PostgresLedger: the charge for ${input.ref} kept changing under insertOnce`);
    }
  }

  async list(account: string, limit: number): Promise<Charge[]> {
    const { rows } = await this.#pool.query(
      `SELECT * FROM ${this.#table} WHERE account = $1 ORDER BY seq DESC LIMIT $2`,
      [account, limit],
    );
    return (rows as Row[]).map(toCharge);
  }

  async get(account: string, id: string): Promise<Charge | undefined> {
    const { rows } = await this.#pool.query(`SELECT * FROM ${this.#table} WHERE account = $1 AND id = $2`, [
      account,
      id,
    ]);
    const row = rows[0] as Row | undefined;
    return row && toCharge(row);
  }

  async byRef(account: string, ref: string): Promise<Charge | undefined> {
    const { rows } = await this.#pool.query(
      `SELECT * FROM ${this.#table} WHERE account = $1 AND idempotency_ref = $2`,
      [account, ref],
    );
    const row = rows[0] as Row | undefined;
    return row && toCharge(row);
  }

  async byRecord(account: string, id: string): Promise<Charge | undefined> {
    const { rows } = await this.#pool.query(
      `SELECT * FROM ${this.#table} WHERE account = $1 AND (idempotency_ref = $2 OR left(idempotency_ref, $3) = $4)
       ORDER BY created, id LIMIT 1`,
      [account, id, id.length + 1, `${id}/`],
    );
    const row = rows[0] as Row | undefined;
    return row && toCharge(row);
  }

  async balance(account: string): Promise<{ charged: number; count: number }> {
    const { rows } = await this.#pool.query(
      `SELECT COALESCE(SUM(amount), 0) AS charged, COUNT(*) AS count FROM ${this.#table} WHERE account = $1 AND status = 'succeeded'`,
      [account],
    );
    const row = rows[0] as { charged: string | number; count: string | number };
    return { charged: Number(row.charged), count: Number(row.count) };
  }

  async clear(account: string): Promise<number> {
    await this.#pool.query(`DELETE FROM ${this.#journal} WHERE account = $1`, [account]);
    return (await this.#pool.query(`DELETE FROM ${this.#table} WHERE account = $1`, [account])).rowCount ?? 0;
  }

  async journal(account: string, seq: number | null, entry: string, limit: number): Promise<number | null> {
    if (seq !== null) {
      await this.#pool.query(`UPDATE ${this.#journal} SET entry = $1 WHERE seq = $2 AND account = $3`, [
        entry,
        seq,
        account,
      ]);
      return seq;
    }
    // Under READ COMMITTED two inserts could each count the other out; the account's lock orders them, and the
    // INSERT, a statement after the lock, sees every row committed before it.
    const { rows } = await this.#locked(`idem:demo-lab:${account}`, (client) =>
      client.query(
        `INSERT INTO ${this.#journal} (account, entry)
         SELECT $1, $2 WHERE (SELECT count(*) FROM ${this.#journal} WHERE account = $1) < $3 RETURNING seq`,
        [account, entry, limit],
      ),
    );
    const row = rows[0] as { seq: string | number } | undefined;
    return row === undefined ? null : Number(row.seq);
  }

  async unfinished(): Promise<Array<{ seq: number; account: string; entry: string }>> {
    const { rows } = await this.#pool.query(
      `SELECT seq, account, entry FROM ${this.#journal} WHERE entry LIKE '%"state":"running"%' ORDER BY seq`,
    );
    return (rows as Array<{ seq: string | number; account: string; entry: string }>).map((r) => ({
      ...r,
      seq: Number(r.seq),
    }));
  }

  async history(account: string, limit: number): Promise<Array<{ seq: number; entry: string }>> {
    const { rows } = await this.#pool.query(
      `SELECT seq, entry FROM ${this.#journal} WHERE account = $1 ORDER BY seq LIMIT $2`,
      [account, limit],
    );
    return (rows as Array<{ seq: string | number; entry: string }>).map((r) => ({
      seq: Number(r.seq),
      entry: r.entry,
    }));
  }
}
