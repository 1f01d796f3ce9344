/**
 * @module `idem records resolve`: an operator settles a key whose outcome is unknown (a takeover under the
 * `quarantine` policy, or any record left in progress by a holder that died), with the store's own fenced writes:
 * a claim that takes the lapsed lease over, then a completion (or a retryable failure, for `--rerun`).
 */
import { recordPk } from '../core/key.js';
import type { IdempotencyStore, Outcome } from '../core/record.js';
import { sealed, type SealingKey } from '../core/sealed.js';
import { CommandError, UsageError, integerOption, parseCommand, type Io } from './args.js';
import { visible } from './escape.js';
import { claimLapsed } from './resolve-wait.js';

export const RESOLVE_HELP = `Usage: idem records resolve SCOPE KEY --store URL (--succeeded | --failed) --status N [--body TEXT]
                           [--content-type TYPE] [--seal-key-env NAME] [--wait SECONDS]
       idem records resolve SCOPE KEY --store URL --rerun [--wait SECONDS]

Settles a key left in progress by an attempt that died (under takeover: 'quarantine' it answers 409
operation_state "unknown" until this is run). A live lease is waited for (--wait, default 30 s; 0: refuse it at
once) and the key claimed the moment it lapses, even while a client keeps retrying it. Find out first what
happened to the record's id (idem records show KEY --scope SCOPE prints it), then:

  --succeeded --status N   it happened: record this response (2xx or 3xx); every retry replays it
  --failed --status N      it failed for good: record this response (4xx or 5xx); every retry replays it
  --rerun                  it did not happen: the next attempt runs the work again, under the same id
  --body TEXT              the response body (default empty); --content-type (default application/json)
  --seal-key-env NAME      the application seals responses (sealed()): seal this one with the key in $NAME,
                           written KEY_ID:BASE64 (the newest key, 32 bytes); without it the record would be refused
For an idempotent() key, the body is the result as JSON (--succeeded --status 200), or the failure its callers
get (--failed --status 422 --body '{"name":"…","message":"…"}').
`;

/** How long `resolve` waits for a live lease to lapse, by default, and at most (in s). */
const WAIT_S = 30;
const MAX_WAIT_S = 3_600;

type Resolution = 'succeeded' | 'failed' | 'rerun';

/**
 * `idem records resolve SCOPE KEY …`. `withStore` opens the store named by `url` and runs the write.
 *
 * @example
 * await resolveCommand(['acct_alice', 'k1', '--store', 'sqlite:./idem.db', '--succeeded', '--status', '201'], io, withStore)
 */
export async function resolveCommand(
  args: readonly string[],
  io: Io,
  withStore: (
    command: string,
    flag: string | undefined,
    run: (store: ResolveStore) => Promise<number>,
  ) => Promise<number>,
): Promise<number> {
  const command = 'records resolve';
  const { values, positionals } = parseCommand(
    command,
    args,
    {
      store: 'string',
      succeeded: 'boolean',
      failed: 'boolean',
      rerun: 'boolean',
      status: 'string',
      body: 'string',
      'content-type': 'string',
      'seal-key-env': 'string',
      wait: 'string',
    },
    true,
  );
  if (values.help) {
    io.stdout(RESOLVE_HELP);
    return 0;
  }
  const [scope, key] = positionals;
  if (positionals.length !== 2 || !scope || !key)
    throw new UsageError(command, 'give the SCOPE and the KEY: idem records resolve SCOPE KEY --store URL …');
  const chosen = (['succeeded', 'failed', 'rerun'] as const).filter((name) => values[name] === true);
  if (chosen.length !== 1) throw new UsageError(command, 'give exactly one of --succeeded, --failed or --rerun.');
  const resolution: Resolution = chosen[0] as Resolution;
  const outcome = outcomeOf(command, resolution, values);
  const waitMs = waitOption(command, values.wait) * 1000;
  const seal = sealingKey(command, values['seal-key-env'], io.env);
  return withStore(command, values.store, async (opened) => {
    const store = seal ? sealed(opened, { keys: [seal] }) : opened;
    const pk = recordPk(scope, key);
    const about = `key "${visible(key)}" in scope ${visible(scope)}`;
    const progress = (line: string) => io.stderr(`idem ${command}: ${line}\n`);
    const { record, token } = await claimLapsed(store, { pk, scope, key, about, waitMs, progress });
    const written = await store.complete({ pk, token, now: Date.now(), outcome });
    if (!written.ok) throw new CommandError(`${about} was taken over before the resolution was written: look again.`);
    io.stdout(
      resolution === 'rerun'
        ? `Resolved ${about} (id ${visible(record.id)}): the next attempt runs the work again, under this id.\n`
        : `Resolved ${about} (id ${visible(record.id)}): ${resolution}, ${outcome.response?.status}; every retry now replays it.\n`,
    );
    return 0;
  });
}

