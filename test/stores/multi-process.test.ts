/**
 * Across processes (issue 3, item 6): three demo server processes on one store, for every store the demo runs on
 * (./backings.ts). 200 concurrent requests with one key spread across them charge once; a process killed (-9)
 * while it holds the lease is taken over through another after the lease, with the same record id and a new
 * token, and charges once. The record and the ledger are also read directly: the ledger is the store's own
 * database for SQLite and PostgreSQL, and one IDEM_LEDGER SQLite file shared by the three otherwise.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startDemo, type DemoProcess } from '../harness.js';
import { DYNAMODB, MYSQL, POSTGRES, REDIS, SQLITE, type Opened } from './backings.js';
import { LEASE_MS, oneChargeOfTwoHundred, takeoverAfterKill } from './scenarios.js';

for (const backing of [SQLITE, POSTGRES, REDIS, DYNAMODB, MYSQL]) {
  describe.skipIf(!backing.available)(`three server processes on ${backing.name}`, () => {
    let store: Opened;
    let servers: DemoProcess[] = [];

    beforeAll(async () => {
      store = await backing.open();
      const env = { ...store.env, IDEM_LEASE_MS: String(LEASE_MS) };
      servers = await Promise.all([startDemo(env), startDemo(env), startDemo(env)]);
    });

    afterAll(async () => {
      await Promise.all(servers.map((server) => server.stop()));
      await store?.cleanup();
    });

    it('200 concurrent requests with one key, spread over the three: one charge; the rest 409 or a byte-identical replay', async () => {
      await oneChargeOfTwoHundred(servers, store);
    }, 60_000);

    it('kill -9 while a request holds the lease; a retry through another process after the lease takes over with the same id and charges once', async () => {
      await takeoverAfterKill(servers, store);
    }, 60_000);
  });
}
