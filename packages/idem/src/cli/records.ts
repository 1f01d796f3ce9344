/**
 * @module `idem migrate` and `idem records list|show|sweep`: an operator's view of a store, opened from its URL.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { recordPk } from '../core/key.js';
import { isIdempotencyError } from '../core/errors.js';
import type { IdempotencyRecord } from '../core/record.js';
import { redact, redactUrl } from '../core/store-url.js';
import { CommandError, MissingDriverError, UsageError, integerOption, table, parseCommand, type Io } from './args.js';
import { safeJson, visible } from './escape.js';
import { StoreUrlError, openStore, type OpenedStore } from './open.js';
import { resolveCommand } from './resolve.js';
import { unreadable } from './unreadable.js';

const STORE_HELP = [
  'Store URLs (--store defaults to $IDEM_STORE):',
  '  sqlite:<path>   postgres://user@host:5432/db[?schema=name]   redis://host:6379[/db][?prefix=name:]',
  '  redis-cluster://host:port[,host:port…][?prefix=name:&replicas=1&replicaTimeoutMs=500]',
  '  mysql://user[:password]@host:3306/db   dynamodb://host:port[?table=name&region=r]',
  '  memory: (a fresh, empty store: for trying the commands)',
].join('\n');

export const MIGRATE_HELP = `Usage: idem migrate --store URL

Creates Idem's records table and its indexes if they are missing, and nothing else; on DynamoDB, the table and
native TTL on expiresAt. Idempotent, and safe to run from several processes at once. Stores without a
schema (redis, memory) need nothing.

${STORE_HELP}

Examples:
  idem migrate --store sqlite:./.idem/idem.db
  idem migrate --store 'postgres://app@db:5432/payments?schema=idem'
`;

export const RECORDS_HELP = `Usage: idem records <list|show|sweep|resolve> --store URL [options]

  list --scope S [--limit N] [--json]       a scope's records, newest claim first (default 20, at most 1000)
  show KEY --scope S [--json] [--body]      one record: state, lease, expiry, the stored response (--body prints it)
  sweep [--batch-size N] [--limit N] [--json]
                                            deletes expired records in batches, a progress line per batch on
                                            stderr; stores with native expiry (redis, dynamodb) delete nothing
  resolve SCOPE KEY (--succeeded|--failed) --status N [--body TEXT] | --rerun
                                            settles a key left in progress by a dead attempt (records resolve -h)

The scope is the tenant the key belongs to (the demo's account, e.g. acct_alice). --json prints JSON for scripts.
Keys are shown as they were sent; KEY HASH is the 16-hex prefix of SHA-256(key) that the server's logs carry.

${STORE_HELP}

Examples:
  idem records list --store sqlite:./.idem/idem.db --scope acct_alice
  idem records show 8e03978e-40d5-43e8-bc93-6894a57f9324 --store sqlite:./.idem/idem.db --scope acct_alice
  idem records sweep --store 'postgres://app@db:5432/payments?schema=idem' --batch-size 5000
`;

/**
 * `idem migrate --store URL`.
 *
 * @example
 * process.exitCode = await migrateCommand(['--store', 'sqlite:./idem.db'], io)
 */
export async function migrateCommand(args: readonly string[], io: Io): Promise<number> {
  const { values } = parseCommand('migrate', args, { store: 'string' });
  if (values.help) {
    io.stdout(MIGRATE_HELP);
    return 0;
  }
  const url = storeUrl('migrate', values.store, io);
  return withStore('migrate', url, false, async ({ store, description }) => {
    if (typeof store.migrate === 'function') {
      await store.migrate();
      io.stdout(`Migrated: ${description}\n`);
    } else if (typeof store.createTable === 'function') {
      // DynamoDB: the table (PAY_PER_REQUEST, pk as HASH key) and native TTL on expiresAt.
      const { created, timeToLive } = await store.createTable();
      io.stdout(
        `Migrated: ${description} — table ${created ? 'created' : 'already there'}, native TTL ${timeToLive}\n`,
      );
    } else {
      io.stdout(`Nothing to migrate: the ${store.name} store needs no schema (${description}).\n`);
    }
    return 0;
  });
}

/**
 * `idem records list|show|sweep`.
 *
 * @example
 * process.exitCode = await recordsCommand(['list', '--store', 'sqlite:./idem.db', '--scope', 'acct_alice'], io)
 */
