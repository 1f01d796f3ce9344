/**
 * Across processes on MySQL/MariaDB: three demo server processes on one database (records in MySQL, charges in
 * one shared IDEM_LEDGER SQLite file, unique on the record id). 200 concurrent requests with one key spread across
 * them charge once; a process killed (-9) while it holds the lease is taken over through another after the lease,
 * with the same record id and a new token, and charges once. The record is read straight from MySQL.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from '../../packages/idem/src/core/key.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';
import { MYSQL_URL, serviceAvailable } from '../services.js';

const available = await serviceAvailable('MySQL', MYSQL_URL);
const $500 = { amount: 50000, currency: 'usd', source: 'tok_visa' };
const LEASE_MS = 1500;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

describe.skipIf(!available)('three server processes on MySQL', () => {
  const database = `idem_e2e_${randomBytes(5).toString('hex')}`;
  const dir = tempDir();
  const ledgerPath = `${dir.path}/ledger.db`;
  let admin: mysql.Connection;
  let servers: DemoProcess[] = [];

  beforeAll(async () => {
    admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`CREATE DATABASE \`${database}\``);
    const url = new URL(MYSQL_URL);
    url.pathname = `/${database}`;
    const env = { IDEM_STORE: url.toString(), IDEM_LEDGER: ledgerPath, IDEM_LEASE_MS: String(LEASE_MS) };
    servers = await Promise.all([startDemo(env), startDemo(env), startDemo(env)]);
  });

  afterAll(async () => {
    await Promise.all(servers.map((server) => server.stop()));
    await admin?.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin?.end();
    dir.remove();
  });

  /** The record for `key` as MySQL holds it (read directly, not through a server). */
  const record = async (key: string) => {
    const [rows] = await admin.query<mysql.RowDataPacket[]>(
      `SELECT status, id, token FROM \`${database}\`.idempotency_records WHERE pk = ?`,
      [recordPk('acct_alice', key)],
    );
    const row = rows[0];
    return row && { status: String(row.status), id: String(row.id), token: String(row.token) };
  };
  /** Charges in the shared ledger made under record `id`. */
  const chargesFor = (id: string) => {
    const ledger = new Database(ledgerPath, { readonly: true });
    try {
      return ledger.prepare('SELECT id FROM charges WHERE idempotency_ref = ?').all(id) as Array<{ id: string }>;
    } finally {
      ledger.close();
    }
  };

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
    const stored = await record(key);
    expect(stored?.status).toBe('succeeded');
    expect(chargesFor(stored!.id)).toEqual([{ id: charge.id }]);
    for (const server of servers) {
      expect(await api(server.url).balance()).toEqual({
        object: 'balance',
        charged: before.charged + 50000,
        count: before.count + 1,
      });
    }
  }, 60_000);

  it('kill -9 while a request holds the lease; a retry through another process after the lease takes over with the same id and charges once', async () => {
    const [doomedServer, second, third] = servers as [DemoProcess, DemoProcess, DemoProcess];
    const alice = api(second.url);
    const before = await alice.balance();
    const key = randomUUID();
    const doomed = api(doomedServer.url)
      .charge($500, { 'idempotency-key': key, 'idem-lab-delay-ms': '30000' })
      .catch((error: unknown) => error);
    // Wait until the doomed process holds the lease: its record is in MySQL, in_progress.
    for (let i = 0; i < 200 && (await record(key))?.status !== 'in_progress'; i++) await sleep(25);
    const held = await record(key);
    expect(held?.status).toBe('in_progress');
    expect(await doomedServer.stop('SIGKILL')).toBe('SIGKILL');
    expect(await doomed).toEqual(new TypeError('fetch failed'));

    let retry = await answer(await alice.charge($500, { 'idempotency-key': key }));
    const statuses = [retry.status];
    for (let i = 0; i < 100 && retry.status === 409; i++) {
      await sleep(100);
      retry = await answer(await alice.charge($500, { 'idempotency-key': key }));
      statuses.push(retry.status);
    }
    expect([retry.status, retry.replayed]).toEqual([201, null]);
    expect(new Set(statuses)).toEqual(new Set(statuses.length > 1 ? [409, 201] : [201]));
    const after = await record(key);
    expect(after?.status).toBe('succeeded');
    expect(after?.id).toBe(held?.id);
    expect(after?.token).not.toBe(held?.token);
    expect(chargesFor(held!.id)).toEqual([{ id: (JSON.parse(retry.body) as { id: string }).id }]);
    const replay = await answer(await api(third.url).charge($500, { 'idempotency-key': key }));
    expect([replay.status, replay.replayed, replay.body]).toEqual([201, 'true', retry.body]);
    expect(await api(third.url).balance()).toEqual({
      object: 'balance',
      charged: before.charged + 50000,
      count: before.count + 1,
    });
  }, 60_000);
});
