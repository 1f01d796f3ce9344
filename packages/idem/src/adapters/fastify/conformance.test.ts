import { Readable } from 'node:stream';
import fastifyCompress from '@fastify/compress';
import Fastify from 'fastify';
import { describeAdapterConformance, type AdapterHarness } from '../../testing/adapter.js';
import { sqliteLedger } from '../../testing/sqlite-ledger.test-kit.js';
import { idempotency } from './index.js';

const fastifyHarness: AdapterHarness = {
  name: 'fastify',
  supports: { compression: true },
  async serve({ options, compress, handler }) {
    const app = Fastify({ forceCloseConnections: true });
    await app.register(
      idempotency({
        ...options,
        scope: (request) => (request.headers['x-tenant'] as string | undefined) ?? 'acct_suite',
      }),
    );
    if (compress) await app.register(fastifyCompress, { global: true });
    app.post('/v1/charges', async (request, reply) => {
      const search = request.url.indexOf('?');
      const answer = await handler({
        body: request.body,
        query: search === -1 ? '' : request.url.slice(search),
        context: request.idempotency ?? undefined,
      });
      switch (answer.style) {
        case 'json':
          return reply
            .code(answer.status)
            .headers(answer.headers ?? {})
            .send(answer.json);
        case 'stream':
          return reply
            .code(answer.status)
            .headers(answer.headers ?? {})
            .send(Readable.from(answer.chunks));
        case 'empty':
          return reply
            .code(answer.status)
            .headers(answer.headers ?? {})
            .send();
        case 'throw':
          throw new Error(answer.message);
        case 'raw-end':
          throw new Error('raw-end is not supported by the Fastify harness');
      }
    });
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    return { url: address, close: () => app.close() };
  },
};

describeAdapterConformance({ harness: fastifyHarness, ...sqliteLedger('fastify') });
