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
import { openBackend, type Backend } from '../../apps/demo/src/stores.js';
import { startChild } from '../fixtures/child.js';
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
function sqliteLedger(path: string): LedgerView {
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

/** The demo's ledger apart from its store: a SQLite file of the test's own (`IDEM_LEDGER`), removed by `remove`. */
export function ledgerApart(): { readonly env: { IDEM_LEDGER: string }; readonly view: LedgerView; remove(): void } {
  const dir = tempDir();
  const path = `${dir.path}/ledger.db`;
  return { env: { IDEM_LEDGER: path }, view: sqliteLedger(path), remove: dir.remove };
}

/**
 * A test's own room on a store: the demo's environment for an address of the service (`''` for none), its ledger,
 * the clean-up.
 */
interface Room {
  readonly env: (address: string) => Record<string, string>;
  readonly ledger: LedgerView;
  readonly cleanup: () => Promise<void>;
}

/**
 * A store on the service at `url` (undefined: in a file, or a process the test starts): each `open` makes a room
 * of its own there (`room`: a file, a schema, a prefix, a database); the demo reaches it through `via`, the direct
 * view at `url` itself.
 */
async function backing(
  name: string,
  url: string | undefined,
  sharedLedger: boolean,
  room: () => Promise<Room>,
): Promise<Backing> {
  return {
    name,
    available: url === undefined || (await serviceAvailable(name, url)),
    target: url,
    sharedLedger,
    open: async (via = same) => {
      const { env, ledger, cleanup } = await room();
      return url === undefined
        ? opened(env(''), env(''), ledger, cleanup)
        : opened(env(via(url)), env(url), ledger, cleanup);
    },
  };
}

export const SQLITE = await backing('SQLite file', undefined, true, async () => {
  const dir = tempDir();
  return {
    env: () => ({ IDEM_STORE: `sqlite:${dir.path}/idem.db` }),
    ledger: sqliteLedger(`${dir.path}/idem.db`),
    cleanup: async () => dir.remove(),
  };
});

export const POSTGRES = await backing('PostgreSQL', POSTGRES_URL, true, async () => {
  const schema = `idem_e2e_${suffix()}`;
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
  return {
    env: (url) => ({ IDEM_STORE: withParam(url, 'schema', schema) }),
    ledger: postgresLedger(pool, schema),
    cleanup: async () => {
      await pool.end();
      await dropSchema(schema);
    },
  };
});

export const REDIS = await backing('Redis', REDIS_URL, false, async () => {
  const prefix = `idem_e2e_${suffix()}:`;
  const ledger = ledgerApart();
  return {
    env: (url) => ({ IDEM_STORE: withParam(url, 'prefix', prefix), ...ledger.env }),
    ledger: ledger.view,
    cleanup: async () => {
      await deleteRedisPrefix(prefix);
      ledger.remove();
    },
  };
});

export const MYSQL = await backing('MySQL', MYSQL_URL, false, async () => {
  const database = `idem_e2e_${suffix()}`;
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  await admin.query(`CREATE DATABASE \`${database}\``);
  const ledger = ledgerApart();
  return {
    env: (url) => {
      const parsed = new URL(url);
      parsed.pathname = `/${database}`;
      return { IDEM_STORE: parsed.toString(), ...ledger.env };
    },
    ledger: ledger.view,
    cleanup: async () => {
      await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await admin.end();
      ledger.remove();
    },
  };
});

export const DYNAMODB = await backing('DynamoDB (one dynalite process for all)', undefined, false, async () => {
  const dynalite = startChild('dynalite-child.ts', []);
  const { port } = new URL(await dynalite.first);
  const ledger = ledgerApart();
  const table = `idem_e2e_${suffix()}`;
  return {
    env: () => ({ IDEM_STORE: `dynamodb://127.0.0.1:${port}?table=${table}`, ...ledger.env }),
    ledger: ledger.view,
    cleanup: async () => {
      dynalite.tell('', true);
      await dynalite.done;
      ledger.remove();
    },
  };
});
