/**
 * @module The demo server's configuration: environment variables, overridden by the same options as CLI flags.
 */
import { parseArgs } from 'node:util';
import { isIdempotencyError, redactUrl } from 'idem';
import { shareOf } from './connections.js';

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
  /** Lab mode may listen on an address that is not loopback (`IDEM_LAB_ALLOW_REMOTE=1`). Off: `HOST` must be loopback. */
  readonly labAllowRemote: boolean;
  /**
   * API key → account. Unset, lab mode gets the well-known `sk_test_alice`/`sk_test_bob`; outside lab mode it is
   * empty, and `checkServable` refuses to start.
   */
  readonly apiKeys: ReadonlyMap<string, string>;
  /**
   * `Host` header names served (`IDEM_ALLOWED_HOSTS`), lowercase: `name` (any port) or `name:port`; `['*']` is any
   * Host. Undefined: the loopback names only (`LOOPBACK_HOSTS`, and `host` itself when it is a loopback address).
   */
  readonly allowedHosts: readonly string[] | undefined;
  /** Connections held at once (`server.maxConnections`); beyond it a new connection is closed at once. */
  readonly maxConnections: number;
  /**
   * Connections one remote address (an IPv6 /64) is sure to get, even at the cap; above it, it borrows free slots up
   * to half of `maxConnections`, and beyond that its new connection is closed at once.
   */
  readonly maxConnectionsPerAddress: number;
  /** A connection that has sent no byte this long is closed unanswered (before the headers timeout). */
  readonly firstByteTimeoutMs: number;
  /** Time to receive a request's headers (`server.headersTimeout`); then 408 and the connection is closed. */
  readonly headersTimeoutMs: number;
  /** Time to receive a whole request, headers and body (`server.requestTimeout`); then 408. */
  readonly requestTimeoutMs: number;
  /** `/metrics` is served on this port only (0: a free one); undefined (the default): no metrics listener. */
  readonly metricsPort: number | undefined;
  /** The address the metrics listener binds. */
  readonly metricsHost: string;
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
  /** The well-known test keys: lab mode only. */
  labApiKeys: 'sk_test_alice:acct_alice,sk_test_bob:acct_bob',
  maxConnections: 256,
  /** A client sends its request as soon as it connects; 2 s is many round trips, even on a bad mobile link. */
  firstByteTimeoutMs: 2_000,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  metricsHost: '127.0.0.1',
} as const;

/** The `Host` names served unless `IDEM_ALLOWED_HOSTS` says otherwise: a browser only sends these to a loopback server. */
export const LOOPBACK_HOSTS: readonly string[] = ['localhost', '127.0.0.1', '[::1]'];

