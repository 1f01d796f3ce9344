import { describeAdapterConformance, replyStream, serveFetch, type AdapterHarness } from '../testing/adapter.js';
import { sqliteLedger } from '../testing/sqlite-ledger.test-kit.js';
import { idempotency } from './middleware.js';

/** The Web-standard layer itself, served by Node's HTTP server through `serveFetch`. */
const webHarness: AdapterHarness = {
  name: 'web (idem/http)',
  async serve({ options, handler }) {
    const handle = idempotency({ ...options, scope: (request) => request.headers.get('x-tenant') ?? 'acct_suite' })(
      async (request, context) => {
        const answer = await handler({ body: await request.json(), query: new URL(request.url).search, context });
        switch (answer.style) {
          case 'json':
            return Response.json(answer.json, { status: answer.status, headers: answer.headers ?? {} });
          case 'stream':
            return new Response(replyStream(answer.chunks), { status: answer.status, headers: answer.headers ?? {} });
          case 'empty':
            return new Response(null, { status: answer.status, headers: answer.headers ?? {} });
          case 'throw':
            throw new Error(answer.message);
          case 'raw-end':
            throw new Error('raw-end is not supported by the Web harness');
        }
      },
    );
    return serveFetch(handle);
  },
};

describeAdapterConformance({ harness: webHarness, ...sqliteLedger('web') });
