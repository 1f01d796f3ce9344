/**
 * Round trips per request kind on MySQL/MariaDB, measured through the demo itself (`openBackend` + `createApp`,
 * in-process): the store's own `roundTrips` counter, and the operations its `onRoundTrip` observer saw.
 * docs/DESIGN.md, Round-trip budget: new key 2 (claim, complete); replay, conflict, mismatch 1. The demo keeps charges in SQLite here,
 * so the completion carries no effects and is one statement.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp, type App } from '../../apps/demo/src/app.js';
import { loadConfig } from '../../apps/demo/src/config.js';
import { openBackend, type Backend } from '../../apps/demo/src/stores.js';
import { tempDir } from '../harness.js';
import { MYSQL_URL, serviceAvailable } from '../services.js';

const available = await serviceAvailable('MySQL', MYSQL_URL);
const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };

interface Kind {
  readonly trips: number;
  readonly ops: string[];
}

describe.skipIf(!available)('round trips through the demo on MySQL (ledger in SQLite)', () => {
  const database = `idem_e2e_${randomBytes(5).toString('hex')}`;
  const dir = tempDir();
  let admin: mysql.Connection;
  let backend: Backend;
  let app: App;
  const seen: string[] = [];

  beforeAll(async () => {
    admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`CREATE DATABASE \`${database}\``);
    const url = new URL(MYSQL_URL);
    url.pathname = `/${database}`;
    const config = loadConfig({ IDEM_STORE: url.toString(), IDEM_LEDGER: `${dir.path}/ledger.db`, IDEM_LAB: '1' });
    backend = await openBackend(config, { onRoundTrip: (trip) => seen.push(trip.op) });
    app = createApp({ ...config, ...backend });
  });

  afterAll(async () => {
    await backend?.close();
    await admin?.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin?.end();
    dir.remove();
  });

  const charge = (key: string, body: unknown = $500, headers: Record<string, string> = {}) =>
    app(
      new Request('http://127.0.0.1/v1/charges', {
        method: 'POST',
        headers: {
          authorization: 'Bearer sk_test_alice',
          'content-type': 'application/json',
          'idempotency-key': key,
          ...headers,
        },
        body: JSON.stringify(body),
      }),
    );

  /** The store's round trips while `run` runs, and the operations the observer saw. */
  const measure = async (run: () => Promise<Response>): Promise<Kind & { status: number }> => {
    const [trips, ops] = [backend.store.roundTrips, seen.length];
    const response = await run();
    return { status: response.status, trips: backend.store.roundTrips - trips, ops: seen.slice(ops) };
  };

  it('new key 2, replay 1, conflict 1, mismatch 1', async () => {
    const key = randomUUID();
    const newKey = await measure(() => charge(key));
    const replay = await measure(() => charge(key));
    const mismatch = await measure(() => charge(key, { ...$500, amount: 1 }));

    // Conflict: a second request while the first holds the lease (its claim has landed, its work sleeps).
    const busy = randomUUID();
    const [before, reported] = [backend.store.roundTrips, seen.length];
    const first = charge(busy, $500, { 'idem-lab-delay-ms': '1500' });
    // Sent (the counter) and answered (the observer, which hears of a trip when its reply arrives).
    for (let i = 0; i < 1_000 && (backend.store.roundTrips === before || seen.length === reported); i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const conflict = await measure(() => charge(busy));
    expect((await first).status).toBe(201);

    expect({ newKey, replay, conflict, mismatch }).toEqual({
      newKey: { status: 201, trips: 2, ops: ['claim', 'complete'] },
      replay: { status: 201, trips: 1, ops: ['claim'] },
      conflict: { status: 409, trips: 1, ops: ['claim'] },
      mismatch: { status: 400, trips: 1, ops: ['claim'] },
    });
  }, 30_000);
});
