/**
 * @module The demo server's configuration: environment variables, overridden by the same options as CLI flags.
 */
import { parseArgs } from 'node:util';
import { isIdempotencyError } from 'idem';

export interface DemoConfig {
  readonly port: number;
  readonly host: string;
  /** `sqlite:<path>` (default), `memory:`, and the production stores' URLs. */
  readonly store: string;
  /** Where charges live when the store is not a SQL database of its own: an SQLite path. */
  readonly ledger: string;
  readonly ttlMs: number;
  readonly leaseMs: number;
  /** Finished records kept in this process for hot replays (the engine's `cacheSize`). 0 (the default) is off. */
  readonly cacheSize: number;
  /** Lab fault headers honoured (`IDEM_LAB=1`). Never on unless asked for. */
  readonly lab: boolean;
  /** API key → account. */
  readonly apiKeys: ReadonlyMap<string, string>;
  readonly mismatchStatus: 400 | 422;
  /**
   * Lab and tests only (`IDEM_LAB=1`): offsets this process's engine clock by N ms, so several processes on one
   * store can be run with skewed clocks (the chaos suite). 0 (the default) is the wall clock.
   */
  readonly clockSkewMs: number;
}

export const DEFAULTS = {
  port: 4000,
  host: '127.0.0.1',
  store: 'sqlite:./.idem/idem.db',
  ledger: './.idem/ledger.db',
  ttlMs: 86_400_000,
  leaseMs: 10_000,
  apiKeys: 'sk_test_alice:acct_alice,sk_test_bob:acct_bob',
} as const;

/** Flag name → environment variable. `idem serve --help` prints this table. */
export const OPTIONS = {
  port: { env: 'PORT', help: `port to listen on (default ${DEFAULTS.port}; 0 picks a free one)` },
  host: { env: 'HOST', help: `address to bind (default ${DEFAULTS.host})` },
  store: { env: 'IDEM_STORE', help: `records store URL (default ${DEFAULTS.store}; also memory:)` },
  ledger: { env: 'IDEM_LEDGER', help: `SQLite file for charges when the store is not SQL (default ${DEFAULTS.ledger})` },
  'ttl-ms': { env: 'IDEM_TTL_MS', help: 'how long records live, ms (default 86400000 = 24 h)' },
  'lease-ms': { env: 'IDEM_LEASE_MS', help: `how long a claim holds a key before takeover, ms (default ${DEFAULTS.leaseMs})` },
  'cache-size': { env: 'IDEM_CACHE_SIZE', help: 'finished records kept in process: hot replays cost no store trip (default 0 = off)' },
  lab: { env: 'IDEM_LAB', help: 'honour the lab fault headers (1 to enable; `npm start` does)' },
  'api-keys': { env: 'IDEM_API_KEYS', help: 'comma-separated apikey:account pairs' },
  'mismatch-status': { env: 'IDEM_MISMATCH_STATUS', help: 'status for a reused key with another payload: 400 or 422' },
  'clock-skew-ms': { env: 'IDEM_CLOCK_SKEW_MS', help: 'lab/tests only: offset the engine clock by N ms (-60000…60000; needs IDEM_LAB=1)' },
} as const;

/** A configuration error: the message names the variable or flag. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * The one-line message for a bad configuration (exit 2, no stack), or `undefined` for any other error: a
 * {@link ConfigError}, a flag `parseArgs` refused, or an option the library itself refused (`CONFIG_INVALID`).
 *
 * @example
 * const message = badConfig(error); if (message) { console.error(`idem serve: ${message}`); process.exitCode = 2 }
 */
export function badConfig(error: unknown): string | undefined {
  if (error instanceof ConfigError) return error.message;
  if ((error as { code?: unknown }).code?.toString().startsWith('ERR_PARSE_ARGS')) return (error as Error).message;
  if (isIdempotencyError(error, 'CONFIG_INVALID')) return error.message;
  return undefined;
}

/**
 * Reads the configuration from `env`, then `argv` flags (which win).
 *
 * @example
 * const config = loadConfig(process.env, process.argv.slice(2))
 */
