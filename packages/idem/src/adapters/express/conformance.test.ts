import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import compression from 'compression';
import express from 'express';
import { describeAdapterConformance, type AdapterHarness } from '../../testing/adapter.js';
import { sqliteLedger } from '../../testing/sqlite-ledger.test-kit.js';
import { idempotency, idempotencyContext } from './index.js';

const expressHarness: AdapterHarness = {
  name: 'express',
  supports: { compression: true, rawEnd: true },
  async serve({ options, compress, handler }) {
    const app = express();
    app.set('env', 'test'); // finalhandler answers 500 without logging the stack
    const guard = idempotency({ ...options, scope: (req) => req.get('x-tenant') ?? 'acct_suite' });
    app.use(guard);
    if (compress) app.use(compression());
    app.use(express.json());
    // Wrapped, so the middleware sees the handler settle: a retryable answer frees the key at once (the suite's
    // retries run again); the bare middleware would keep it refused until the lease lapses (time.test.ts).
    app.post(
      '/v1/charges',
      guard.route(async (req, res) => {
        const search = req.originalUrl.indexOf('?');
        const reply = await handler({
          body: req.body as unknown,
          query: search === -1 ? '' : req.originalUrl.slice(search),
          context: idempotencyContext(res),
        });
        switch (reply.style) {
          case 'json':
            res
              .status(reply.status)
              .set(reply.headers ?? {})
              .json(reply.json);
            return;
          case 'stream':
            res.writeHead(reply.status, reply.headers ?? {});
            for (const chunk of reply.chunks) {
              res.write(chunk);
              await new Promise((resolve) => setImmediate(resolve));
            }
            res.end();
            return;
          case 'empty':
            res
              .status(reply.status)
              .set(reply.headers ?? {})
              .end();
            return;
          case 'throw':
            throw new Error(reply.message);
          case 'raw-end':
            res.end(reply.value as string);
            return;
        }
      }),
    );
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: async () => {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      },
    };
  },
};

describeAdapterConformance({ harness: expressHarness, ...sqliteLedger('express') });
