// Express 5 on PostgreSQL (ES modules). DATABASE_URL and PG_SCHEMA say where; `node server.js`.
// #region app
import express from 'express';
import pg from 'pg';
import { idempotency, idempotencyContext } from 'idem/express';
import { postgresStore } from 'idem/stores/postgres';

const schema = process.env.PG_SCHEMA ?? 'payments'; // a plain identifier
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
});
await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
await pool.query(`CREATE TABLE IF NOT EXISTS ${schema}.charges (
  id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL, currency text NOT NULL)`);

const store = postgresStore({ pool, schema }); // records in <schema>.idempotency_records
await store.migrate(); // creates the table once; safe from several processes at once

const app = express();
app.use(authenticate); // sets req.account (below)
const guard = idempotency({ store, scope: (req) => req.account, required: true });
app.post(
  '/v1/charges',
  guard, // before express.json(), or after it: both work
  express.json(),
  guard.route(async (req, res) => {
    const { id, declare } = idempotencyContext(res); // id: stable across retries and takeovers
    const charge = { id: `ch_${id}`, amount: req.body.amount, currency: req.body.currency };
    // The ledger row commits in the same transaction as the record's completion: both or neither.
    declare({
      resultId: charge.id,
      effects: (tx) =>
        tx.query(`INSERT INTO ${schema}.charges (id, account, amount, currency) VALUES ($1, $2, $3, $4)`, [
          charge.id,
          req.account,
          charge.amount,
          charge.currency,
        ]),
    });
    res.status(201).location(`/v1/charges/${charge.id}`).json(charge);
  }),
);
// #endregion app

const server = app.listen(Number(process.env.PORT ?? 3000), () =>
  console.log(`listening on http://localhost:${server.address().port}`),
);

/** Your authentication: here the bearer token is the account. */
function authenticate(req, res, next) {
  const token = /^Bearer (\w+)$/.exec(req.get('authorization') ?? '')?.[1];
  if (token === undefined) return res.status(401).json({ error: 'unauthorized' });
  req.account = token;
  next();
}
