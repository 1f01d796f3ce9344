// The Web-standard handler every runtime serves: (Request) => Promise<Response>.
// #region handler
import { idempotency } from 'idem/http';
import { memoryStore } from 'idem/stores/memory';

const charges = []; // your ledger; here, this process's memory

const protect = idempotency({
  store: memoryStore(), // one process: use a shared store (PostgreSQL, Redis, …) with several instances
  scope: 'single-tenant', // or (request) => the authenticated account: two accounts never share a key
  required: true, // keyless POSTs get 400 idempotency-key-missing
});

// It runs once per key; a retry gets the first answer back, byte for byte.
const createCharge = protect(async (request, { id }) => {
  const { amount, currency } = await request.json();
  // `id` is stable across retries: pass it on as the payment processor's own idempotency key.
  const charge = { id: `ch_${charges.length + 1}`, amount, currency, idempotencyId: id };
  charges.push(charge);
  return Response.json(charge, { status: 201, headers: { location: `/v1/charges/${charge.id}` } });
});

export function handle(request) {
  const { pathname } = new URL(request.url);
  if (pathname === '/v1/charges' && request.method === 'POST') return createCharge(request);
  if (pathname === '/v1/charges') return Response.json({ count: charges.length, data: charges });
  return new Response('Not Found', { status: 404 });
}
// #endregion handler