/** Flag name → environment variable. `idem serve --help` prints this table. */
export const OPTIONS = {
  port: { env: 'PORT', help: `port to listen on (default ${DEFAULTS.port}; 0 picks a free one)` },
  host: { env: 'HOST', help: `address to bind (default ${DEFAULTS.host})` },
  store: { env: 'IDEM_STORE', help: `records store URL (default ${DEFAULTS.store}; also memory:)` },
  ledger: {
    env: 'IDEM_LEDGER',
    help: `SQLite file for charges when the store is not SQL (default ${DEFAULTS.ledger})`,
  },
  'ttl-ms': { env: 'IDEM_TTL_MS', help: 'how long records live, ms (default 86400000 = 24 h)' },
  'lease-ms': {
    env: 'IDEM_LEASE_MS',
    help: `how long a claim holds a key before takeover, ms (default ${DEFAULTS.leaseMs})`,
  },
  'cache-size': {
    env: 'IDEM_CACHE_SIZE',
    help: 'finished records kept in process: hot replays cost no store trip (default 0 = off)',
  },
  lab: { env: 'IDEM_LAB', help: 'honour the lab fault headers and sk_lab_ keys (1 to enable; `npm start` does)' },
  'lab-allow-remote': {
    env: 'IDEM_LAB_ALLOW_REMOTE',
    help: 'let lab mode listen on a HOST that is not loopback (1 to allow; default 0)',
  },
  'api-keys': { env: 'IDEM_API_KEYS', help: 'comma-separated apikey:account pairs (required outside lab mode)' },
  'allowed-hosts': {
    env: 'IDEM_ALLOWED_HOSTS',
    help: 'Host header names served, comma-separated, name or name:port; * for any (default loopback names)',
  },
  'max-connections': {
    env: 'IDEM_MAX_CONNECTIONS',
    help: `connections held at once; more are closed at once (default ${DEFAULTS.maxConnections})`,
  },
  'max-connections-per-address': {
    env: 'IDEM_MAX_CONNECTIONS_PER_ADDRESS',
    help: 'connections one address (IPv6: one /64) is sure to get; it borrows more up to half the cap (default an eighth of IDEM_MAX_CONNECTIONS, at least 16)',
  },
  'first-byte-timeout-ms': {
    env: 'IDEM_FIRST_BYTE_TIMEOUT_MS',
    help: `close a connection that sent nothing after this, ms (default ${DEFAULTS.firstByteTimeoutMs})`,
  },
  'headers-timeout-ms': {
    env: 'IDEM_HEADERS_TIMEOUT_MS',
    help: `time to receive a request's headers, ms (default ${DEFAULTS.headersTimeoutMs})`,
  },
  'request-timeout-ms': {
    env: 'IDEM_REQUEST_TIMEOUT_MS',
    help: `time to receive a whole request, ms (default ${DEFAULTS.requestTimeoutMs})`,
  },
  'metrics-port': {
    env: 'IDEM_METRICS_PORT',
    help: 'serve /metrics on this port only (default: off; 0 picks a free one)',
  },
  'metrics-host': {
    env: 'IDEM_METRICS_HOST',
    help: `address the metrics port binds (default ${DEFAULTS.metricsHost})`,
  },
  'mismatch-status': { env: 'IDEM_MISMATCH_STATUS', help: 'status for a reused key with another payload: 400 or 422' },
  'clock-skew-ms': {
    env: 'IDEM_CLOCK_SKEW_MS',
    help: 'lab/tests only: offset the engine clock by N ms (-60000…60000; needs IDEM_LAB=1)',
  },
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
  const flag = (name: 'lab' | 'lab-allow-remote'): boolean => {
    const raw = get(name) ?? '';
    if (!['', '0', '1', 'true', 'false'].includes(raw))
      throw new ConfigError(`${OPTIONS[name].env} (--${name}) must be 1 or 0, got "${raw}".`);
    return raw === '1' || raw === 'true';
  };
  const lab = flag('lab');
  const skew = get('clock-skew-ms') ?? '';
  const clockSkewMs = skew === '' ? 0 : Number(skew);
  if (!Number.isInteger(clockSkewMs) || Math.abs(clockSkewMs) > 60_000) {
    throw new ConfigError(
      `IDEM_CLOCK_SKEW_MS (--clock-skew-ms) must be an integer from -60000 to 60000, got "${skew}".`,
    );
  }
  if (clockSkewMs !== 0 && !lab) {
    throw new ConfigError('IDEM_CLOCK_SKEW_MS (--clock-skew-ms) is a lab setting: it needs IDEM_LAB=1.');
  }
  const apiKeys = parseApiKeys(get('api-keys') || (lab ? DEFAULTS.labApiKeys : ''));
  const ttlMs = integer('ttl-ms', DEFAULTS.ttlMs, 1);
  const leaseMs = integer('lease-ms', DEFAULTS.leaseMs, 1);
  if (ttlMs <= leaseMs) {
    throw new ConfigError(
      `IDEM_TTL_MS (--ttl-ms) must be greater than IDEM_LEASE_MS (--lease-ms, ${leaseMs}), got ${ttlMs}: a record cannot expire while its claim holds it.`,
    );
  }
  const headersTimeoutMs = integer('headers-timeout-ms', DEFAULTS.headersTimeoutMs, 1);
  const requestTimeoutMs = integer('request-timeout-ms', DEFAULTS.requestTimeoutMs, 1);
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new ConfigError(
      `IDEM_HEADERS_TIMEOUT_MS (--headers-timeout-ms) must not exceed IDEM_REQUEST_TIMEOUT_MS (${requestTimeoutMs}), got ${headersTimeoutMs}.`,
    );
  }
  const maxConnections = integer('max-connections', DEFAULTS.maxConnections, 1);
  const maxConnectionsPerAddress = integer('max-connections-per-address', shareOf(maxConnections), 1);
  if (maxConnectionsPerAddress > maxConnections) {
    throw new ConfigError(
      `IDEM_MAX_CONNECTIONS_PER_ADDRESS (--max-connections-per-address) must not exceed IDEM_MAX_CONNECTIONS (${maxConnections}), got ${maxConnectionsPerAddress}.`,
    );
  }
  const firstByteTimeoutMs = integer(
    'first-byte-timeout-ms',
    Math.min(DEFAULTS.firstByteTimeoutMs, headersTimeoutMs),
    1,
  );
  if (firstByteTimeoutMs > headersTimeoutMs) {
    throw new ConfigError(
      `IDEM_FIRST_BYTE_TIMEOUT_MS (--first-byte-timeout-ms) must not exceed IDEM_HEADERS_TIMEOUT_MS (${headersTimeoutMs}), got ${firstByteTimeoutMs}.`,
    );
  }
  const metricsRaw = get('metrics-port') ?? '';
  const metricsPort = metricsRaw === '' ? undefined : integer('metrics-port', 0, 0);
  if (metricsPort !== undefined && metricsPort > 65_535)
    throw new ConfigError(`IDEM_METRICS_PORT (--metrics-port) must be at most 65535, got ${metricsPort}.`);
  return {
    port,
    host: get('host') || DEFAULTS.host,
    store: get('store') || DEFAULTS.store,
    ledger: ledgerPath(get('ledger') || DEFAULTS.ledger),
    ttlMs,
    leaseMs,
    cacheSize: integer('cache-size', 0, 0),
    lab,
    labAllowRemote: flag('lab-allow-remote'),
    apiKeys,
    allowedHosts: parseAllowedHosts(get('allowed-hosts')),
    maxConnections,
    maxConnectionsPerAddress,
    firstByteTimeoutMs,
    headersTimeoutMs,
    requestTimeoutMs,
    metricsPort,
    metricsHost: get('metrics-host') || DEFAULTS.metricsHost,
    mismatchStatus: mismatch,
    clockSkewMs,
  };
}

