/**
 * The stores the demo runs on, defined once for every suite that runs the demo over each of them (outage,
 * multi-process, round trips): the environment a demo process needs (with the store's address through a fault
 * proxy, when one is given), a direct view of the records and the ledger — a store and a ledger of the test's own
 * on the same backend, never through a server or the proxy — and the clean-up.
 */
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { recordPk, type IdempotencyRecord } from 'idem';
import { loadConfig } from '../../apps/demo/src/config.js';
import { startLocalDynamo } from '../../apps/demo/src/local-dynamo.js';
import { openBackend, type Backend } from '../../apps/demo/src/stores.js';
import { tempDir } from '../harness.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';
import { deleteRedisPrefix, dropSchema } from './cleanup.js';

/** The demo's ledger, read directly: acct_alice's charges. */
export interface LedgerView {
  /** Ids of acct_alice's succeeded charges, oldest first. */
  charges(): Promise<string[]>;
  /** Ids of the charges made under record `id` (the ledger's `idempotency_ref`, unique). */
  chargesFor(id: string): Promise<string[]>;
}

/** A backend opened for a test: what the demo processes need, a direct view of it, and its clean-up. */
export interface Opened extends LedgerView {
  /** The demo's environment: `IDEM_STORE` (through the proxy, when one was given) and `IDEM_LEDGER` if apart. */
  readonly env: Record<string, string>;
  /** The same environment with the store's own address: for a process that must not go through the proxy. */
  readonly direct: Record<string, string>;
  /** acct_alice's record for `key` as the store holds it, read by a store of the test's own. */
  record(key: string): Promise<IdempotencyRecord | null>;
  cleanup(): Promise<void>;
}

export interface Backing {
  readonly name: string;
  readonly available: boolean;
  /** The service's URL, for a fault proxy in front of it; undefined for a store in a file or in this process. */
  readonly target: string | undefined;
  /** The ledger shares the store's database: a charge commits in the completion's transaction. */
  readonly sharedLedger: boolean;
  /** Opens a fresh, isolated backend; `via` rewrites the store's URL (a fault proxy's `via`). */
  open(via?: (url: string) => string): Promise<Opened>;
}

const suffix = () => randomBytes(5).toString('hex');
const same = (url: string) => url;
const OWN_CHARGES = `SELECT id FROM charges WHERE account = 'acct_alice' AND status = 'succeeded'`;

/** The demo's SQLite ledger at `path`, opened read-only for each read (the servers hold it, in WAL). */
export function sqliteLedger(path: string): LedgerView {
  const ids = async (sql: string, ...params: unknown[]): Promise<string[]> => {
    const ledger = new Database(path, { readonly: true });
    try {
      return (ledger.prepare(sql).all(...params) as Array<{ id: string }>).map((row) => row.id);
    } finally {
      ledger.close();
    }
  };
  return {
    charges: () => ids(`${OWN_CHARGES} ORDER BY rowid`),
    chargesFor: (id) => ids('SELECT id FROM charges WHERE idempotency_ref = ?', id),
  };
}

/** The demo's ledger in PostgreSQL schema `schema`, beside the records. */
function postgresLedger(pool: pg.Pool, schema: string): LedgerView {
  const ids = async (sql: string, ...params: unknown[]): Promise<string[]> =>
    (await pool.query<{ id: string }>(sql, params)).rows.map((row) => row.id);
  return {
    charges: () => ids(`${OWN_CHARGES.replace('charges', `"${schema}".charges`)} ORDER BY seq`),
    chargesFor: (id) => ids(`SELECT id FROM "${schema}".charges WHERE idempotency_ref = $1`, id),
  };
}

/**
 * An {@link Opened} for a demo environment `env` whose direct form is `direct`: records are read through the
 * demo's own `openBackend` on `direct` (opened at the first read, closed before `cleanup`).
 */
