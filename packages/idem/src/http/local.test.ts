/**
 * A `local` route: the claim, the handler's writes through `context.tx` and the record in ONE PostgreSQL
 * transaction, on the Web layer and on Express over real HTTP. Executions and ledger rows are counted.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import express from 'express';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { idempotency as expressIdempotency, idempotencyContext } from 'idem/express';
import { memoryStore } from 'idem/stores/memory';
import { postgresStore } from 'idem/stores/postgres';
import { sqliteStore } from 'idem/stores/sqlite';
import { POSTGRES_URL, serviceAvailable } from '../../../../test/services.js';
import { isIdempotencyError } from '../core/errors.js';
import { waitFor } from '../testing/fixtures.js';
import { postgresLedger } from '../testing/postgres-ledger.test-kit.js';
import { idempotency, type HandlerContext } from './middleware.js';

const pgAvailable = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const pools: pg.Pool[] = [];
const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops) await drop();
  for (const pool of pools) await pool.end();
});

async function backend() {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 16 });
  pools.push(pool);
  const { schema, store, insert, ledger } = await postgresLedger(pool, 'idem_local_route', drops);
  const records = async () =>
    (
      await pool.query<{ status: string; response_status: number | null }>(
        `SELECT status, response_status FROM "${schema}".idempotency_records`,
      )
    ).rows;
  /** Connections waiting on a row lock in this database: duplicates parked behind the winner's transaction. */
  const lockWaiters = async () =>
    Number(
      (
        await pool.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        )
      ).rows[0]?.n,
    );
  return { pool, store, insert, ledger, records, lockWaiters };
}

/** A promise and its resolver: a signal one side gives and the other awaits. */
function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const post = (key: string, body: unknown = { amount: 500 }) =>
  new Request('http://pay.test/v1/transfers', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

/** The options every local-mode handler here shares. */
const LOCAL = { scope: 'single-tenant', local: true } as const;
/**
 * Sends a key, then `n` duplicates once its work has started; lets the work go on only when every duplicate is
 * parked on the winner's uncommitted row; checks all `n + 1` answered 201 with one body, and answers them.
 */
async function parkedOnTheRow(
  db: { lockWaiters: () => Promise<number> },
  send: (key: string) => Promise<Response>,
  started: Promise<void>,
  release: () => void,
  n: number,
): Promise<Response[]> {
  const key = randomUUID();
  const first = send(key);
  await started;
  const duplicates = Array.from({ length: n }, () => send(key));
  await waitFor(`${n} duplicates waiting on the row lock`, async () => (await db.lockWaiters()) === n, { everyMs: 5 });
  release();
  const answers = await Promise.all([first, ...duplicates]);
  const bodies = await Promise.all(answers.map((r) => r.text()));
  expect(answers.map((r) => r.status)).toEqual(Array(n + 1).fill(201));
  expect(new Set(bodies).size).toBe(1);
  return answers;
}

describe('the local option is checked when the route is built', () => {
  it('refuses a store whose transactions cannot wait for a handler, in one line', () => {
    const database = new Database(':memory:');
    for (const store of [memoryStore(), sqliteStore({ database })]) {
      let error: unknown;
      try {
        idempotency({ store, scope: 'single-tenant', local: true });
      } catch (caught) {
        error = caught;
      }
      expect(isIdempotencyError(error, 'CONFIG_INVALID')).toBe(true);
      expect((error as Error).message).toMatch(
        /^Expected `local` to be false with this store: .*PostgreSQL.*, got true\.$/,
      );
      expect((error as Error).message).not.toContain('\n');
    }
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', local: 'yes' as never })).toThrow(
      'Expected `local` to be a boolean, got "yes".',
    );
    database.close();
  });
});

