// Fastify 5 on Redis (CommonJS). REDIS_URL and REDIS_PREFIX say where; `node server.js`.
// #region app
const Fastify = require('fastify');
const Redis = require('ioredis');
const { idempotency } = require('idem/fastify');
const { redisStore } = require('idem/stores/redis');

const prefix = process.env.REDIS_PREFIX ?? 'payments:';
const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const store = redisStore({ client: redis, prefix: `${prefix}idem:` }); // records under <prefix>idem:

async function main() {
  await store.load(); // loads the Lua scripts
  const app = Fastify();
  app.addHook('onRequest', authenticate); // sets request.account (below)
  await app.register(idempotency({ store, scope: (request) => request.account }));

  app.post('/v1/charges', { config: { idempotency: { required: true } } }, async (request, reply) => {
    const { id } = request.idempotency; // stable across retries and takeovers
    const charge = { id: `ch_${id}`, amount: request.body.amount, currency: request.body.currency };
    // Written under the record's id (HSETNX: once): a takeover after a crash finds the charge, not a second one.
    await redis.hsetnx(`${prefix}charges`, charge.id, JSON.stringify({ ...charge, account: request.account }));
    return reply.code(201).header('location', `/v1/charges/${charge.id}`).send(charge);
  });
  app.get('/healthz', { config: { idempotency: false } }, async () => ({ ok: true })); // left alone

  const address = await app.listen({ port: Number(process.env.PORT ?? 3000) });
  console.log(`listening on ${address}`);
}
// #endregion app

/** Your authentication: here the bearer token is the account. */
async function authenticate(request, reply) {
  const token = /^Bearer (\w+)$/.exec(request.headers.authorization ?? '')?.[1];
  if (token === undefined) return reply.code(401).send({ error: 'unauthorized' });
  request.account = token;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
