/**
 * @module Argument handling shared by the `idem` commands: node:util `parseArgs` mistakes become a
 * {@link UsageError} (exit 2) whose message says what was wrong and where to look.
 */
import { parseArgs } from 'node:util';

/** Wrong arguments: the CLI prints the message and `Run "idem <command> --help"`, and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
  /** The command whose help to point at, e.g. `records list`. */
  readonly command: string;
  constructor(command: string, message: string) {
    super(message);
    this.command = command;
  }
}

/** Something went wrong that is not the arguments' fault (a store down, a file missing): exit 1. */
export class CommandError extends Error {
  override readonly name = 'CommandError';
}

/**
 * A store's driver is not installed (`pg` for `postgres://`, …): the CLI prints the one line naming the package and
 * exits 3, apart from wrong arguments (2) and a failed command (1), so a script can tell it to install something.
 */
export class MissingDriverError extends Error {
  override readonly name = 'MissingDriverError';
}

/** Where a command writes: stdout for results, stderr for progress and errors. */
export interface Io {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly env: NodeJS.ProcessEnv;
}

/**
 * Runs a `parseArgs` call, rethrowing its errors (`ERR_PARSE_ARGS_*`) as a {@link UsageError} for `command`.
 *
 * @example
 * const { values } = usage('records list', () => parseArgs({ args, options: { scope: { type: 'string' } }, strict: true }))
 */
export function usage<T>(command: string, parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS'))
      // Node's text runs over several lines: one line, its sentences joined.
      throw new UsageError(command, (error as Error).message.replace(/\s*\n\s*/g, ' '));
    throw error;
  }
}

/** A command's options, each a flag taking a value (`'string'`) or none (`'boolean'`). */
type OptionSpecs = Record<string, 'string' | 'boolean'>;
type Options<O extends OptionSpecs> = { [K in keyof O]: { type: O[K] } };

const HELP_OPTION = { type: 'boolean', short: 'h' } as const;

/**
 * Parses a command's arguments strictly, `--help`/`-h` added to `options`: {@link usage} around node:util `parseArgs`.
 *
 * @example
 * const { values, positionals } = parseCommand('records show', args, { scope: 'string', json: 'boolean' }, true)
 */
export function parseCommand<const O extends OptionSpecs, const P extends boolean = false>(
  command: string,
  args: readonly string[],
  options: O,
  allowPositionals: P = false as P,
): ParsedCommand<O, P> {
  const full = Object.fromEntries(Object.entries(options).map(([name, type]) => [name, { type }])) as Options<O>;
  return usage(command, () =>
    parseArgs({ args: [...args], options: { ...full, help: HELP_OPTION }, strict: true, allowPositionals }),
  );
}

type ParsedCommand<O extends OptionSpecs, P extends boolean> = ReturnType<
  typeof parseArgs<{
    args: string[];
    options: Options<O> & { help: typeof HELP_OPTION };
    strict: true;
    allowPositionals: P;
  }>
>;

/**
 * A positive integer option, or `fallback` when absent; anything else is a {@link UsageError} naming the flag.
 *
 * @example
 * const limit = integerOption('records list', 'limit', values.limit, 20)
 */
export function integerOption(
  command: string,
  name: string,
  raw: string | undefined,
  fallback: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new UsageError(command, `--${name} must be an integer from 1 to ${max}, got "${raw}".`);
  }
  return value;
}

/**
 * Parses `Name: value` (curl's `-H` form) into a header pair.
 *
 * @example
 * headerOption('probe', 'header', 'Authorization: Bearer sk_test_alice') // → ['Authorization', 'Bearer sk_test_alice']
 */
export function headerOption(command: string, name: string, raw: string): [string, string] {
  const colon = raw.indexOf(':');
  const header = colon > 0 ? raw.slice(0, colon).trim() : '';
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(header)) {
    // Not echoed: a header without its colon is most often a credential (`Authorization Bearer sk_live_…`).
    throw new UsageError(
      command,
      `--${name} must look like "Name: value" (a header name, a colon, the value); the ${raw.length} characters given do not (not shown: they may hold a credential).`,
    );
  }
  return [header, raw.slice(colon + 1).trim()];
}

/**
 * Lays out rows as aligned columns: the first row is the header, then a rule.
 *
 * @example
 * io.stdout(table([['KEY', 'STATUS'], ['k1', 'succeeded']]))
 */
export function table(rows: ReadonlyArray<readonly string[]>): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, [...cell].length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat((widths[i] ?? 0) - [...cell].length)))
      .join('  ')
      .trimEnd();
  const [head, ...body] = rows;
  if (!head) return '';
  // The last column is free text of any length: its rule spans the header only.
  const rule = head.map((cell, i) => '─'.repeat(i === head.length - 1 ? [...cell].length : (widths[i] ?? 0)));
  return [line(head), line(rule), ...body.map(line)].join('\n') + '\n';
}
