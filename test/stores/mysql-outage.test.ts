/**
 * MySQL/MariaDB outage: the demo server talks to MySQL through a fault proxy that cuts and restores the link.
 * While the store is unreachable every keyed request gets 503 problem+json and the work does not run (no
 * charge); after it returns, retries with the same keys succeed, with exactly one charge per key.
 *
 * Charges live in an SQLite ledger (IDEM_LEDGER), unique on the record id, read directly by the test; the record
 * is read from MySQL directly, not through the proxy. When the link is cut between the claim and the completion
 * the work has run and written its charge under the record's id: the retry after the lease takes the record over
 * with the same id, finds that charge and answers with it instead of charging again.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from '../../packages/idem/src/core/key.js';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';
import { MYSQL_URL, serviceAvailable } from '../services.js';

const available = await serviceAvailable('MySQL', MYSQL_URL);
const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
const LEASE_MS = 1500;
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

describe.skipIf(!available)('MySQL outage, through a fault proxy', () => {
  const database = `idem_e2e_${randomBytes(5).toString('hex')}`;
  const dir = tempDir();
  const ledgerPath = `${dir.path}/ledger.db`;
  let admin: mysql.Connection;
  let proxy: FaultProxy;
  let server: DemoProcess;
  const alice = () => api(server.url);

  beforeAll(async () => {
    admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`CREATE DATABASE \`${database}\``);
    const { hostname, port } = new URL(MYSQL_URL);
    proxy = await startFaultProxy(hostname, Number(port));
    const url = new URL(proxy.via(MYSQL_URL));
    url.pathname = `/${database}`;
    server = await startDemo({ IDEM_STORE: url.toString(), IDEM_LEDGER: ledgerPath, IDEM_LEASE_MS: String(LEASE_MS) });
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    await server?.stop();
    await proxy?.close();
    await admin?.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin?.end();
    dir.remove();
  });

  /** Ids of acct_alice's succeeded charges, oldest first, read from the ledger file. */
  const charges = (): string[] => {
    const ledger = new Database(ledgerPath, { readonly: true });
    try {
      const rows = ledger
        .prepare(`SELECT id FROM charges WHERE account = 'acct_alice' AND status = 'succeeded' ORDER BY rowid`)
        .all() as Array<{ id: string }>;
      return rows.map((row) => row.id);
    } finally {
      ledger.close();
    }
  };

  /** The record for `key` in MySQL, read directly (not through the proxy). */
  const record = async (key: string) => {
    const [rows] = await admin.query<mysql.RowDataPacket[]>(
      `SELECT status, id FROM \`${database}\`.idempotency_records WHERE pk = ?`,
      [recordPk('acct_alice', key)],
    );
    const row = rows[0];
    return row && { status: String(row.status), id: String(row.id) };
  };

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

  /** After restore: every key settles on a 201, and the ledger gained exactly those charges, one per key. */
  const expectOneChargeEach = async (keys: string[], before: string[]): Promise<Answer[]> => {
    const finals: Answer[] = [];
    for (const key of keys) {
      const { final, statuses } = await settle(key);
      expect([final.status, statuses.filter((s) => ![409, 503, 201].includes(s))]).toEqual([201, []]);
      finals.push(final);
    }
    const after = charges();
    expect(after.length).toBe(before.length + keys.length);
    expect(new Set(after.slice(before.length))).toEqual(new Set(finals.map(chargeId)));
    for (const [i, key] of keys.entries()) {
      const replay = await answer(await alice().charge($500, { 'idempotency-key': key }));
      expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', finals[i]?.body]);
    }
    return finals;
  };

  it('cut: every keyed request gets 503 and the work does not run; after restore each key charges once', async () => {
    const before = charges();
    proxy.cut();
    const keys = Array.from({ length: 5 }, () => randomUUID());
    const answers = await Promise.all(
      keys.map(async (key) => answer(await alice().charge($500, { 'idempotency-key': key }))),
    );
    for (const a of answers) expect(downOf(a)).toEqual(STORE_DOWN);
    expect(charges()).toEqual(before);
    for (const key of keys) expect(await record(key)).toBeUndefined();
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    proxy.restore();
    await expectOneChargeEach(keys, before);
  }, 60_000);

  it('cut between the claim and the completion: 503; the retry after the lease takes over with the same id and charges once', async () => {
    const before = charges();
    const key = randomUUID();
    // The work takes 1 s: time to see the claim (in MySQL, directly) and cut the link.
    const pending = alice().charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '1000' }).then(answer);
    for (let i = 0; i < 200 && (await record(key))?.status !== 'in_progress'; i++) await sleep(25);
    const held = await record(key);
    expect(held?.status).toBe('in_progress');
    proxy.cut();
    expect(downOf(await pending)).toEqual(STORE_DOWN);
    // The work ran and wrote its charge under the record's id; the completion never reached MySQL.
    const afterFailure = charges();
    expect(afterFailure.length).toBe(before.length + 1);
    expect((await record(key))?.status).toBe('in_progress');
    proxy.restore();
    const [final] = await expectOneChargeEach([key], before);
    expect(chargeId(final as Answer)).toBe(afterFailure.at(-1));
    expect(await record(key)).toEqual({ status: 'succeeded', id: held?.id });
  }, 60_000);
});
