/**
 * No store password is ever printed (issue 30, finding 2): the built `idem` CLI and the demo's `idem serve`, given
 * a store URL with a password in every form — user info with an empty user, a URL that does not parse, `?password=`,
 * `?secretAccessKey=`, a Redis Cluster seed list, a driver error that repeats the password — print one line (and,
 * for wrong arguments, the pointer to --help), exit non-zero, and never the password. The start-up line masks it;
 * a Redis Cluster's password never reaches a DNS lookup.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { CLI_BUILT, demoServe, idem, serveIdem, type CliResult } from '../cli/helpers.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../services.js';

const LAB = { IDEM_LAB: '1', PORT: '0', IDEM_LEDGER: ':memory:' };
const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const redis = await serviceAvailable('Redis', REDIS_URL);
const PG = new URL(POSTGRES_URL).host;

const NOT_VALID = (name: string, scheme: string) =>
  `${name} is not a valid store URL (${scheme}://…): percent-encode any @ # / ? : % or space in its user name and password.`;

/** A URL, then what the CLI (`records list`) and the demo print about it. */
const CASES: Array<{ url: string; cli: [number, string]; serve: string; needs?: boolean }> = [
  {
    url: 'redis://:S3CRET@127.0.0.1:1',
    cli: [1, 'idem records: cannot open the store redis://:***@127.0.0.1:1: Connection is closed.'],
    serve: 'IDEM_STORE redis://:***@127.0.0.1:1: cannot open the store: Connection is closed.',
  },
  {
    url: 'redis://:S3#CRET@127.0.0.1:1',
    cli: [2, `idem records list: ${NOT_VALID('--store', 'redis')}`],
    serve: NOT_VALID('IDEM_STORE', 'redis'),
  },
  {
    url: 'postgres://app:S3/CRET@127.0.0.1:1/db',
    cli: [2, `idem records list: ${NOT_VALID('--store', 'postgres')}`],
    serve: NOT_VALID('IDEM_STORE', 'postgres'),
  },
  {
    url: 'postgres://app@127.0.0.1:1/db?password=S3CRET',
    cli: [1, 'idem records: postgres://app@127.0.0.1:1/db?password=***: connect ECONNREFUSED 127.0.0.1:1'],
    serve:
      'IDEM_STORE postgres://app@127.0.0.1:1/db?password=***: cannot open the store: connect ECONNREFUSED 127.0.0.1:1',
  },
  {
    url: 'dynamodb://127.0.0.1:1?secretAccessKey=S3CRET',
    cli: [1, 'idem records: dynamodb://127.0.0.1:1?secretAccessKey=***: connect ECONNREFUSED 127.0.0.1:1'],
    serve:
      'IDEM_STORE dynamodb://127.0.0.1:1?secretAccessKey=***: cannot open the store: connect ECONNREFUSED 127.0.0.1:1',
  },
  {
    url: 'redis-cluster://:S3CRET@127.0.0.1:1',
    cli: [
      1,
      'idem records: cannot open the store redis-cluster://:***@127.0.0.1:1: None of startup nodes is available',
    ],
    serve: 'IDEM_STORE redis-cluster://:***@127.0.0.1:1: cannot open the store: None of startup nodes is available',
  },
  {
    // The server repeats the user name, which is the password too: the known value is masked wherever it stands.
    url: `postgres://S3CRET:S3CRET@${PG}/test`,
    cli: [1, `idem records: postgres://***:***@${PG}/test: role "***" does not exist`],
    serve: `IDEM_STORE postgres://***:***@${PG}/test: cannot open the store: role "***" does not exist`,
    needs: postgres,
  },
];

/** A `--require` preload that records every name the process asks DNS for (ioredis resolves seed hosts with it). */
const WATCH_DNS = `const dns = require('node:dns');
const fs = require('node:fs');
const lookup = dns.lookup;
dns.lookup = function (hostname, ...rest) {
  fs.appendFileSync(process.env.IDEM_TEST_LOOKUPS, hostname + '\\n');
  return lookup.call(this, hostname, ...rest);
};
`;