/** The store `resolve` writes to. */
export type ResolveStore = IdempotencyStore<never>;

/** `--seal-key-env NAME`: the sealing key in `$NAME` as `KEY_ID:BASE64` (32 bytes). The key is never printed. */
function sealingKey(command: string, name: string | undefined, env: NodeJS.ProcessEnv): SealingKey | undefined {
  if (name === undefined) return undefined;
  const value = env[name];
  if (!value) throw new UsageError(command, `--seal-key-env ${visible(name)}: that variable is not set.`);
  const colon = value.lastIndexOf(':');
  const key = Buffer.from(value.slice(colon + 1), 'base64');
  if (
    colon < 1 ||
    !/^[\x21-\x7e]{1,64}$/.test(value.slice(0, colon)) ||
    key.byteLength !== 32 ||
    !/^[A-Za-z0-9+/]+={0,2}$/.test(value.slice(colon + 1))
  )
    throw new UsageError(command, `--seal-key-env ${visible(name)}: the variable must hold KEY_ID:BASE64 of 32 bytes.`);
  return { id: value.slice(0, colon), key: new Uint8Array(key) };
}

/** `--wait SECONDS`: 0 to 3600, default 30. */
function waitOption(command: string, raw: string | undefined): number {
  if (raw === undefined) return WAIT_S;
  if (!/^\d+$/.test(raw) || Number(raw) > MAX_WAIT_S)
    throw new UsageError(command, `--wait must be a whole number of seconds from 0 to ${MAX_WAIT_S}, got "${raw}".`);
  return Number(raw);
}

/** The outcome to write: a final one with the response given, or a retryable failure (`--rerun`). */
function outcomeOf(
  command: string,
  resolution: Resolution,
  values: { status?: string | undefined; body?: string | undefined; 'content-type'?: string | undefined },
): Outcome {
  if (resolution === 'rerun') {
    if (values.status !== undefined || values.body !== undefined)
      throw new UsageError(command, '--rerun records no response: leave out --status and --body.');
    return { status: 'failed', retryable: true, resultId: null, response: null };
  }
  if (values.status === undefined) throw new UsageError(command, `--${resolution} needs --status N.`);
  const status = integerOption(command, 'status', values.status, 0, 599);
  const [low, high] = resolution === 'succeeded' ? [200, 399] : [400, 599];
  if (status < low || status > high)
    throw new UsageError(command, `--${resolution} takes a status from ${low} to ${high}, got ${status}.`);
  const contentType = values['content-type'] ?? 'application/json';
  // Replayed as a header on every retry: a value no response can carry would fail each of them.
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+\/[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[ \t]*;[\x20-\x7e\t]*)?$/.test(contentType))
    throw new UsageError(
      command,
      `--content-type must be a media type such as application/json, got "${visible(contentType)}".`,
    );
  const body = new TextEncoder().encode(values.body ?? '');
  return {
    status: resolution === 'succeeded' ? 'succeeded' : 'failed',
    retryable: false,
    resultId: null,
    response: { status, headers: [['content-type', contentType]], body },
  };
}
