/**
 * Across processes (issue 3, item 6): three demo server processes on one store. 200 concurrent requests with one
 * key spread across them charge once; a process killed (-9) while it holds the lease is taken over through
 * another after the lease, and charges once. The ledger is read through GET /v1/balance on any process: for
 * Redis and DynamoDB the three share one IDEM_LEDGER SQLite file; for Postgres and SQLite it is the store's
 * own database.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalDynamo, type LocalDynamo } from '../../apps/demo/src/local-dynamo.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { deleteRedisPrefix, dropSchema } from './cleanup.js';

const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
const LEASE_MS = 1500;
const suffix = () => randomBytes(5).toString('hex');

/** A store for the three processes: the environment they share, and how to clean up after them. */
interface Backing {
  readonly env: Record<string, string>;
  cleanup(): Promise<void>;
}

const backings: Array<{ name: string; available: boolean; open: () => Promise<Backing> }> = [
  {
    name: 'SQLite file',
    available: true,
    open: async () => {
      const dir = tempDir();
      return { env: { IDEM_STORE: `sqlite:${dir.path}/idem.db` }, cleanup: async () => dir.remove() };
    },
  },
  {
    name: 'PostgreSQL',
    available: await serviceAvailable('PostgreSQL', POSTGRES_URL),
    open: async () => {
      const schema = `idem_e2e_${suffix()}`;
      const url = new URL(POSTGRES_URL);
      url.searchParams.set('schema', schema);
      return {
        env: { IDEM_STORE: url.toString() },
        cleanup: () => dropSchema(schema),
      };
    },
  },
  {
    name: 'Redis',
    available: await serviceAvailable('Redis', REDIS_URL),
    open: async () => {
      const prefix = `idem_e2e_${suffix()}:`;
      const dir = tempDir();
      const url = new URL(REDIS_URL);
      url.searchParams.set('prefix', prefix);
      return {
        env: { IDEM_STORE: url.toString(), IDEM_LEDGER: `${dir.path}/ledger.db` },
        cleanup: async () => {
          await deleteRedisPrefix(prefix);
          dir.remove();
        },
      };
    },
  },
  {
    name: 'DynamoDB (one dynalite for all three)',
    available: true,
    open: async () => {
      const local: LocalDynamo = await startLocalDynamo();
      const dir = tempDir();
      const { port } = new URL(local.endpoint);
      return {
        env: {
          IDEM_STORE: `dynamodb://127.0.0.1:${port}?table=idem_e2e_${suffix()}`,
          IDEM_LEDGER: `${dir.path}/ledger.db`,
        },
        cleanup: async () => {
          await local.close();
          dir.remove();
        },
      };
    },
  },
];

interface Answer {
  readonly status: number;
  readonly replayed: string | null;
  readonly retryAfter: string | null;
  readonly body: string;
}

const answer = async (response: Response): Promise<Answer> => ({
  status: response.status,
  replayed: response.headers.get('idempotent-replayed'),
  retryAfter: response.headers.get('retry-after'),
  body: await response.text(),
});

for (const backing of backings) {
  describe.skipIf(!backing.available)(`three server processes on ${backing.name}`, () => {
    let store: Backing;
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
      const before = await api(servers[1]!.url).balance();
      const key = randomUUID();
      const answers = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          api(servers[i % 3]!.url)
            .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '300' })
            .then(answer),
        ),
      );
      const executed = answers.filter((a) => a.status === 201 && a.replayed === null);
      expect(executed.length).toBe(1);
      const body = executed[0]!.body;
      for (const a of answers) {
        if (a === executed[0]) continue;
        if (a.status === 409) expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
        else expect([a.status, a.replayed, a.body]).toEqual([201, 'true', body]);
      }
      const charge = JSON.parse(body) as { id: string };
      for (const server of servers) {
        expect(await api(server.url).balance()).toEqual({
          object: 'balance',
          charged: before.charged + 50000,
          count: before.count + 1,
        });
      }
      expect(await (await api(servers[2]!.url).get(`/v1/charges/${charge.id}`)).text()).toBe(body);
    });

    it('kill -9 while a request holds the lease; a retry through another process after the lease charges once', async () => {
      const [doomedServer, second, third] = servers as [DemoProcess, DemoProcess, DemoProcess];
      const alice = api(second.url);
      const before = await alice.balance();
      const key = randomUUID();
      const doomed = api(doomedServer.url)
        .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '30000' })
        .catch((error: unknown) => error);
      // Wait until the doomed process holds the lease (its record is visible from another process).
      const status = async () => {
        const list = (await (await alice.get('/v1/idempotency_records')).json()) as {
          data: Array<{ key: string; status: string }>;
        };
        return list.data.find((r) => r.key === key)?.status;
      };
      for (let i = 0; i < 100 && (await status()) !== 'in_progress'; i++) await new Promise((r) => setTimeout(r, 50));
      expect(await status()).toBe('in_progress');
      expect(await doomedServer.stop('SIGKILL')).toBe('SIGKILL');
      expect(await doomed).toEqual(new TypeError('fetch failed'));

      let retry = await answer(await alice.charge($500, { 'idempotency-key': key }));
      const statuses = [retry.status];
      for (let i = 0; i < 100 && retry.status === 409; i++) {
        await new Promise((r) => setTimeout(r, 100));
        retry = await answer(await alice.charge($500, { 'idempotency-key': key }));
        statuses.push(retry.status);
      }
      expect([retry.status, retry.replayed]).toEqual([201, null]);
      expect(new Set(statuses)).toEqual(new Set(statuses.length > 1 ? [409, 201] : [201]));
      const replay = await answer(await api(third.url).charge($500, { 'idempotency-key': key }));
      expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', retry.body]);
      expect(await api(third.url).balance()).toEqual({
        object: 'balance',
        charged: before.charged + 50000,
        count: before.count + 1,
      });
    });
  });
}