export function loadConfig(env: NodeJS.ProcessEnv, argv: readonly string[] = []): DemoConfig {
  const { values } = parseArgs({
    args: [...argv],
    options: Object.fromEntries(Object.keys(OPTIONS).map((name) => [name, { type: 'string' as const }])),
    strict: true,
    allowPositionals: false,
  });
  const get = (name: keyof typeof OPTIONS): string | undefined => {
    const flag = values[name];
    return typeof flag === 'string' ? flag : env[OPTIONS[name].env];
  };
  const integer = (name: keyof typeof OPTIONS, fallback: number, min: number): number => {
    const raw = get(name);
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min) {
      throw new ConfigError(`${OPTIONS[name].env} (--${name}) must be an integer ≥ ${min}, got "${raw}".`);
    }
    return value;
  };
  const port = integer('port', DEFAULTS.port, 0);
  if (port > 65_535) throw new ConfigError(`PORT (--port) must be at most 65535, got ${port}.`);
  const mismatch = integer('mismatch-status', 400, 400);
  if (mismatch !== 400 && mismatch !== 422) {
    throw new ConfigError(`IDEM_MISMATCH_STATUS (--mismatch-status) must be 400 or 422, got ${mismatch}.`);
  }
  const lab = get('lab') ?? '';
  if (!['', '0', '1', 'true', 'false'].includes(lab)) throw new ConfigError(`IDEM_LAB (--lab) must be 1 or 0, got "${lab}".`);
  const skew = get('clock-skew-ms') ?? '';
  const clockSkewMs = skew === '' ? 0 : Number(skew);
  if (!Number.isInteger(clockSkewMs) || Math.abs(clockSkewMs) > 60_000) {
    throw new ConfigError(`IDEM_CLOCK_SKEW_MS (--clock-skew-ms) must be an integer from -60000 to 60000, got "${skew}".`);
  }
  if (clockSkewMs !== 0 && !(lab === '1' || lab === 'true')) {
    throw new ConfigError('IDEM_CLOCK_SKEW_MS (--clock-skew-ms) is a lab setting: it needs IDEM_LAB=1.');
  }
  const apiKeys = new Map<string, string>();
  for (const pair of (get('api-keys') || DEFAULTS.apiKeys).split(',')) {
    const [apiKey, account, ...rest] = pair.trim().split(':');
    if (!apiKey || !account || rest.length > 0) {
      throw new ConfigError(`IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas, got "${pair}".`);
    }
    apiKeys.set(apiKey, account);
  }
  const ttlMs = integer('ttl-ms', DEFAULTS.ttlMs, 1);
  const leaseMs = integer('lease-ms', DEFAULTS.leaseMs, 1);
  if (ttlMs <= leaseMs) {
    throw new ConfigError(`IDEM_TTL_MS (--ttl-ms) must be greater than IDEM_LEASE_MS (--lease-ms, ${leaseMs}), got ${ttlMs}: a record cannot expire while its claim holds it.`);
  }
  return {
    port,
    host: get('host') || DEFAULTS.host,
    store: get('store') || DEFAULTS.store,
    ledger: ledgerPath(get('ledger') || DEFAULTS.ledger),
    ttlMs,
    leaseMs,
    cacheSize: integer('cache-size', 0, 0),
    lab: lab === '1' || lab === 'true',
    apiKeys,
    mismatchStatus: mismatch,
    clockSkewMs,
  };
}

/** `IDEM_LEDGER` is a SQLite path; `sqlite:<path>` (the store's form) is accepted too, any other scheme refused. */
function ledgerPath(raw: string): string {
  const path = raw.startsWith('sqlite:') ? raw.slice('sqlite:'.length) : raw;
  if (!path || /^[A-Za-z][A-Za-z0-9+.-]+:/.test(path)) {
    throw new ConfigError(`IDEM_LEDGER (--ledger) must be a SQLite file path (or sqlite:<path>, or :memory:), got "${raw}".`);
  }
  return path;
}