/** Everything printed, which must be exactly `lines` and hold no part of the password. */
function printed({ stdout, stderr }: CliResult, lines: string[]): void {
  expect(`${stdout}${stderr}`).not.toMatch(/S3|CRET/);
  expect(stdout).toBe('');
  expect(stderr).toBe(lines.map((line) => `${line}\n`).join(''));
}

describe.skipIf(!existsSync(CLI_BUILT)).concurrent('the built idem CLI never prints a store password', () => {
  it.each(CASES.filter(({ needs }) => needs !== false))('records list --store $url', async ({ url, cli }) => {
    const result = await idem(['records', 'list', '--store', url, '--scope', 'acct_a'], {}, { built: true });
    const [code, line] = cli;
    expect(result.code).toBe(code);
    printed(result, code === 2 ? [line, 'Run "idem records list --help" for usage.'] : [line]);
  });
});

describe.concurrent("the demo's idem serve never prints a store password", () => {
  it.each(CASES.filter(({ needs }) => needs !== false))('--store $url', async ({ url, serve }) => {
    const result = await demoServe(['--store', url], LAB);
    expect(result.code).toBe(2);
    printed(result, [`idem serve: ${serve}`, 'Run "idem serve --help" for usage.']);
  });
});

describe.skipIf(!existsSync(CLI_BUILT)).concurrent('redis-cluster://:pw@host:port: the password is no host', () => {
  it('the CLI and the demo look up the seed host only, never a host holding the password', async () => {
    const dir = tempDir('idem-dns-');
    try {
      const preload = join(dir.path, 'watch-dns.cjs');
      writeFileSync(preload, WATCH_DNS);
      const url = 'redis-cluster://:S3CRET@localhost:1';
      const [cli, serve] = [join(dir.path, 'cli.txt'), join(dir.path, 'serve.txt')];
      const [fromCli, fromServe] = await Promise.all([
        idem(['records', 'list', '--store', url, '--scope', 'a'], { IDEM_TEST_LOOKUPS: cli }, { built: true, preload }),
        demoServe(['--store', url], { ...LAB, IDEM_TEST_LOOKUPS: serve }, { preload }),
      ]);
      printed(fromCli, [
        'idem records: cannot open the store redis-cluster://:***@localhost:1: None of startup nodes is available',
      ]);
      printed(fromServe, [
        'idem serve: IDEM_STORE redis-cluster://:***@localhost:1: cannot open the store: None of startup nodes is available',
        'Run "idem serve --help" for usage.',
      ]);
      const names = (file: string) => [...new Set(readFileSync(file, 'utf8').trim().split('\n'))];
      expect([names(cli), names(serve)]).toEqual([['localhost'], ['localhost']]);
    } finally {
      dir.remove();
    }
  });
});

describe('the start-up line masks the password of a store the demo opened', () => {
  it.skipIf(!redis)('Redis: the user info and ?password=', async () => {
    const prefix = `idem-url-${randomUUID().slice(0, 8)}:`;
    const host = new URL(REDIS_URL).host;
    const server = await serveIdem({
      ...LAB,
      IDEM_STORE: `redis://:S3CRET@${host}/0?password=S3CRET&prefix=${prefix}`,
    });
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(server.output().split('\n')[0]).toBe(
      `idem demo listening on ${server.url} — store: Redis redis://:***@${host}/0?password=*** prefix ${prefix} (records), SQLite :memory: (ledger) — lab mode`,
    );
    expect(server.output()).not.toMatch(/S3|CRET/);
  });

  it.skipIf(!postgres)('PostgreSQL: ?password= and ?sslpassword=', async () => {
    const schema = `idem_url_${randomUUID().slice(0, 8)}`;
    const store = `${POSTGRES_URL}?password=S3CRET&sslpassword=S3CRET&schema=${schema}`;
    const server = await serveIdem({ ...LAB, IDEM_STORE: store });
    try {
      expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
      expect(await server.stop('SIGTERM')).toBe(0);
      expect(server.output().split('\n')[0]).toBe(
        `idem demo listening on ${server.url} — store: PostgreSQL ${POSTGRES_URL}?password=***&sslpassword=*** schema ${schema} (records and ledger, one transaction) — lab mode`,
      );
      expect(server.output()).not.toMatch(/S3|CRET/);
    } finally {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });
});