export async function recordsCommand(args: readonly string[], io: Io): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined) throw new UsageError('records', 'give a records command: list, show, sweep or resolve.');
  if (sub === '--help' || sub === '-h' || sub === 'help') return help(io);
  if (sub === 'list') return list(rest, io);
  if (sub === 'show') return show(rest, io);
  if (sub === 'sweep') return sweep(rest, io);
  if (sub === 'resolve')
    return resolveCommand(rest, io, (command, flag, run) =>
      withStore(command, storeUrl(command, flag, io), true, ({ store }) => run(store)),
    );
  throw new UsageError('records', `unknown records command "${sub}": use list, show, sweep or resolve.`);
}

async function list(args: readonly string[], io: Io): Promise<number> {
  const command = 'records list';
  const { values } = parseCommand(command, args, {
    store: 'string',
    scope: 'string',
    limit: 'string',
    json: 'boolean',
  });
  if (values.help) return help(io);
  const url = storeUrl(command, values.store, io);
  if (!values.scope)
    throw new UsageError(command, '--scope is required: records are listed per tenant (e.g. --scope acct_alice).');
  const limit = integerOption(command, 'limit', values.limit, 20, 1000);
  const scope = values.scope;
  return withStore(command, url, true, async ({ store }) => {
    const records = await store.list({ scope, limit }).catch((error: unknown) => {
      // A row the store cannot decode fails its whole list (each store decodes as it reads): said as such.
      if (!(error instanceof SyntaxError)) throw error;
      throw new CommandError(
        `a record in scope ${visible(scope)} cannot be decoded by the store (${error.message}), so the store lists none of the scope; records show KEY reads a record on its own`,
        { cause: error },
      );
    });
    if (values.json) {
      io.stdout(
        safeJson(
          records.map((record) => unreadableJson(record) ?? recordJson(record, false)),
          2,
        ) + '\n',
      );
      return 0;
    }
    if (records.length === 0) {
      io.stdout(`No records for scope ${visible(scope)}.\n`);
      return 0;
    }
    const now = Date.now();
    // Keys and result ids are whatever clients and handlers sent: made visible, like every stored string.
    const rows = records.map((r) => {
      // A row written past the store may hold anything: it is one escaped row saying why, and the list goes on.
      const problem = unreadable(r);
      if (problem !== undefined) return [keyOf(r), keyHashOf(r), `unreadable: ${problem}`, '-', '-', '-', '-'];
      return [
        visible(r.key),
        keyHash(r.key),
        stateOf(r, now),
        r.response ? String(r.response.status) : '-',
        r.resultId === null ? '-' : visible(r.resultId),
        isoTime(r.claimedAt),
        isoTime(r.expiresAt),
      ];
    });
    io.stdout(table([['KEY', 'KEY HASH', 'STATUS', 'HTTP', 'RESULT', 'CLAIMED (UTC)', 'EXPIRES (UTC)'], ...rows]));
    io.stdout(
      `${records.length} record${records.length === 1 ? '' : 's'}${records.length === limit ? ` (the newest ${limit}; --limit for more)` : ''}\n`,
    );
    return 0;
  });
}

async function show(args: readonly string[], io: Io): Promise<number> {
  const command = 'records show';
  const flags = { store: 'string', scope: 'string', json: 'boolean', body: 'boolean' } as const;
  const { values, positionals } = parseCommand(command, args, flags, true);
  if (values.help) return help(io);
  const url = storeUrl(command, values.store, io);
  if (positionals.length !== 1 || !positionals[0])
    throw new UsageError(command, 'give exactly one KEY: idem records show KEY --scope S --store URL.');
  if (!values.scope)
    throw new UsageError(command, '--scope is required: a key belongs to one tenant (e.g. --scope acct_alice).');
  const key = positionals[0];
  const scope = values.scope;
  return withStore(command, url, true, async ({ store }) => {
    let record: IdempotencyRecord | null;
    try {
      record = await store.get(recordPk(scope, key));
    } catch (error) {
      // A row the store itself cannot decode (its headers not JSON): shown as unreadable, not as a store failure.
      if (!(error instanceof SyntaxError)) throw error;
      const bare = { pk: recordPk(scope, key), scope, key } as IdempotencyRecord;
      return showUnreadable(bare, `the store cannot decode it (${error.message})`, values.json === true, io);
    }
    if (!record) {
      io.stderr(`idem records show: no record for key "${visible(key)}" in scope ${visible(scope)}.\n`);
      return 1;
    }
    const problem = unreadable(record);
    if (problem !== undefined) return showUnreadable(record, problem, values.json === true, io);
    if (values.json) {
      io.stdout(safeJson(recordJson(record, values.body === true), 2) + '\n');
      return 0;
    }
    const now = Date.now();
    const response = record.response;
    // Every stored string is made visible: a key, a header or a body may carry ESC, CR, U+202E…
    const lines: Array<[string, string]> = [
      ['key', visible(record.key)],
      ['key hash', keyHash(record.key)],
      ['scope', visible(record.scope)],
      ['pk', visible(record.pk)],
      ['status', stateOf(record, now)],
      ['id', visible(record.id)],
      ['fingerprint', visible(record.fingerprint)],
      ['claimed', isoTime(record.claimedAt)],
      [
        'lease expires',
        `${isoTime(record.leaseExpiresAt)}${record.status === 'in_progress' ? ` (${relative(record.leaseExpiresAt - now)})` : ''}`,
      ],
      ['expires', `${isoTime(record.expiresAt)} (${relative(record.expiresAt - now)})`],
      ['result', record.resultId === null ? '-' : visible(record.resultId)],
      ['response', response ? `${response.status}, ${response.body.byteLength} bytes` : '-'],
      ...(response?.headers ?? []).map(([name, value]): [string, string] => [`  ${visible(name)}`, visible(value)]),
    ];
    const width = Math.max(...lines.map(([name]) => name.length));
    io.stdout(lines.map(([name, value]) => `${name.padEnd(width)}  ${value}`).join('\n') + '\n');
    // The body is a block of its own: its line feeds are kept, so a pretty-printed answer stays readable.
    if (values.body && response)
      io.stdout(`\n${visible(new TextDecoder().decode(response.body), { newlines: true })}\n`);
    return 0;
  });
}

