/**
 * Reset against running requests, and the start-up marking against a failing database (issue 28, third review):
 * a charge racing a Reset is either refused or fully journaled — never a charge no entry names (PostgreSQL ledger,
 * where the journal's insert awaits the database); and a marking pass that fails is tried again.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { memoryStore } from 'idem/stores/memory';
import { withPostgresLedger } from '../../../test/fixtures/demo.js';
import { POSTGRES_URL, serviceAvailable } from '../../../test/services.js';
import { createApp } from './app.js';
import type { LabEntry } from './lab-journal.js';
import { SqliteLedger, type Ledger } from './ledger.js';

const SANDBOX = 'sk_lab_resetrace12345678';

function lab(ledger: Ledger) {
  const app = createApp({
    store: memoryStore(),
    ledger,
    sharedLedger: false,
    apiKeys: new Map(),
    lab: true,
    ttlMs: 60_000,
    leaseMs: 2_000,
    mismatchStatus: 400,
  });
  const call = (path: string, init: RequestInit = {}) =>
    app(
      new Request(`http://127.0.0.1${path}`, {
        ...init,
        headers: { authorization: `Bearer ${SANDBOX}`, ...init.headers },
      }),
    );
  const charge = (key: string) =>
    call('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ amount: 500, source: 'tok_visa' }),
    });
  const history = async () =>
    (await (await call('/v1/lab/history')).json()) as { entries: LabEntry[]; charges: Array<{ id: string }> };
  return { app, call, charge, history };
}

describe('lab Reset against running requests', () => {
  it('PostgreSQL ledger: 30 charges each racing a Reset leave no charge that no entry names', async ({ skip }) => {
    if (!(await serviceAvailable('postgres', POSTGRES_URL))) skip();
    await withPostgresLedger(`lab_reset_${process.pid}`, 8, async (ledger) => {
      const { call, charge, history } = lab(ledger);
      const outcomes = new Set<string>();
      for (let i = 0; i < 30; i++) {
        const [charged, reset] = await Promise.all([charge(`k-${i}`), call('/v1/lab/reset', { method: 'POST' })]);
        outcomes.add(`${charged.status}/${reset.status}`);
        const read = await history();
        const named = new Set(read.entries.map((e) => e.charge?.id));
        expect(read.charges.filter((c) => !named.has(c.id))).toEqual([]);
      }
      // Every pairing seen is one of: the charge first (Reset refused, or after it), or the Reset first.
      for (const seen of outcomes) expect(['201/200', '201/409', '409/200']).toContain(seen);
    });
  });

  it('a start-up marking pass that fails is tried again: interrupted once the database answers', async () => {
    const sqlite = new SqliteLedger(new Database(':memory:'));
    let failures = 2;
    const journal = (account: string, seq: number | null, entry: string, limit: number) => {
      if (seq !== null && failures-- > 0) return Promise.reject(new Error('database is locked'));
      return sqlite.journal(account, seq, entry, limit);
    };
    const flaky = new Proxy(sqlite, {
      get: (target, name) => {
        if (name === 'journal') return journal;
        const value: unknown = Reflect.get(target, name);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }) as Ledger;
    const running = { request: 'r1', control: 'Charge', state: 'running', instance: 'gone', key: null, ref: 'lab_x' };
    await sqlite.journal('acct_lab_resetrace12345678', null, JSON.stringify(running), 500);
    const { app, history } = lab(flaky);
    expect(await app.recover?.()).toBe(1);
    expect(failures).toBe(-1);
    expect((await history()).entries.map((e) => e.state)).toEqual(['interrupted']);
  });
});
