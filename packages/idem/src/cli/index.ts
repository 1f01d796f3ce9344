#!/usr/bin/env node
/**
 * @module `idem` — the command line: migrate and inspect a store, probe any API's `Idempotency-Key` handling. Exit codes
 * ({@link EXIT}): 0 ok, 1 failed (a probe check, a store error), 2 wrong arguments, 3 a store driver not installed.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { CommandError, MissingDriverError, UsageError, type Io } from './args.js';
import { visible } from './escape.js';
import { probeCommand } from './probe.js';
import { MIGRATE_HELP, RECORDS_HELP, migrateCommand, recordsCommand } from './records.js';

export const HELP = `Usage: idem <command> [options]

Idempotency keys for payment APIs: the first attempt runs, every retry gets the first answer back byte for byte.

Commands:
  migrate --store URL          create Idem's records table and indexes (SQLite, PostgreSQL, MySQL, DynamoDB)
  records list|show|sweep      list a tenant's records, show one, delete expired ones in batches
  probe URL                    check any API's Idempotency-Key handling with real requests; each answer is
                               read up to --max-response-bytes N (default 4 MiB), then the check fails
  help [command]               this text, or a command's options

Examples:
  idem migrate --store 'postgres://app@db:5432/payments?schema=idem'
  idem records list --store sqlite:./.idem/idem.db --scope acct_alice
  idem records sweep --store sqlite:./.idem/idem.db --batch-size 5000
  idem probe http://127.0.0.1:4000/v1/charges -H 'Authorization: Bearer sk_test_alice' \\
    --count-url http://127.0.0.1:4000/v1/balance --count-path count --delay-header 'Idem-Lab-Delay-Ms: 500'

Stored and remote text (keys, headers, bodies, what a probed API answers) is printed escaped: control and
invisible characters as \\xHH or \\uHHHH, in tables and --json alike.

Run "idem <command> --help" for a command's options.

Exit codes: 0 ok; 1 failed (a probe check failed, a store refused or could not be reached); 2 wrong arguments;
3 a store driver is not installed (the message names the package).
`;

/** The exit codes, as HELP lists them. */
export const EXIT = { ok: 0, failed: 1, usage: 2, missingDriver: 3 } as const;

const COMMANDS = ['migrate', 'records', 'probe', 'help'] as const;

/** `serve` moved to the payments demo (apps/demo): the library ships no server. */
const SERVE_MOVED = "serve is the payments demo's command, not the library's: in the Idem repository run `npm start`.";

/**
 * Runs one `idem` invocation and resolves with its exit code; never calls `process.exit`.
 *
 * @example
 * process.exitCode = await main(process.argv.slice(2), { stdout: (t) => process.stdout.write(t), stderr: (t) => process.stderr.write(t), env: process.env })
 */
export async function main(argv: readonly string[], io: Io): Promise<number> {
  const [command, ...args] = argv;
  try {
    switch (command) {
      case undefined:
        io.stderr(HELP);
        return 2;
      case '-h':
      case '--help':
        io.stdout(HELP);
        return 0;
      case '-v':
      case '--version':
        io.stdout(`${version()}\n`);
        return 0;
      case 'help':
        return await help(args[0], io);
      case 'serve':
        throw new UsageError('', SERVE_MOVED);
      case 'migrate':
        return await migrateCommand(args, io);
      case 'records':
        return await recordsCommand(args, io);
      case 'probe':
        return await probeCommand(args, io);
      default:
        throw new UsageError('', `unknown command "${command}". Commands: ${COMMANDS.join(', ')}.`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      const where = error.command ? `idem ${error.command}` : 'idem';
      io.stderr(`${where}: ${oneLine(error.message)}\nRun "${where} --help" for usage.\n`);
      return 2;
    }
    if (error instanceof MissingDriverError) {
      io.stderr(`idem${command ? ` ${command}` : ''}: ${oneLine(error.message)}\n`);
      return EXIT.missingDriver;
    }
    if (error instanceof CommandError) {
      io.stderr(`idem${command ? ` ${command}` : ''}: ${oneLine(error.message)}\n`);
      return 1;
    }
    io.stderr(
      `idem${command ? ` ${command}` : ''}: ${visible(error instanceof Error ? (error.stack ?? error.message) : String(error), { backslash: false, newlines: true })}\n`,
    );
    return 1;
  }
}

/** The longest error line printed: a store's error may quote a stored value whole (a 64 KB status). */
const MAX_MESSAGE = 1_000;

/**
 * An error message as one line with nothing a terminal acts on: a message may quote what a store, a server or the
 * arguments said. Text made visible already keeps its escapes (the backslash is not escaped again). Cut to
 * {@link MAX_MESSAGE} characters, after it was redacted whole.
 */
function oneLine(message: string): string {
  const line = visible(message, { backslash: false });
  return line.length <= MAX_MESSAGE
    ? line
    : `${line.slice(0, MAX_MESSAGE)}… (${line.length - MAX_MESSAGE} more characters)`;
}

async function help(topic: string | undefined, io: Io): Promise<number> {
  switch (topic) {
    case undefined:
      io.stdout(HELP);
      return 0;
    case 'serve':
      throw new UsageError('', SERVE_MOVED);
    case 'migrate':
      io.stdout(MIGRATE_HELP);
      return 0;
    case 'records':
      io.stdout(RECORDS_HELP);
      return 0;
    case 'probe':
      return probeCommand(['--help'], io);
    default:
      throw new UsageError('', `no help for "${topic}". Commands: ${COMMANDS.join(', ')}.`);
  }
}

function version(): string {
  // package.json sits two levels above src/cli in the source tree and above dist/cli in the build.
  for (const path of ['../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(path, import.meta.url), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'idem' && pkg.version) return pkg.version;
    } catch {
      // try the next location
    }
  }
  return 'unknown';
}

// Run when executed (the `idem` bin — a symlink, hence realpath —, `node dist/cli/index.js`, tsx on the
// source), not when imported.
const invoked = process.argv[1];
if (invoked && import.meta.url === pathToFileURL(realpathSync(invoked)).href) {
  const io: Io = {
    stdout: (text) => void process.stdout.write(text),
    stderr: (text) => void process.stderr.write(text),
    env: process.env,
  };
  const code = await main(process.argv.slice(2), io);
  process.exitCode = code;
}
