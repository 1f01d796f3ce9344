/**
 * Store outage (issue 3, item 7): the demo server talks to PostgreSQL or Redis through a fault proxy that cuts,
 * stalls and restores the link. While the store is unreachable every keyed request gets 503 problem+json and no
 * charge is written; after it returns, retries with the same keys succeed, with exactly one charge per key.
 *
 * The ledger is read straight from its database (Postgres directly, not through the proxy; the Redis
 * configuration's SQLite file), so it can be checked while the store is down.
 *
 * The hard case is the store failing between the claim and the completion: the work ran, `complete` failed, the
 * client got 503 and the record stays `in_progress` until its lease lapses. Postgres (shared ledger): the charge
 * was written in the completion's transaction, which never committed, so the retry charges once. Redis
 * (ledger elsewhere): the charge was written under the record's id; the retry takes over with the same id and
 * `insertOnce` finds it, so the retry answers with that charge instead of making a second one.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { deleteRedisPrefix, dropSchema } from './cleanup.js';

const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
const LEASE_MS = 1500;
const suffix = () => randomBytes(5).toString('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Answer {
  readonly status: number;
  readonly type: string | null;
  readonly replayed: string | null;
  readonly body: string;
}

const answer = async (response: Response): Promise<Answer> => ({
  status: response.status,
  type: response.headers.get('content-type'),
  replayed: response.headers.get('idempotent-replayed'),
  body: await response.text(),
});

const STORE_DOWN = [503, 'application/problem+json', 'urn:idem:problem:idempotency-store-unavailable'];
const downOf = (a: Answer) => [a.status, a.type, (JSON.parse(a.body) as { type?: string }).type];
const chargeId = (a: Answer) => (JSON.parse(a.body) as { id: string }).id;

/** The store under test, behind `proxy`: what the server needs, and how to read the ledger without the proxy. */
interface Setup {
  readonly env: Record<string, string>;
  /** Ids of acct_alice's succeeded charges, oldest first. */
  charges(): Promise<string[]>;
  cleanup(): Promise<void>;
}

const stores: Array<{
  name: string;
  available: boolean;
  target: string;
  /** The ledger shares the store's transaction (Postgres) or is written by the work under the record id (Redis). */
  sharedLedger: boolean;
  open: (proxy: FaultProxy) => Promise<Setup>;
}> = [
  {
    name: 'PostgreSQL',
    available: await serviceAvailable('PostgreSQL', POSTGRES_URL),
    target: POSTGRES_URL,
    sharedLedger: true,
    open: async (proxy) => {
      const schema = `idem_e2e_${suffix()}`;
      const url = new URL(proxy.via(POSTGRES_URL));
      url.searchParams.set('schema', schema);
      const direct = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      return {
        env: { IDEM_STORE: url.toString() },
        charges: async () =>
          (
            await direct.query<{ id: string }>(
              `SELECT id FROM "${schema}".charges WHERE account = 'acct_alice' AND status = 'succeeded' ORDER BY seq`,
            )
          ).rows.map((row) => row.id),
        cleanup: async () => {
          await direct.end();
          await dropSchema(schema);
        },
      };
    },
  },
  {
    name: 'Redis',
    available: await serviceAvailable('Redis', REDIS_URL),
    target: REDIS_URL,
    sharedLedger: false,
    open: async (proxy) => {
      const prefix = `idem_e2e_${suffix()}:`;
      const dir = tempDir();
      const url = new URL(proxy.via(REDIS_URL));
      url.searchParams.set('prefix', prefix);
      const ledgerPath = `${dir.path}/ledger.db`;
      let ledger: Database.Database | undefined;
      return {
        env: { IDEM_STORE: url.toString(), IDEM_LEDGER: ledgerPath },
        charges: async () => {
          ledger ??= new Database(ledgerPath);
          const rows = ledger
            .prepare(`SELECT id FROM charges WHERE account = 'acct_alice' AND status = 'succeeded' ORDER BY rowid`)
            .all() as Array<{ id: string }>;
          return rows.map((row) => row.id);
        },
        cleanup: async () => {
          ledger?.close();
          await deleteRedisPrefix(prefix);
          dir.remove();
        },
      };
    },
  },
];

