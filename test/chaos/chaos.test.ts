/**
 * The chaos run (issue 6, item 1). For each store — SQLite (one shared file), PostgreSQL (an isolated schema),
 * Redis (an isolated prefix, ledger in a shared SQLite file) — three real server processes with clocks skewed
 * by up to a second between them, and clients that retry every logical operation with the same key after every
 * failure, while faults are injected from a seed:
 *
 * - per request: `Idem-Lab-Fault: drop-after-commit` (committed, answer never sent), `Idem-Lab-Delay-Ms` past
 *   the lease (renewal must keep it; a probe from another process after the lease would have lapsed must be
 *   refused), `Idem-Lab-Fail: 503` (retryable processor failure); racing duplicate clients; tampered retries;
 *   clients that give up after 3 s (a frozen process) and retry elsewhere;
 * - per process (the nemesis): kill -9 mid-request then restart, SIGSTOP past the lease then SIGCONT (a real
 *   zombie), and for PostgreSQL and Redis the store link cut or stalled through a fault proxy, then restored.
 *
 * Once the run quiesces, ./checker.ts judges the whole history against the ledger and the records, and the
 * figures are printed. `IDEM_CHAOS_SEED=<n>` reruns a seed's fault plan (timing still varies; the seed is
 * printed first, and with every violation); `IDEM_CHAOS_DUMP=<dir>` writes each store's whole history there as
 * JSON. Every violation is printed in full — the invariant, the seed, the store, and the history of its
 * operation (attempts, ledger rows, record, overlapping faults, the servers' log lines for its key) — and
 * written with the whole history to `test-results/chaos/<store>-seed<n>-<time>.json`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { deleteRedisPrefix, dropSchema } from '../stores/cleanup.js';
import {
  check,
  formatViolation,
  isAccepted,
  type Attempt,
  type HeaderFault,
  type LedgerRow,
  type Operation,
  type RecordRow,
  type Role,
} from './checker.js';
import {
  clusterOutput,
  random,
  startCluster,
  startNemesis,
  stopCluster,
  type FaultKind,
  type Slot,
} from './cluster.js';

const SEED = Number(process.env.IDEM_CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RESULTS = fileURLToPath(new URL('../../test-results/chaos/', import.meta.url));
const replayCommand = (store: string) =>
  `IDEM_CHAOS_SEED=${SEED} npx vitest run test/chaos/chaos.test.ts -t ${JSON.stringify(store)}`;
console.log(`chaos seed ${SEED} (replay its fault plan: ${replayCommand('SQLite')}, or PostgreSQL, or Redis)`);
const PROCESSES = 3;
const LEASE_MS = 3_000;
/** Clock skews, one per process: a second between the fastest and the slowest. */
const SKEWS = [-500, 0, 500];
const OPERATIONS = 90;
const ACCOUNTS = 3;
/** Operations start spread over this long, so the nemesis has time to act among them. */
const SPREAD_MS = 11_000;
const SLOW_MS = Math.round(LEASE_MS * 1.6);
const MAX_ATTEMPTS = 80;
const OP_DEADLINE_MS = 45_000;
/** A client gives up on an answer after this long (plus the delay it asked for) and retries with the same key. */
const CLIENT_TIMEOUT_MS = 3_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface StoreSetup {
  /** The store URL for process `index` (through its proxy when it has one). */
  url(index: number, proxy: FaultProxy | undefined): string;
  readonly env: Record<string, string>;
  readonly proxied: boolean;
  readonly kinds: readonly FaultKind[];
  ledger(accounts: readonly string[]): Promise<LedgerRow[]>;
  cleanup(): Promise<void>;
}

const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const redisUp = await serviceAvailable('Redis', REDIS_URL);