describe.skipIf(!pgAvailable)('a local route on PostgreSQL (Web layer)', () => {
  it('runs once, commits the ledger row with the record, and replays byte for byte', async () => {
    const db = await backend();
    let runs = 0;
    let seen: HandlerContext<pg.PoolClient> | undefined;
    const handle = idempotency({ ...LOCAL, store: db.store })(async (request, context) => {
      runs++;
      seen = context;
      const { amount } = (await request.json()) as { amount: number };
      await db.insert(context.tx as pg.PoolClient, context.id, amount);
      return Response.json({ id: context.id, amount }, { status: 201, headers: { location: `/t/${context.id}` } });
    });
    const key = randomUUID();
    const first = await handle(post(key));
    const firstBody = await first.text();
    const again = await handle(post(key));
    expect([first.status, again.status, await again.text()]).toEqual([201, 201, firstBody]);
    expect(again.headers.get('location')).toBe(first.headers.get('location'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(runs).toBe(1);
    expect(seen?.protected).toBe(true);
    expect(seen?.signal.aborted).toBe(false);
    expect(await db.ledger()).toEqual([{ ref: seen?.id, amount: 500 }]);
    expect(await db.records()).toEqual([{ status: 'succeeded', response_status: 201 }]);
  });

  it('ten concurrent duplicates wait on the row, then replay: one execution, one ledger row', async () => {
    const db = await backend();
    let runs = 0;
    const started = signal();
    const release = signal();
    const handle = idempotency({ ...LOCAL, store: db.store })(async (_request, context) => {
      runs++;
      started.resolve();
      await release.promise;
      await db.insert(context.tx as pg.PoolClient, context.id, 500);
      return Response.json({ id: context.id }, { status: 201 });
    });
    const answers = await parkedOnTheRow(db, (key) => handle(post(key)), started.promise, release.resolve, 10);
    expect(answers.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(10);
    expect(runs).toBe(1);
    expect(await db.ledger()).toHaveLength(1);
  });

  it('a retryable answer and a throw roll back the claim and the writes: the retry runs and commits once', async () => {
    const db = await backend();
    const answers = [503, 'throw', 201] as const;
    let runs = 0;
    const errors: unknown[] = [];
    const handle = idempotency({ ...LOCAL, store: db.store, onError: (error) => errors.push(error) })(async (
      _request,
      context,
    ) => {
      const answer = answers[runs++] as (typeof answers)[number];
      await db.insert(context.tx as pg.PoolClient, context.id, 500);
      if (answer === 'throw') throw new Error('boom after the write');
      return Response.json({ id: context.id }, { status: answer });
    });
    const key = randomUUID();
    expect((await handle(post(key))).status).toBe(503);
    expect(await db.ledger()).toEqual([]);
    expect(await db.records()).toEqual([]);
    expect((await handle(post(key))).status).toBe(500);
    expect(errors.map((e) => (e as Error).message)).toEqual(['boom after the write']);
    expect(await db.ledger()).toEqual([]);
    expect((await handle(post(key))).status).toBe(201);
    expect((await handle(post(key))).status).toBe(201);
    expect(runs).toBe(3);
    expect(await db.ledger()).toHaveLength(1);
  });

  it('declared effects run in the same transaction; another payload under the key is 400 and runs nothing', async () => {
    const db = await backend();
    let runs = 0;
    const handle = idempotency({ ...LOCAL, store: db.store })(async (_request, context) => {
      runs++;
      context.declare({ resultId: `tr_${runs}`, effects: (tx) => db.insert(tx, context.id, 700) });
      return Response.json({ ok: true }, { status: 201 });
    });
    const key = randomUUID();
    expect((await handle(post(key))).status).toBe(201);
    const mismatch = await handle(post(key, { amount: 1 }));
    expect(mismatch.status).toBe(400);
    expect(runs).toBe(1);
    expect((await db.ledger()).map((row) => row.amount)).toEqual([700]);
    const stored = await db.store.get((await db.store.list({ scope: 'single-tenant', limit: 1 }))[0]?.pk as string);
    expect(stored?.resultId).toBe('tr_1');
  });

  it('tx refuses statements once the transaction has ended (a late write cannot land in another transaction)', async () => {
    const db = await backend();
    let kept: pg.PoolClient | undefined;
    const handle = idempotency({ ...LOCAL, store: db.store })(async (_request, context) => {
      const tx = context.tx as pg.PoolClient;
      kept = tx;
      await db.insert(tx, `${context.id}-debit`, 500);
      return Response.json({ ok: true }, { status: 201 });
    });
    expect((await handle(post(randomUUID()))).status).toBe(201);
    expect(() => kept?.query('SELECT 1')).toThrow(
      'idem: this transaction has ended; local work may use `tx` only until it answers',
    );
    expect(() => kept?.release()).toThrow('idem: the store releases this connection; local work must not');
    expect(await db.ledger()).toHaveLength(1);
  });

  it('a handler that never answers does not keep a connection the server ended: the next key is served', async () => {
    const db = await backend();
    // One connection, whose idle transactions the server ends after 200 ms.
    const pool = new pg.Pool({
      connectionString: POSTGRES_URL,
      max: 1,
      connectionTimeoutMillis: 10_000,
      options: '-c idle_in_transaction_session_timeout=200',
    });
    pools.push(pool);
    const store = postgresStore<pg.PoolClient>({ pool, schema: db.store.schema });
    const started = signal();
    let runs = 0;
    const handle = idempotency({ ...LOCAL, store })(async (_request, context) => {
      runs++;
      if (runs === 1) {
        started.resolve();
        return new Promise<Response>(() => {}); // never answers
      }
      await db.insert(context.tx as pg.PoolClient, context.id, 500);
      return Response.json({ ok: true }, { status: 201 });
    });
    void handle(post(randomUUID()));
    await started.promise;
    const next = await handle(post(randomUUID()));
    expect([next.status, runs, (await db.ledger()).length]).toEqual([201, 2, 1]);
  });

  it('a handler that catches its own failed statement and answers 422 gets a 500, not a store outage', async () => {
    const db = await backend();
    const errors: unknown[] = [];
    const handle = idempotency({ ...LOCAL, store: db.store, onError: (error) => errors.push(error) })(async (
      _request,
      context,
    ) => {
      const tx = context.tx as pg.PoolClient;
      await db.insert(tx, context.id, 500);
      try {
        await db.insert(tx, context.id, 500); // a duplicate ref: the transaction is aborted now
      } catch {
        return Response.json({ declined: true }, { status: 422 });
      }
      return Response.json({ ok: true }, { status: 201 });
    });
    const answer = await handle(post(randomUUID()));
    expect(answer.status).toBe(500);
    expect(((await answer.json()) as { type: string }).type).toBe('urn:idem:problem:internal-error');
    expect((errors[0] as Error).message).toMatch(/aborted the transaction \(SQLSTATE 25P02\)/);
    expect([await db.ledger(), await db.records()]).toEqual([[], []]);
  });

  it('a store that is down answers 503 and runs nothing', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', max: 1 });
    pools.push(pool);
    let runs = 0;
    const handle = idempotency({ store: postgresStore({ pool }), scope: 'single-tenant', local: true })(() => {
      runs++;
      return new Response('ran', { status: 201 });
    });
    const answer = await handle(post(randomUUID()));
    expect(answer.status).toBe(503);
    expect(runs).toBe(0);
  });
});

describe.skipIf(!pgAvailable)('a local route on PostgreSQL (Express, over HTTP)', () => {
  it('runs once under concurrent duplicates; each gets the first answer; the ledger has one row', async () => {
    const db = await backend();
    let runs = 0;
    const started = signal();
    const release = signal();
    const app = express();
    app.post(
      '/v1/transfers',
      expressIdempotency({ store: db.store, scope: 'single-tenant', local: true }),
      express.json(),
      async (req, res) => {
        runs++;
        const context = idempotencyContext<pg.PoolClient>(res);
        started.resolve();
        await release.promise;
        await db.insert(context?.tx as pg.PoolClient, context?.id as string, (req.body as { amount: number }).amount);
        res.status(201).location(`/t/${context?.id}`).json({ id: context?.id });
      },
    );
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/transfers`;
    try {
      const send = (key: string) =>
        fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          body: JSON.stringify({ amount: 500 }),
        });
      const answers = await parkedOnTheRow(db, send, started.promise, release.resolve, 5);
      expect(new Set(answers.map((r) => r.headers.get('location'))).size).toBe(1);
      expect(runs).toBe(1);
      expect(await db.ledger()).toHaveLength(1);
      expect(await db.records()).toEqual([{ status: 'succeeded', response_status: 201 }]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