export function opened(
  env: Record<string, string>,
  direct: Record<string, string>,
  ledger: LedgerView,
  cleanup: () => Promise<void>,
): Opened {
  let reader: Promise<Backend> | undefined;
  return {
    env,
    direct,
    charges: () => ledger.charges(),
    chargesFor: (id) => ledger.chargesFor(id),
    record: async (key) => (await (reader ??= openBackend(loadConfig(direct)))).store.get(recordPk('acct_alice', key)),
    cleanup: async () => {
      await (await reader)?.close();
      await cleanup();
    },
  };
}

/** `url` with search parameter `name` set. */
const withParam = (url: string, name: string, value: string): string => {
  const parsed = new URL(url);
  parsed.searchParams.set(name, value);
  return parsed.toString();
};

export const SQLITE: Backing = {
  name: 'SQLite file',
  available: true,
  target: undefined,
  sharedLedger: true,
  open: async () => {
    const dir = tempDir();
    const env = { IDEM_STORE: `sqlite:${dir.path}/idem.db` };
    return opened(env, env, sqliteLedger(`${dir.path}/idem.db`), async () => dir.remove());
  },
};

export const POSTGRES: Backing = {
  name: 'PostgreSQL',
  available: await serviceAvailable('PostgreSQL', POSTGRES_URL),
  target: POSTGRES_URL,
  sharedLedger: true,
  open: async (via = same) => {
    const schema = `idem_e2e_${suffix()}`;
    const env = (url: string) => ({ IDEM_STORE: withParam(url, 'schema', schema) });
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    return opened(env(via(POSTGRES_URL)), env(POSTGRES_URL), postgresLedger(pool, schema), async () => {
      await pool.end();
      await dropSchema(schema);
    });
  },
};

export const REDIS: Backing = {
  name: 'Redis',
  available: await serviceAvailable('Redis', REDIS_URL),
  target: REDIS_URL,
  sharedLedger: false,
  open: async (via = same) => {
    const prefix = `idem_e2e_${suffix()}:`;
    const dir = tempDir();
    const ledger = `${dir.path}/ledger.db`;
    const env = (url: string) => ({ IDEM_STORE: withParam(url, 'prefix', prefix), IDEM_LEDGER: ledger });
    return opened(env(via(REDIS_URL)), env(REDIS_URL), sqliteLedger(ledger), async () => {
      await deleteRedisPrefix(prefix);
      dir.remove();
    });
  },
};

export const MYSQL: Backing = {
  name: 'MySQL',
  available: await serviceAvailable('MySQL', MYSQL_URL),
  target: MYSQL_URL,
  sharedLedger: false,
  open: async (via = same) => {
    const database = `idem_e2e_${suffix()}`;
    const admin = await mysql.createConnection({ uri: MYSQL_URL });
    await admin.query(`CREATE DATABASE \`${database}\``);
    const dir = tempDir();
    const ledger = `${dir.path}/ledger.db`;
    const env = (url: string) => {
      const parsed = new URL(url);
      parsed.pathname = `/${database}`;
      return { IDEM_STORE: parsed.toString(), IDEM_LEDGER: ledger };
    };
    return opened(env(via(MYSQL_URL)), env(MYSQL_URL), sqliteLedger(ledger), async () => {
      await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await admin.end();
      dir.remove();
    });
  },
};

export const DYNAMODB: Backing = {
  name: 'DynamoDB (one dynalite for all)',
  available: true,
  target: undefined,
  sharedLedger: false,
  open: async () => {
    const local = await startLocalDynamo();
    const dir = tempDir();
    const ledger = `${dir.path}/ledger.db`;
    const { port } = new URL(local.endpoint);
    const env = { IDEM_STORE: `dynamodb://127.0.0.1:${port}?table=idem_e2e_${suffix()}`, IDEM_LEDGER: ledger };
    return opened(env, env, sqliteLedger(ledger), async () => {
      await local.close();
      dir.remove();
    });
  },
};