describe(`chaos: 3 processes per store, clients retrying, faults from seed ${SEED}`, () => {
  it('SQLite (one shared file): every invariant holds', async () => {
    const dir = tempDir('idem-chaos-sqlite-');
    await chaos('sqlite', 'SQLite', 1, {
      url: () => `sqlite:${join(dir.path, 'idem.db')}`,
      env: {},
      proxied: false,
      kinds: ['kill', 'pause'],
      ledger: async (accounts) => readSqliteLedger(join(dir.path, 'idem.db'), accounts),
      cleanup: async () => dir.remove(),
    });
  }, 90_000);

  it.skipIf(!postgresUp)(
    'PostgreSQL (one schema, ledger in the same transaction): every invariant holds',
    async () => {
      const schema = `idem_chaos_${randomBytes(5).toString('hex')}`;
      await chaos('postgres', 'PostgreSQL', 2, {
        url: (_, proxy) => {
          const url = new URL(proxy ? proxy.via(POSTGRES_URL) : POSTGRES_URL);
          url.searchParams.set('schema', schema);
          return url.toString();
        },
        env: {},
        proxied: true,
        kinds: ['kill', 'pause', 'cut', 'stall'],
        ledger: async (accounts) => {
          const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
          try {
            const { rows } = await pool.query(
              `SELECT id, account, amount, status FROM "${schema}".charges WHERE account = ANY($1)`,
              [accounts],
            );
            return (rows as Array<{ id: string; account: string; amount: number; status: string }>).map((r) => ({
              ...r,
              amount: Number(r.amount),
            }));
          } finally {
            await pool.end();
          }
        },
        cleanup: () => dropSchema(schema),
      });
    },
    90_000,
  );

  it.skipIf(!redisUp)(
    'Redis (one prefix, ledger keyed on the record id): every invariant holds',
    async () => {
      const prefix = `idem-chaos-${randomBytes(5).toString('hex')}:`;
      const dir = tempDir('idem-chaos-redis-');
      await chaos('redis', 'Redis', 3, {
        url: (_, proxy) => {
          const url = new URL(proxy ? proxy.via(REDIS_URL) : REDIS_URL);
          url.searchParams.set('prefix', prefix);
          return url.toString();
        },
        env: { IDEM_LEDGER: join(dir.path, 'ledger.db') },
        proxied: true,
        kinds: ['kill', 'pause', 'cut', 'stall'],
        ledger: async (accounts) => readSqliteLedger(join(dir.path, 'ledger.db'), accounts),
        cleanup: async () => {
          await deleteRedisPrefix(prefix);
          dir.remove();
        },
      });
    },
    90_000,
  );
});

function readSqliteLedger(path: string, accounts: readonly string[]): LedgerRow[] {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return db
      .prepare(
        `SELECT id, account, amount, status FROM charges WHERE account IN (${accounts.map(() => '?').join(', ')})`,
      )
      .all(...accounts) as LedgerRow[];
  } finally {
    db.close();
  }
}

