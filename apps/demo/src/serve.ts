/**
 * @module `idem serve`: the payments demo server from the command line, configured by the same options as its
 * environment variables. It lives with the demo (apps/demo), not in the library's `idem` command. Every bad
 * setting is one line on stderr and exit code 2.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { OPTIONS, badConfig, loadConfig, type DemoConfig } from './config.js';
import { startServer } from './server.js';

/** Where the command writes. */
export interface Io {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly env: NodeJS.ProcessEnv;
}

/** Aligned columns, the first row a header. */
function table(rows: ReadonlyArray<readonly string[]>): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  '))
    .join('\n');
}

/**
 * The help text: every flag beside the environment variable it overrides (from the demo's own option table).
 *
 * @example
 * io.stdout(serveHelp())
 */
export function serveHelp(): string {
  const rows = Object.entries(OPTIONS).map(([flag, { env, help }]) => [`--${flag} <value>`, env, help]);
  return [
    'Usage: idem serve [options]',
    '',
    'Runs the payments demo server (POST /v1/charges with Idempotency-Key, /metrics, the lab page).',
    'Each option overrides its environment variable. LOG_LEVEL (fatal…trace, silent; default info) sets the log level.',
    '',
    table([['OPTION', 'ENV', 'MEANING'], ...rows]),
    '',
    'Examples:',
    '  idem serve --lab 1                                  # SQLite in ./.idem, lab faults on, port 4000',
    '  idem serve --store postgres://app@db:5432/payments --port 8080',
    '  IDEM_STORE=memory: LOG_LEVEL=warn idem serve --port 0',
    '',
  ].join('\n');
}

/**
 * Starts the server and resolves with the exit code once it has stopped (SIGTERM or SIGINT drain in-flight
 * requests first); 2 at once for a bad setting.
 *
 * @example
 * process.exitCode = await serveCommand(process.argv.slice(2), io)
 */
export async function serveCommand(args: readonly string[], io: Io): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    io.stdout(serveHelp());
    return 0;
  }
  let close: () => Promise<void>;
  try {
    const settings: DemoConfig = loadConfig(io.env, args);
    ({ close } = await startServer(settings));
  } catch (error) {
    const message = badConfig(error);
    if (message === undefined) throw error;
    io.stderr(`idem serve: ${message}\nRun "idem serve --help" for usage.\n`);
    return 2;
  }
  return new Promise<number>((resolve) => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.once(signal, () => {
        io.stdout(`idem demo: ${signal}, draining\n`);
        close().then(
          () => resolve(0),
          (error: unknown) => {
            io.stderr(`idem serve: ${error instanceof Error ? error.message : String(error)}\n`);
            resolve(1);
          },
        );
      });
    }
  });
}

// `idem-demo` / `npm run serve -w apps/demo`: `serve` is optional as the first argument.
const invoked = process.argv[1];
if (invoked && import.meta.url === pathToFileURL(realpathSync(invoked)).href) {
  const args = process.argv.slice(2);
  const io: Io = {
    stdout: (t) => void process.stdout.write(t),
    stderr: (t) => void process.stderr.write(t),
    env: process.env,
  };
  const code = await serveCommand(args[0] === 'serve' ? args.slice(1) : args, io);
  // The server leaves pools and sockets behind once drained.
  process.exit(code);
}
