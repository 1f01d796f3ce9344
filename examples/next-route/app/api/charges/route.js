// app/api/charges/route.js — DATABASE_URL and PG_SCHEMA say where the records and the ledger live.
// #region route
import { NextResponse } from 'next/server';
import pg from 'pg';
import { idempotency } from 'idem/http';
import { postgresStore } from 'idem/stores/postgres';

export const runtime = 'nodejs'; // the stores use Node drivers

const schema = process.env.PG_SCHEMA ?? 'payments';
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const store = postgresStore({ pool, schema }); // one engine per server instance: keep it at module level
let migrated; // at first use, not at build time (or run `npx idem migrate` at deploy)
const ready = () =>
  (migrated ??= (async () => {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${schema}.charges (
      id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL, currency text NOT NULL)`);
    await store.migrate();
  })());

/** Your authentication: here the `session` cookie is the account. */
const accountOf = (request) => request.cookies.get('session')?.value ?? 'anonymous';

const protect = idempotency({ store, scope: (request) => accountOf(request), required: true });

const createCharge = protect(async (request, { id, declare }) => {
  // `request` is the NextRequest Next.js passed in (nextUrl, cookies, body unread): idempotency() read a clone.
  const { amount, currency } = await request.json();
  const charge = { id: `ch_${id}`, amount, currency };
  declare({
    // The ledger row commits in the same transaction as the record's completion: both or neither.
    effects: (tx) =>
      tx.query(`INSERT INTO ${schema}.charges (id, account, amount, currency) VALUES ($1, $2, $3, $4)`, [
        charge.id,
        accountOf(request),
        amount,
        currency,
      ]),
  });
  return NextResponse.json(charge, { status: 201, headers: { location: `/api/charges/${charge.id}` } });
});

export async function POST(request) {
  await ready();
  return createCharge(request);
}
// #endregion route