for (const store of stores) {
  describe.skipIf(!store.available)(`${store.name} outage, through a fault proxy`, () => {
    let proxy: FaultProxy;
    let setup: Setup;
    let server: DemoProcess;
    const alice = () => api(server.url);

    beforeAll(async () => {
      const { hostname, port } = new URL(store.target);
      proxy = await startFaultProxy(hostname, Number(port));
      setup = await store.open(proxy);
      server = await startDemo({ ...setup.env, IDEM_LEASE_MS: String(LEASE_MS) });
    });

    afterEach(() => proxy.restore());

    afterAll(async () => {
      await server?.stop();
      await proxy?.close();
      await setup?.cleanup();
    });

    /** Retries `key` while the answer is 409 (a live lease) or 503 (the store reconnecting), for up to 20 s. */
    const settle = async (key: string): Promise<{ final: Answer; statuses: number[] }> => {
      const statuses: number[] = [];
      const until = Date.now() + 20_000;
      for (;;) {
        const final = await answer(await alice().charge($500, { 'idempotency-key': key }));
        statuses.push(final.status);
        if ((final.status !== 409 && final.status !== 503) || Date.now() > until) return { final, statuses };
        await sleep(100);
      }
    };

    /** Waits until the record for `key` is `in_progress` (the request holds the lease), as seen through the store. */
    const claimed = async (key: string): Promise<void> => {
      for (let i = 0; i < 100; i++) {
        const list = (await (await alice().get('/v1/idempotency_records')).json()) as {
          data: Array<{ key: string; status: string }>;
        };
        if (list.data.find((r) => r.key === key)?.status === 'in_progress') return;
        await sleep(25);
      }
      throw new Error(`the record for ${key} was never in_progress`);
    };

    /** After restore: every key settles on a 201, and the ledger gained exactly those charges, one per key. */
    const expectOneChargeEach = async (keys: string[], before: string[]): Promise<Answer[]> => {
      const finals: Answer[] = [];
      for (const key of keys) {
        const { final, statuses } = await settle(key);
        expect([final.status, statuses.filter((s) => ![409, 503, 201].includes(s))]).toEqual([201, []]);
        finals.push(final);
      }
      const after = await setup.charges();
      expect(after.length).toBe(before.length + keys.length);
      expect(new Set(after.slice(before.length))).toEqual(new Set(finals.map(chargeId)));
      for (const [i, key] of keys.entries()) {
        const replay = await answer(await alice().charge($500, { 'idempotency-key': key }));
        expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', finals[i]?.body]);
      }
      return finals;
    };

    it('cut: every keyed request gets 503 and nothing is charged; after restore each key charges once', async () => {
      const before = await setup.charges();
      proxy.cut();
      const keys = Array.from({ length: 5 }, () => randomUUID());
      const answers = await Promise.all(
        keys.map(async (key) => answer(await alice().charge($500, { 'idempotency-key': key }))),
      );
      for (const a of answers) expect(downOf(a)).toEqual(STORE_DOWN);
      expect(await setup.charges()).toEqual(before);
      expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
      proxy.restore();
      await expectOneChargeEach(keys, before);
    });

    it('stall: every keyed request gets 503 once the client times out, nothing is charged; after restore each key charges once', async () => {
      const before = await setup.charges();
      proxy.stall();
      const keys = Array.from({ length: 5 }, () => randomUUID());
      const answers = await Promise.all(
        keys.map(async (key) => answer(await alice().charge($500, { 'idempotency-key': key }))),
      );
      for (const a of answers) expect(downOf(a)).toEqual(STORE_DOWN);
      expect(await setup.charges()).toEqual(before);
      // Restore delivers what the stall held: claims the server gave up on may run now and hold their keys for
      // one lease (answered 409 meanwhile); then the retries take them over.
      proxy.restore();
      await expectOneChargeEach(keys, before);
    });

    for (const fault of ['cut', 'stall'] as const) {
      it(`${fault} between the claim and the completion: 503; the retry after the lease charges once`, async () => {
        const before = await setup.charges();
        const key = randomUUID();
        // The work takes 1 s: time to see the claim and fault the link on a loaded machine. A lease renewal
        // (every LEASE_MS / 3) meets the fault too, and a stalled one delays the completion by its timeout.
        const pending = alice().charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '1000' }).then(answer);
        await claimed(key);
        proxy[fault]();
        expect(downOf(await pending)).toEqual(STORE_DOWN);
        // The work ran. With the ledger in the store's transaction nothing committed; with the ledger elsewhere
        // the charge is written, under the record's id, and the retry must find it rather than charge again.
        const afterFailure = await setup.charges();
        expect(afterFailure.length).toBe(before.length + (store.sharedLedger ? 0 : 1));
        proxy.restore();
        const [final] = await expectOneChargeEach([key], before);
        if (!store.sharedLedger) expect(chargeId(final as Answer)).toBe(afterFailure.at(-1));
      });
    }
  });
}
