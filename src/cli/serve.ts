/**
 * @module `idem serve`: the payments demo server, configured by the same options as its environment variables.
 */
import { UsageError, table, type Io } from './args.js';
import { loadDemo } from './demo.js';

/**
 * The help text: every flag beside the environment variable it overrides (from the demo's own option table).
 *
 * @example
 * io.stdout(await serveHelp())
 */
export async function serveHelp(): Promise<string> {
  const { config } = await loadDemo();
  const rows = Object.entries(config.OPTIONS).map(([flag, { env, help }]) => [`--${flag} <value>`, env, help]);
  return [
    'Usage: idem serve [options]',
    '',
    'Runs the payments demo server (POST /v1/charges with Idempotency-Key, /metrics, the lab page).',
    'Each option overrides its environment variable. LOG_LEVEL (fatal…trace, silent; default info) sets the log level.',
    '',
    table([['OPTION', 'ENV', 'MEANING'], ...rows]).trimEnd(),
    '',
    'Examples:',
    '  idem serve --lab 1                                  # SQLite in ./.idem, lab faults on, port 4000',
    '  idem serve --store postgres://app@db:5432/payments --port 8080',
    '  IDEM_STORE=memory: LOG_LEVEL=warn idem serve --port 0',
    '',
  ].join('\n');
}

/**
 * Starts the server and resolves when it has stopped (SIGTERM or SIGINT drains in-flight requests first).
 *
 * @example
 * process.exitCode = await serveCommand(process.argv.slice(3), io)
 */
export async function serveCommand(args: readonly string[], io: Io): Promise<number> {
  const { server, config } = await loadDemo();
  let settings;
  try {
    settings = config.loadConfig(io.env, args);
  } catch (error) {
    if (error instanceof config.ConfigError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      throw new UsageError('serve', (error as Error).message);
    }
    throw error;
  }
  let running: Awaited<ReturnType<typeof server.startServer>>;
  try {
    running = await server.startServer(settings);
  } catch (error) {
    if (error instanceof config.ConfigError) throw new UsageError('serve', error.message);
    throw error;
  }
  const { close } = running;
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