async function sweep(args: readonly string[], io: Io): Promise<number> {
  const command = 'records sweep';
  const { values } = parseCommand(command, args, {
    store: 'string',
    'batch-size': 'string',
    limit: 'string',
    json: 'boolean',
  });
  if (values.help) return help(io);
  const url = storeUrl(command, values.store, io);
  const batchSize = integerOption(command, 'batch-size', values['batch-size'], 1000, 100_000);
  const limit = integerOption(command, 'limit', values.limit, Number.MAX_SAFE_INTEGER);
  return withStore(command, url, true, async ({ store, description }) => {
    // One `now` for the whole sweep: a record that expires while we run waits for the next one.
    const now = Date.now();
    const started = performance.now();
    let deleted = 0;
    let batches = 0;
    // Batch by batch, so a large backlog shows progress and never holds one long delete; each call is the
    // store's own batched, non-blocking sweep limited to one batch.
    for (;;) {
      const take = Math.min(batchSize, limit - deleted);
      if (take <= 0) break;
      const count = await store.sweep({ now, batchSize: take, limit: take });
      batches++;
      deleted += count;
      if (count > 0) io.stderr(`swept batch ${batches}: ${count} deleted (${deleted} so far)\n`);
      if (count < take) break;
    }
    const seconds = (performance.now() - started) / 1000;
    if (values.json) {
      io.stdout(
        JSON.stringify({ store: store.name, deleted, batches, batchSize, seconds: Math.round(seconds * 1000) / 1000 }) +
          '\n',
      );
    } else {
      const native =
        store.name === 'redis' || store.name === 'dynamodb' ? ' (this store expires records natively)' : '';
      io.stdout(
        `Deleted ${deleted} expired record${deleted === 1 ? '' : 's'} from ${description} in ${seconds.toFixed(2)} s${native}.\n`,
      );
    }
    return 0;
  });
}

function help(io: Io): number {
  io.stdout(RECORDS_HELP);
  return 0;
}

function storeUrl(command: string, flag: string | undefined, io: Io): string {
  const url = flag ?? io.env.IDEM_STORE;
  if (!url)
    throw new UsageError(command, '--store URL is required (or set IDEM_STORE), e.g. --store sqlite:./.idem/idem.db');
  return url;
}

/**
 * Opens the store, runs `fn`, closes the store. `mustExist`: a SQLite path that does not exist is an error
 * rather than a new empty database (a typo should not look like "no records").
 */
