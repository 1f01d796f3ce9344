/**
 * The `idem` command's surface: help, exit codes, and the message for every kind of wrong argument.
 */
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../harness.js';
import { serveHelp } from '../../apps/demo/src/serve.js';
import { CLI_BUILT, demoServe, idem, inProcess, serveIdem } from './helpers.js';

describe.concurrent('idem: help', () => {
  it('--help lists every command with examples, on stdout, exit 0', async () => {
    const { code, stdout, stderr } = await idem(['--help']);
    expect(code).toBe(0);
    expect(stderr).toBe('');
    for (const command of ['migrate --store URL', 'records list|show|sweep', 'probe URL']) {
      expect(stdout).toContain(`\n  ${command} `);
    }
    expect(stdout).not.toContain('serve');
    expect(stdout).toContain("Examples:\n  idem migrate --store 'postgres://app@db:5432/payments?schema=idem'\n");
    expect(stdout).toContain("  idem probe http://127.0.0.1:4000/v1/charges -H 'Authorization: Bearer sk_test_alice'");
  });

  it('each command has its own help, exit 0', async () => {
    const serve = { code: 0, stdout: serveHelp() };
    const [migrate, records, probe, viaHelp] = await Promise.all([
      inProcess(['migrate', '--help']),
      inProcess(['records', '--help']),
      inProcess(['probe', '--help']),
      inProcess(['help', 'records']),
    ]);
    expect([serve.code, migrate.code, records.code, probe.code, viaHelp.code]).toEqual([0, 0, 0, 0, 0]);
    // serve's help is the demo's own option table: every flag beside the variable it overrides.
    expect(serve.stdout).toMatch(/--store <value>\s+IDEM_STORE\s+records store URL/);
    expect(serve.stdout).toMatch(/--lease-ms <value>\s+IDEM_LEASE_MS\s/);
    expect(serve.stdout).toContain('LOG_LEVEL');
    expect(migrate.stdout.startsWith('Usage: idem migrate --store URL\n')).toBe(true);
    expect(records.stdout.startsWith('Usage: idem records <list|show|sweep|resolve> --store URL [options]\n')).toBe(
      true,
    );
    expect(viaHelp.stdout).toBe(records.stdout);
    expect(probe.stdout).toContain("--delay-header 'Name: value'");
    expect(probe.stdout).toContain('--count-path PATH');
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(
      readFileSync(new URL('../../packages/idem/package.json', import.meta.url), 'utf8'),
    ) as { version: string };
    expect(await inProcess(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });
});

describe.concurrent('idem: wrong arguments exit 2 with a message', () => {
  const cases: Array<[string[], string]> = [
    [[], 'Usage: idem <command> [options]'],
    [
      ['bogus'],
      'idem: unknown command "bogus". Commands: migrate, records, probe, help.\nRun "idem --help" for usage.\n',
    ],
    [
      ['serve'],
      "idem: serve is the payments demo's command, not the library's: in the Idem repository run `npm start`.",
    ],
    [['help', 'bogus'], 'idem: no help for "bogus".'],
    [['migrate'], 'idem migrate: --store URL is required (or set IDEM_STORE)'],
    [
      ['migrate', '--store', 'ftp://nowhere'],
      'idem migrate: --store must be one of sqlite:<path>, memory:, postgres://',
    ],
    [
      ['migrate', '--store', 'dynamodb:local'],
      'idem migrate: DynamoDB stores are dynamodb://host:port[?table=name&region=r], got "dynamodb:local".',
    ],
    [['migrate', '--store'], "idem migrate: Option '--store <value>' argument missing"],
    [
      ['records'],
      'idem records: give a records command: list, show, sweep or resolve.\nRun "idem records --help" for usage.\n',
    ],
    [['records', 'purge'], 'idem records: unknown records command "purge": use list, show, sweep or resolve.'],
    [['records', 'list', '--store', 'memory:'], 'idem records list: --scope is required'],
    [
      ['records', 'list', '--store', 'memory:', '--scope', 'a', '--limit', '0'],
      'idem records list: --limit must be an integer from 1 to 1000, got "0".',
    ],
    [
      ['records', 'list', '--store', 'memory:', '--scope', 'a', '--colour'],
      "idem records list: Unknown option '--colour'",
    ],
    [['records', 'show', '--store', 'memory:', '--scope', 'a'], 'idem records show: give exactly one KEY'],
    [
      ['records', 'sweep', '--store', 'memory:', '--batch-size', 'lots'],
      'idem records sweep: --batch-size must be an integer from 1 to 100000, got "lots".',
    ],
    [['probe'], 'idem probe: give exactly one URL, got 0.'],
    [['probe', 'ftp://example.test/x'], 'idem probe: URL must be an http(s) URL, got "ftp://example.test/x".'],
    [['probe', 'http://127.0.0.1:9/x', '--body', 'not json'], 'idem probe: --body must be JSON, got "not json".'],
    [
      ['probe', 'http://127.0.0.1:9/x', '--body', '[true]'],
      'idem probe: --body has no number or string to change: pass --tampered-body.',
    ],
    [['probe', 'http://127.0.0.1:9/x', '--count-path', 'count'], 'idem probe: --count-path needs --count-url.'],
    [
      ['probe', 'http://127.0.0.1:9/x', '-H', 'no colon'],
      'idem probe: --header must look like "Name: value" (a header name, a colon, the value); the 8 characters given do not (not shown: they may hold a credential).',
    ],
    [['probe', 'http://127.0.0.1:9/x', '--skip', 'first'], 'idem probe: --skip takes one of replay, replay-marker,'],
    [
      ['probe', 'http://127.0.0.1:9/x', '--concurrency', '0'],
      'idem probe: --concurrency must be an integer from 1 to 200, got "0".',
    ],
    [['probe', 'http://127.0.0.1:9/x', '--method', 'GET'], 'idem probe: --method must be a method with a body'],
  ];
  it.each(cases)('idem %j', async (args, message) => {
    const { code, stdout, stderr } = await inProcess(args);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toContain(message);
  });

  it('as a process too: the exit status is 2 and the message is on stderr', async () => {
    const [none, bogus] = await Promise.all([idem([]), idem(['bogus'])]);
    expect([none.code, none.stdout, none.stderr.startsWith('Usage: idem <command> [options]\n')]).toEqual([
      2,
      '',
      true,
    ]);
    expect([bogus.code, bogus.stdout, bogus.stderr.split('\n')[0]]).toEqual([
      2,
      '',
      'idem: unknown command "bogus". Commands: migrate, records, probe, help.',
    ]);
  });
});

describe.concurrent('idem: runtime failures exit 1', () => {
  it('records on a SQLite path that does not exist: exit 1, and no file is created', async () => {
    const dir = tempDir();
    try {
      const path = `${dir.path}/typo.db`;
      const result = await inProcess(['records', 'list', '--store', `sqlite:${path}`, '--scope', 'acct_alice']);
      expect(result).toEqual({
        code: 1,
        stdout: '',
        stderr: `idem records: no SQLite database at ${path} (run idem migrate --store sqlite:${path} to create one).\n`,
      });
      expect(existsSync(path)).toBe(false);
    } finally {
      dir.remove();
    }
  });

  it('probe of an address nothing listens on: exit 1, "cannot reach"', async () => {
    const { code, stdout, stderr } = await inProcess(['probe', 'http://127.0.0.1:9/v1/charges']);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toContain('idem probe: cannot reach http://127.0.0.1:9/v1/charges: fetch failed');
  });
});

describe('idem serve', () => {
  it('starts the demo with flags over env, answers, and drains on SIGTERM (exit 0)', async () => {
    const dir = tempDir();
    try {
      const server = await serveIdem({ IDEM_STORE: 'memory:', IDEM_LEDGER: `${dir.path}/ledger.db`, PORT: '1' }, [
        '--port',
        '0',
        '--store',
        `sqlite:${dir.path}/idem.db`,
      ]);
      const health = await fetch(`${server.url}/healthz`);
      expect(await health.json()).toEqual({ status: 'ok', store: 'sqlite' });
      expect(await server.stop('SIGTERM')).toBe(0);
      expect(server.output()).toMatch(
        new RegExp(`^idem demo listening on ${server.url} — store: SQLite ${dir.path}/idem.db`, 'm'),
      );
      expect(server.output()).toContain('idem demo: SIGTERM, draining\n');
    } finally {
      dir.remove();
    }
  });

  it('LOG_LEVEL that is not a level: exit 2 naming the variable', async () => {
    const result = await demoServe(['--store', 'memory:', '--ledger', ':memory:'], {
      LOG_LEVEL: 'loud',
      PORT: '0',
      IDEM_LAB: '1',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'idem serve: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud".\nRun "idem serve --help" for usage.\n',
    );
  });
});

describe.skipIf(!existsSync(CLI_BUILT))('idem from the build (dist/, as the package bin runs it)', () => {
  it('is an executable script that opens stores by dynamic import', async () => {
    expect(readFileSync(CLI_BUILT, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
    const dir = tempDir();
    try {
      const store = `sqlite:${dir.path}/idem.db`;
      const migrated = await idem(['migrate', '--store', store], {}, { built: true });
      expect(migrated).toEqual({ code: 0, stdout: `Migrated: SQLite ${dir.path}/idem.db\n`, stderr: '' });
      const listed = await idem(
        ['records', 'list', '--store', store, '--scope', 'acct_alice', '--json'],
        {},
        { built: true },
      );
      expect(listed).toEqual({ code: 0, stdout: '[]\n', stderr: '' });
    } finally {
      dir.remove();
    }
  });
});
if (!existsSync(CLI_BUILT))
  console.warn(`\n*** SKIPPING the built-CLI test: ${CLI_BUILT} is missing (npm test builds first). ***\n`);
