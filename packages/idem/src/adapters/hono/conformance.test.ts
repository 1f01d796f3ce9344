import { Hono } from 'hono';
import { compress } from 'hono/compress';
import { describeAdapterConformance, replyStream, serveFetch, type AdapterHarness } from '../../testing/adapter.js';
import { sqliteLedger } from '../../testing/sqlite-ledger.test-kit.js';
import { idempotency, type IdempotencyVariables } from './index.js';

type Status = 201;

const honoHarness: AdapterHarness = {
  name: 'hono',
  supports: { compression: true },
  async serve({ options, compress: gzip, handler }) {
    const app = new Hono<{ Variables: IdempotencyVariables }>();
    app.onError((_error, c) => c.text('Internal Server Error', 500)); // Hono's default, without the console.error
    app.use('/v1/*', idempotency({ ...options, scope: (c) => c.req.header('x-tenant') ?? 'acct_suite' }));
    if (gzip) app.use('/v1/*', compress());
    app.post('/v1/charges', async (c) => {
      const answer = await handler({
        body: await c.req.json(),
        query: new URL(c.req.url).search,
        context: c.get('idempotency'),
      });
      switch (answer.style) {
        case 'json':
          return c.json(answer.json as object, answer.status as Status, answer.headers ?? {});
        case 'stream':
          return c.body(replyStream(answer.chunks), answer.status as Status, answer.headers ?? {});
        case 'empty':
          return c.body(null, answer.status as Status, answer.headers ?? {});
        case 'throw':
          throw new Error(answer.message);
        case 'raw-end':
          throw new Error('raw-end is not supported by the Hono harness');
      }
    });
    return serveFetch(async (request) => app.fetch(request));
  },
};

describeAdapterConformance({ harness: honoHarness, ...sqliteLedger('hono') });