async function withStore(
  command: string,
  url: string,
  mustExist: boolean,
  fn: (opened: OpenedStore) => Promise<number>,
): Promise<number> {
  if (mustExist && url.startsWith('sqlite:') && url !== 'sqlite::memory:' && !existsSync(url.slice('sqlite:'.length))) {
    throw new CommandError(
      `no SQLite database at ${url.slice('sqlite:'.length)} (run idem migrate --store ${url} to create one).`,
    );
  }
  let opened: OpenedStore;
  try {
    // Opening runs no DDL: records commands need only SELECT/INSERT/UPDATE/DELETE on Idem's table.
    opened = await openStore(url, { create: !mustExist });
  } catch (error) {
    if (error instanceof MissingDriverError) throw error;
    if (error instanceof StoreUrlError || isIdempotencyError(error, 'CONFIG_INVALID')) {
      throw new UsageError(command, error.message);
    }
    throw new CommandError(`cannot open the store ${redactUrl(url)}: ${redact((error as Error).message, url)}`, {
      cause: error,
    });
  }
  try {
    return await fn(opened);
  } catch (error) {
    if (error instanceof UsageError || error instanceof CommandError) throw error;
    if (missingTable(error)) {
      throw new CommandError(
        `${redactUrl(url)}: Idem's table does not exist there: run idem migrate --store '${redactUrl(url)}'.`,
        { cause: error },
      );
    }
    // A store that refuses (permission denied): one line, not a stack trace.
    throw new CommandError(`${redactUrl(url)}: ${redact((error as Error).message, url)}`, { cause: error });
  } finally {
    await opened.close();
  }
}

/** PostgreSQL's undefined_table, MySQL's ER_NO_SUCH_TABLE: the table `migrate` creates is not there. */
function missingTable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '42P01' || code === 'ER_NO_SUCH_TABLE';
}

/** A record `show` cannot print: its key, hash and pk, and why, on stdout (one escaped line each); exit 1. */
function showUnreadable(record: IdempotencyRecord, problem: string, json: boolean, io: Io): number {
  if (json) {
    io.stdout(safeJson(unreadableJson(record, problem), 2) + '\n');
    return 1;
  }
  const pk = typeof record.pk === 'string' ? visible(record.pk) : '?';
  io.stdout(`key         ${keyOf(record)}\nkey hash    ${keyHashOf(record)}\npk          ${pk}\n`);
  io.stdout(`unreadable  ${visible(problem)}\n`);
  return 1;
}

/** `--json` for a record that cannot be printed whole (undefined when it can): its key, hash, pk and why. */
function unreadableJson(record: IdempotencyRecord, problem = unreadable(record)) {
  if (problem === undefined) return undefined;
  const text = (value: unknown) => (typeof value === 'string' ? value : null);
  return {
    key: text(record.key),
    keyHash: typeof record.key === 'string' ? keyHash(record.key) : null,
    pk: text(record.pk),
    unreadable: problem,
  };
}

/** The key as printed, or `?` when the row holds no string there. */
function keyOf(record: IdempotencyRecord): string {
  return typeof record.key === 'string' ? visible(record.key) : '?';
}

function keyHashOf(record: IdempotencyRecord): string {
  return typeof record.key === 'string' ? keyHash(record.key) : '-';
}

/** A record for `--json`: everything but the body, unless asked (base64, with its UTF-8 text when it is text). */
function recordJson(record: IdempotencyRecord, withBody: boolean) {
  const response = record.response;
  return {
    key: record.key,
    keyHash: keyHash(record.key),
    scope: record.scope,
    pk: record.pk,
    status: record.status,
    id: record.id,
    fingerprint: record.fingerprint,
    claimedAt: record.claimedAt,
    leaseExpiresAt: record.leaseExpiresAt,
    expiresAt: record.expiresAt,
    expired: record.expiresAt <= Date.now(),
    retryable: record.status === 'failed' ? record.retryable : null,
    resultId: record.resultId,
    response: response
      ? {
          status: response.status,
          headers: Object.fromEntries(response.headers),
          bytes: response.body.byteLength,
          ...(withBody
            ? {
                body: new TextDecoder().decode(response.body),
                bodyBase64: Buffer.from(response.body).toString('base64'),
              }
            : {}),
        }
      : null,
  };
}

/** The same hash the demo's logs carry (demo/log.ts `keyHash`), so an operator can match a record to its lines. */
function keyHash(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 16);
}

/** The status as printed: made visible, as a row written past the store's CHECK may hold any string. */
function stateOf(record: IdempotencyRecord, now: number): string {
  if (record.expiresAt <= now) return `${visible(record.status)} (expired)`;
  if (record.status === 'in_progress')
    return record.leaseExpiresAt <= now ? 'in_progress (lease lapsed)' : 'in_progress';
  if (record.status === 'failed') return record.retryable ? 'failed (retryable)' : 'failed (final)';
  return visible(record.status);
}

function isoTime(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, 'Z');
}

function relative(ms: number): string {
  const abs = Math.abs(ms);
  const text =
    abs < 1000
      ? `${Math.round(abs)} ms`
      : abs < 60_000
        ? `${Math.round(abs / 1000)} s`
        : abs < 3_600_000
          ? `${Math.round(abs / 60_000)} min`
          : `${(abs / 3_600_000).toFixed(1)} h`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}
