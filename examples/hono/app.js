// The Hono app every runtime serves (node.js, bun.js, deno.js).
// #region app
import { Hono } from 'hono';
import { idempotency } from 'idem/hono';
import { memoryStore } from 'idem/stores/memory';

const charges = []; // your ledger; here, this process's memory
const store = memoryStore(); // one process: use a shared store (PostgreSQL, Redis, …) with several instances

const app = new Hono();
app.use('/v1/*', async (c, next) => {
  // Your authentication: here the bearer token is the account.
  const token = /^Bearer (\w+)$/.exec(c.req.header('authorization') ?? '')?.[1];
  if (token === undefined) return c.json({ error: 'unauthorized' }, 401);
  c.set('account', token);
  await next();
});

const guard = idempotency({ store, scope: (c) => c.get('account'), required: true });
app.post('/v1/charges', guard, async (c) => {
  const { id } = c.get('idempotency'); // stable across retries and takeovers
  const { amount, currency } = await c.req.json();
  const charge = { id: `ch_${id}`, amount, currency };
  charges.push({ ...charge, account: c.get('account') });
  c.header('Location', `/v1/charges/${charge.id}`);
  return c.json(charge, 201);
});
app.get('/v1/charges', (c) => c.json({ count: charges.length }));

export default app;
// #endregion app