async function chaos(name: string, title: string, storeNumber: number, setup: StoreSetup): Promise<void> {
  const rng = random(SEED * 7 + storeNumber);
  const picks = random(SEED * 13 + storeNumber); // which process each request goes to
  const skews = [...SKEWS].sort(() => rng() - 0.5);
  const proxies: Array<FaultProxy | undefined> = [];
  for (let i = 0; i < PROCESSES; i++) {
    proxies.push(setup.proxied ? await startFaultProxy(...target(name)) : undefined);
  }
  const tag = `${SEED.toString(36).padStart(7, '0')}${storeNumber}`;
  const apiKeys = Array.from({ length: ACCOUNTS }, (_, i) => `sk_lab_ch${tag}${i}`);
  const accounts = apiKeys.map((key) => `acct_lab_${key.slice('sk_lab_'.length)}`);
  const ops: Operation[] = Array.from({ length: OPERATIONS }, (_, index) => ({
    index,
    account: accounts[index % ACCOUNTS] as string,
    key: `chaos-${tag}-${index}-${randomBytes(4).toString('hex')}`,
    amount: 10_000 + index,
    declined: rng.chance(0.12),
  }));
  const attempts: Attempt[] = [];
  /** Probes run beside their operation's client; the run is quiesced only when they are done too. */
  const probes = new Set<Promise<unknown>>();
  /** Operations with slow work in flight, by process: operation index → when it was sent. */
  const slowOnSlot = new Map<number, Map<number, number>>();
  let slots: Slot[] = [];
  try {
    slots = await startCluster(
      PROCESSES,
      (i) => ({
        ...setup.env,
        IDEM_STORE: setup.url(i, proxies[i]),
        IDEM_LEASE_MS: String(LEASE_MS),
        IDEM_CLOCK_SKEW_MS: String(skews[i]),
      }),
      skews,
      proxies,
    );
    // Process 0 is spared by the nemesis: slow work sent there is judged on lease renewal alone.
    const nemesis = startNemesis(slots, rng, {
      kinds: setup.kinds,
      leaseMs: LEASE_MS,
      everyMs: [500, 900],
      spare: [0],
      // While a process is frozen with slow work in flight, an impatient duplicate keeps retrying the key
      // elsewhere: once the frozen lease lapses it takes over, and the frozen process wakes up a zombie.
      onFreeze: (slot) => {
        for (const index of slowOnSlot.get(slot.index)?.keys() ?? []) {
          const op = ops[index] as Operation;
          probes.add(sleep(LEASE_MS - 500).then(() => client(op, 'racer', undefined, slot.index)));
        }
      },
      // A freeze hunts slow work that has held its claim a while (frozen past the lease, it becomes a zombie);
      // a kill, any request in flight.
      prey: (slot, kind) =>
        kind === 'kill'
          ? slot.inFlight > 0
          : [...(slowOnSlot.get(slot.index)?.values() ?? [])].some((since) => Date.now() - since > 300),
    });
    const started = Date.now();
    // Faults start while operations do; the tail (retries after the last faults) runs in calm.
    const calm = setTimeout(() => nemesis.calm(), SPREAD_MS);
    await Promise.all(
      ops.map(async (op) => {
        await sleep(Math.round((op.index / OPERATIONS) * SPREAD_MS + rng() * 100));
        await operation(op, rng.chance(0.2));
      }),
    );
    await Promise.all(probes);
    clearTimeout(calm);
    await nemesis.stop();
    const { records, readAt } = await quiescedRecords(slots, accounts, apiKeys);
    const ledger = await setup.ledger(accounts);
    // What the servers saw, from their event logs (one JSON line per idempotency event, the key as its hash).
    const logs = clusterOutput(slots);
    const logLines = logs.split('\n');
    const logsFor = (key: string) => {
      const hash = createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 16); // demo/log.ts keyHash
      return logLines.filter((line) => line.includes(hash));
    };
    const verdict = check({ ops, attempts, ledger, records, faults: nemesis.faults, readAt, skews, logsFor });
    const dump = () => ({
      seed: SEED,
      store: name,
      replay: replayCommand(title),
      ops,
      attempts,
      faults: nemesis.faults,
      ledger,
      records: [...records],
      verdict,
      logs,
    });
    if (process.env.IDEM_CHAOS_DUMP) {
      writeFileSync(join(process.env.IDEM_CHAOS_DUMP, `chaos-${name}.json`), JSON.stringify(dump(), null, 1));
    }
    if (verdict.details.length > 0) {
      mkdirSync(RESULTS, { recursive: true });
      const file = join(RESULTS, `${name}-seed${SEED}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
      writeFileSync(file, JSON.stringify(dump(), null, 1));
      console.error(
        `\nCHAOS VIOLATIONS on ${name}, seed ${SEED}: ${verdict.details.length}\n` +
          `  replay the fault plan: ${replayCommand(title)}\n  whole history: ${file}\n\n` +
          verdict.details.map((v) => `${formatViolation(v)}\n    (store ${name}, seed ${SEED})`).join('\n\n'),
      );
    }
    const events = (name: string) => logs.split('"event":"' + name + '"').length - 1;
    Object.assign(verdict.figures, {
      'server log: takeovers or retryable re-runs': events('takeover'),
      'server log: leases lost while the work ran': events('lease_lost'),
      'server log: late (zombie) writes refused': events('stale_write_refused'),
    });
    console.log(
      `\nchaos ${name} (seed ${SEED}, ${((Date.now() - started) / 1000).toFixed(1)} s of traffic)\n` +
        Object.entries(verdict.figures)
          .map(([k, v]) => `  ${k.padEnd(66)} ${v}`)
          .join('\n') +
        (verdict.violations.length > 0
          ? `\n  VIOLATIONS (in full above):\n    ${verdict.violations.join('\n    ')}`
          : ''),
    );
    expect(verdict.violations).toEqual([]);
    expect(verdict.figures['charges in the ledger']).toBe(OPERATIONS);
  } finally {
    await stopCluster(slots);
    for (const proxy of proxies) await proxy?.close();
    await setup.cleanup();
  }

  /** One logical operation: its client (and maybe a racing duplicate) retry until an answer is accepted. */
  async function operation(op: Operation, raced: boolean): Promise<void> {
    const roll = rng();
    const firstFault: HeaderFault | undefined =
      roll < 0.15 ? 'drop-after-commit' : roll < 0.28 ? 'slow' : roll < 0.36 ? 'processor-fail' : undefined;
    const clients = [client(op, 'client', firstFault)];
    if (raced) clients.push(sleep(rng.int(0, 150)).then(() => client(op, 'racer', undefined)));
    const answers = await Promise.all(clients);
    const accepted = answers.find((a) => a && isAccepted(a));
    if (!accepted) return;
    if (rng.chance(0.2)) await attempt(op, 'replay', [], op.amount);
    if (rng.chance(0.1)) await attempt(op, 'tamper', [], op.amount + 50_000_000);
  }

  async function client(
    op: Operation,
    role: Role,
    firstFault: HeaderFault | undefined,
    avoid?: number,
  ): Promise<Attempt | undefined> {
    const deadline = Date.now() + OP_DEADLINE_MS;
    for (let n = 0; n < MAX_ATTEMPTS && Date.now() < deadline; n++) {
      const faults: HeaderFault[] =
        n === 0 && firstFault ? [firstFault] : rng.chance(0.04) ? ['drop-after-commit'] : [];
      const probe = faults.includes('slow')
        ? (slot: number) => {
            const probing = sleep(LEASE_MS + 700).then(() => attempt(op, 'probe', [], op.amount, slot));
            probes.add(probing);
          }
        : undefined;
      // A third of the slow work goes to the spared process (judged on renewal), the rest anywhere (prey).
      const prefer = faults.includes('slow') && op.index % 3 === 0 ? 0 : undefined;
      const a = await attempt(op, role, faults, op.amount, avoid, probe, prefer);
      if (isAccepted(a)) return a;
      if (typeof a.outcome === 'number' && a.outcome >= 400 && a.outcome < 500 && a.outcome !== 409) return a; // the checker reports it
      const retryAfter = a.outcome === 409 ? 400 : 150;
      await sleep(Math.round(retryAfter * (0.5 + rng())));
    }
    return undefined;
  }

  /**
   * One request to a live process. `avoid`: prefer another process than this one (probes). `onSlot`: told
   * which process took the request, as soon as it is sent. `prefer`: this process if it is live (slow work
   * goes to the spared process, so its lease is judged on renewal alone).
   */
  async function attempt(
    op: Operation,
    role: Role,
    faults: HeaderFault[],
    amount: number,
    avoid?: number,
    onSlot?: (slot: number) => void,
    prefer?: number,
  ): Promise<Attempt> {
    const live = slots.filter((s) => s.state !== 'down' && s.process);
    const others = live.filter((s) => s.index !== avoid);
    const preferred = live.find((s) => s.index === prefer);
    const slot = preferred ?? picks.pick(others.length > 0 ? others : live.length > 0 ? live : slots);
    const process = slot.process;
    const headers: Record<string, string> = {
      authorization: `Bearer ${apiKeyOf(op)}`,
      'content-type': 'application/json',
      'idempotency-key': op.key,
    };
    if (faults.includes('drop-after-commit')) headers['idem-lab-fault'] = 'drop-after-commit';
    if (faults.includes('slow')) headers['idem-lab-delay-ms'] = String(SLOW_MS);
    if (faults.includes('processor-fail')) headers['idem-lab-fail'] = '503';
    const start = Date.now();
    const slow = faults.includes('slow');
    slot.inFlight++;
    if (slow)
      slowOnSlot.set(slot.index, (slowOnSlot.get(slot.index) ?? new Map<number, number>()).set(op.index, start));
    onSlot?.(slot.index);
    let outcome: Attempt['outcome'] = 'network';
    let replayed = false;
    let problem: string | null = null;
    let body = '';
    try {
      if (!process) throw new Error('no process');
      const response = await fetch(`${process.url}/v1/charges`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ amount, currency: 'usd', source: op.declined ? 'tok_chargeDeclined' : 'tok_visa' }),
        signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS + (slow ? SLOW_MS : 0)),
      });
      body = await response.text();
      outcome = response.status;
      replayed = response.headers.get('idempotent-replayed') === 'true';
      if (response.headers.get('content-type') === 'application/problem+json') {
        problem = ((JSON.parse(body) as { type?: string }).type ?? '').replace('urn:idem:problem:', '');
      }
    } catch (error) {
      outcome = (error as Error).name === 'TimeoutError' ? 'timeout' : 'network';
    } finally {
      if (slot.process === process) slot.inFlight = Math.max(0, slot.inFlight - 1);
      if (slow) slowOnSlot.get(slot.index)?.delete(op.index);
    }
    const a: Attempt = {
      op: op.index,
      role,
      slot: slot.index,
      faults,
      start,
      end: Date.now(),
      outcome,
      replayed,
      problem,
      body,
    };
    attempts.push(a);
    return a;
  }

  function apiKeyOf(op: Operation): string {
    return apiKeys[accounts.indexOf(op.account)] as string;
  }
}

function target(store: string): [string, number] {
  const url = new URL(store === 'postgres' ? POSTGRES_URL : REDIS_URL);
  return [url.hostname, Number(url.port || (store === 'postgres' ? 5432 : 6379))];
}

/**
 * Every account's records once the run has quiesced, read again until none is `in_progress` (work a stall held
 * completes once restore delivers its bytes) or until a lease and a second have passed: the last read is returned,
 * and what is still in progress then is the checker's to report.
 */
async function quiescedRecords(
  slots: readonly Slot[],
  accounts: readonly string[],
  apiKeys: readonly string[],
): Promise<{ records: Map<string, RecordRow[]>; readAt: number }> {
  const deadline = Date.now() + LEASE_MS + 1_000;
  return waitFor(
    'the records read once none is in progress, or at the deadline',
    async () => {
      const readAt = Date.now();
      const records = new Map<string, RecordRow[]>();
      for (const [i, account] of accounts.entries())
        records.set(account, await readRecords(slots, apiKeys[i] as string));
      const settled = [...records.values()].every((rows) => rows.every((row) => row.status !== 'in_progress'));
      return (settled || readAt >= deadline) && { records, readAt };
    },
    { timeoutMs: LEASE_MS + 30_000, everyMs: 100 },
  );
}

/** An account's records, read through any process that answers (retried: the nemesis has stopped, but be patient). */
function readRecords(slots: readonly Slot[], apiKey: string): Promise<RecordRow[]> {
  return waitFor(
    'a process to answer GET /v1/idempotency_records',
    async () => {
      for (const slot of slots) {
        if (!slot.process || slot.state === 'down') continue;
        try {
          const response = await fetch(`${slot.process.url}/v1/idempotency_records`, {
            headers: { authorization: `Bearer ${apiKey}` },
            signal: AbortSignal.timeout(5_000),
          });
          if (response.status === 200) return ((await response.json()) as { data: RecordRow[] }).data;
        } catch {
          // try the next process
        }
      }
      return undefined;
    },
    { timeoutMs: 20_000, everyMs: 250 },
  );
}
