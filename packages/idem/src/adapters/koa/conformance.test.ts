import { Readable } from 'node:stream';
import { bodyParser } from '@koa/bodyparser';
import Koa from 'koa';
import compress from 'koa-compress';
import { describeAdapterConformance, replyStream, serveNode, type AdapterHarness } from '../../testing/adapter.js';
import { sqliteLedger } from '../../testing/sqlite-ledger.test-kit.js';
import { idempotency, type IdempotencyState } from './index.js';

const koaHarness: AdapterHarness = {
  name: 'koa',
  supports: { compression: true },
  async serve({ options, compress: gzip, handler }) {
    const app = new Koa<IdempotencyState>();
    app.silent = true; // Koa logs the errors it answers; the suite's handler throws on purpose
    app.use(idempotency({ ...options, scope: (ctx) => ctx.get('x-tenant') || 'acct_suite' }));
    if (gzip) app.use(compress({ threshold: 0 }));
    app.use(bodyParser());
    app.use(async (ctx) => {
      if (ctx.method !== 'POST' || ctx.path !== '/v1/charges') return;
      const reply = await handler({
        body: ctx.request.body,
        query: ctx.search,
        context: ctx.state.idempotency,
      });
      switch (reply.style) {
        case 'json':
          ctx.status = reply.status;
          ctx.set(reply.headers ?? {});
          ctx.body = reply.json;
          return;
        case 'stream': {
          ctx.status = reply.status;
          ctx.set(reply.headers ?? {});
          // A Node stream, as Koa apps stream: the suite's chunks, one per turn of the event loop.
          ctx.body = Readable.from(replyStream(reply.chunks) as unknown as AsyncIterable<Uint8Array>, {
            objectMode: false,
          });
          return;
        }
        case 'empty':
          // Koa turns a null body into a 204 unless the status is set after it.
          ctx.body = null;
          ctx.status = reply.status;
          ctx.set(reply.headers ?? {});
          return;
        case 'throw':
          throw new Error(reply.message);
        case 'raw-end':
          throw new Error('raw-end is not supported by the Koa harness');
      }
    });
    return serveNode(app.callback());
  },
};

describeAdapterConformance({ harness: koaHarness, ...sqliteLedger('koa') });