/** `IDEM_LEDGER` is a SQLite path; `sqlite:<path>` (the store's form) is accepted too, any other scheme refused. */
function ledgerPath(raw: string): string {
  const path = raw.startsWith('sqlite:') ? raw.slice('sqlite:'.length) : raw;
  if (!path || /^[A-Za-z][A-Za-z0-9+.-]+:/.test(path)) {
    throw new ConfigError(
      `IDEM_LEDGER (--ledger) must be a SQLite file path (or sqlite:<path>, or :memory:), got "${redactUrl(raw)}".`,
    );
  }
  return path;
}

/** A `Host` allow-list entry: a reg-name, IPv4 or bracketed IPv6 address, with an optional port. */
const HOST_ENTRY = /^(?:\[[0-9a-f:.]+\]|[a-z0-9._~!$&'()*+,;=%-]+)(?::\d{1,5})?$/;

function parseAllowedHosts(raw: string | undefined): readonly string[] | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  const entries = raw.split(',').map((entry) => entry.trim().toLowerCase());
  if (entries.includes('*')) {
    if (entries.length > 1)
      throw new ConfigError(`IDEM_ALLOWED_HOSTS (--allowed-hosts) is either * alone or a list of names, got "${raw}".`);
    return ['*'];
  }
  for (const entry of entries) {
    if (!HOST_ENTRY.test(entry)) {
      throw new ConfigError(
        `IDEM_ALLOWED_HOSTS (--allowed-hosts) must be names or name:port separated by commas, got "${entry}".`,
      );
    }
  }
  return entries;
}

/** True for an address that only this machine can reach: `localhost`, 127.0.0.0/8, `::1`. */
export function isLoopback(host: string): boolean {
  const bare = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return bare === 'localhost' || bare === '::1' || /^127(?:\.\d{1,3}){3}$/.test(bare);
}

/**
 * Refuses a configuration that parses but must not serve (a `ConfigError`, one line, naming the variables):
 *
 * - lab mode (any made-up `sk_lab_` key is an account; the fault headers hold keys) on an address that is not
 *   loopback, unless `IDEM_LAB_ALLOW_REMOTE=1`;
 * - no API keys: outside lab mode the well-known test keys are off, so `IDEM_API_KEYS` is required, and an
 *   `sk_test_` key in it is refused;
 * - a listener (the API's or the metrics one) on an address that is not loopback with the default, loopback-only
 *   `Host` allow-list: every remote request would be refused, so `IDEM_ALLOWED_HOSTS` must name the hosts served.
 *
 * @example
 * checkServable(loadConfig(process.env)) // throws before anything is opened or bound
 */
export function checkServable(config: DemoConfig): void {
  if (config.lab && !config.labAllowRemote && !isLoopback(config.host)) {
    throw new ConfigError(
      `lab mode listens on loopback only, got HOST=${config.host}: use HOST=127.0.0.1, or set IDEM_LAB_ALLOW_REMOTE=1 to expose the lab on purpose.`,
    );
  }
  if (config.apiKeys.size === 0) {
    throw new ConfigError(
      'IDEM_API_KEYS (--api-keys) is required outside lab mode (the sk_test_ keys are lab-only): give apikey:account pairs.',
    );
  }
  // The sk_test_ keys are published (README, tests): outside the lab one would open an account to anyone.
  if (!config.lab && [...config.apiKeys.keys()].some((key) => key.startsWith('sk_test_'))) {
    throw new ConfigError(
      "IDEM_API_KEYS (--api-keys) holds an sk_test_ key outside lab mode: those are the lab's published keys; give keys of your own.",
    );
  }
  for (const [variable, host] of [
    ['HOST', config.host],
    ['IDEM_METRICS_HOST', config.metricsPort === undefined ? '127.0.0.1' : config.metricsHost],
  ] as const) {
    if (config.allowedHosts === undefined && !isLoopback(host)) {
      throw new ConfigError(
        `${variable}=${host} is not loopback: set IDEM_ALLOWED_HOSTS to the Host names clients use (or * when a proxy checks Host).`,
      );
    }
  }
}

/** `IDEM_API_KEYS`: API key → account, from `apikey:account` pairs; a refusal names a bad pair by its position. */
function parseApiKeys(keys: string): Map<string, string> {
  const apiKeys = new Map<string, string>();
  const pairs = keys ? keys.split(',') : [];
  const pairOf = new Map<string, number>();
  for (const [i, pair] of pairs.entries()) {
    const [apiKey, account, ...rest] = pair.split(':').map((part) => part.trim());
    // An API key given twice would authenticate as whichever account came last: refused, not guessed. One with
    // whitespace inside could never be sent (`Bearer <key>`).
    const repeated = apiKey ? pairOf.get(apiKey) : undefined;
    if (!apiKey || !account || rest.length > 0 || repeated !== undefined || /\s/.test(apiKey)) {
      // The pair is not printed: a malformed one is most often an API key without its account.
      const problem = !apiKey
        ? 'has no API key'
        : !account
          ? 'has no :account'
          : rest.length > 0
            ? 'has more than one :'
            : repeated !== undefined
              ? `repeats the API key of pair ${repeated + 1}`
              : 'has whitespace inside its API key';
      throw new ConfigError(
        `IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair ${i + 1} of ${pairs.length} ${problem}.`,
      );
    }
    apiKeys.set(apiKey, account);
    pairOf.set(apiKey, i);
  }
  return apiKeys;
}
