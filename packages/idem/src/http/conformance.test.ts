import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { sqliteStore } from '../stores/sqlite/index.js';
import { describeAdapterConformance, replyStream, serveFetch, type AdapterHarness } from '../testing/adapter.js';
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

const dir = mkdtempSync(join(tmpdir(), 'idem-web-conformance-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeAdapterConformance({
  harness: webHarness,
  createStore: async () => {
    const store = sqliteStore({ database: new Database(join(dir, `${randomUUID()}.db`)), closeDatabase: true });
    await store.migrate();
    store.database.exec('CREATE TABLE ledger (ref TEXT NOT NULL UNIQUE)');
    return store;
  },
  effect: (tx: Database.Database, ref) => {
    tx.prepare('INSERT INTO ledger (ref) VALUES (?)').run(ref);
  },
  countEffects: async (ref, store) =>
    (store.database.prepare('SELECT count(*) AS n FROM ledger WHERE ref = ?').get(ref) as { n: number }).n,
});
