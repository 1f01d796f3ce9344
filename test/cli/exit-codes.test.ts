/**
 * `idem`'s exit codes and one-line errors an operator meets first: the help lists every store `migrate` serves and
 * the exit codes; a store driver that is not installed exits 3 (not 2, wrong arguments) naming the package; a
 * PostgreSQL or MySQL database without Idem's table says to run `idem migrate` with that URL.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../harness.js';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../services.js';
import { idem, inProcess } from './helpers.js';

describe('idem --help', () => {
  it('lists MySQL under migrate, and the exit codes', async () => {
    const { code, stdout } = await inProcess(['--help']);
    expect(code).toBe(0);
    expect(stdout).toContain(
      "  migrate --store URL          create Idem's records table and indexes (SQLite, PostgreSQL, MySQL, DynamoDB)\n",
    );
    expect(stdout).toContain(
      '\nExit codes: 0 ok; 1 failed (a probe check failed, a store refused or could not be reached); 2 wrong arguments;\n' +
        '3 a store driver is not installed (the message names the package).\n',
    );
  });
});

describe('a store driver that is not installed', () => {
  const dir = tempDir();
  afterAll(() => dir.remove());
  /** A preload that makes `import(name)` fail as it does where the package is not installed. */
  const hiding = (name: string): string => {
    const hooks = `export async function resolve(specifier, context, next) {
  if (specifier === ${JSON.stringify(name)} || specifier.startsWith(${JSON.stringify(`${name}/`)}))
    throw Object.assign(new Error("Cannot find package '${name}'"), { code: 'ERR_MODULE_NOT_FOUND' });
  return next(specifier, context);
}`;
    const file = join(dir.path, `hide-${name.replace('/', '-')}.cjs`);
    writeFileSync(
      file,
      `require('node:module').register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hooks)}));\n`,
    );
    return file;
  };

  it.each([
    [
      'pg',
      'postgres://app@127.0.0.1:9/payments',
      'postgres:// stores need the "pg" package: install it (npm install pg).',
    ],
    [
      'mysql2',
      'mysql://app@127.0.0.1:9/payments',
      'mysql:// stores need the "mysql2" package: install it (npm install mysql2).',
    ],
  ])('without %s: exit 3 and one line naming the package', async (name, url, message) => {
    const result = await idem(['migrate', '--store', url], {}, { preload: hiding(name) });
    expect(result).toEqual({ code: 3, stdout: '', stderr: `idem migrate: ${message}\n` });
  });
});

const suffix = randomBytes(4).toString('hex');
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);

/** Each database with a schema or table name Idem's table was never created under, and how to drop it after. */
const DATABASES = [
  {
    name: 'PostgreSQL',
    up: postgresUp,
    url: `${POSTGRES_URL}?schema=idem_nohint_${suffix}`,
    drop: async () => {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS "idem_nohint_${suffix}" CASCADE`);
      await pool.end();
    },
  },
  {
    name: 'MySQL',
    up: mysqlUp,
    url: `${MYSQL_URL}?table=idem_nohint_${suffix}`,
    drop: async () => {
      const connection = await mysql.createConnection(MYSQL_URL);
      await connection.query(`DROP TABLE IF EXISTS \`idem_nohint_${suffix}\``);
      await connection.end();
    },
  },
];

describe.each(DATABASES)('$name without Idem’s table', ({ up, url, drop }) => {
  afterAll(async () => {
    if (up) await drop();
  });

  it.skipIf(!up)(
    'records list: exit 1, one line naming the command that creates it; after migrate, it lists',
    async () => {
      const missing = await inProcess(['records', 'list', '--store', url, '--scope', 'acct_a']);
      expect(missing).toEqual({
        code: 1,
        stdout: '',
        stderr: `idem records: ${url}: Idem's table does not exist there: run idem migrate --store '${url}'.\n`,
      });
      expect((await inProcess(['migrate', '--store', url])).code).toBe(0);
      expect(await inProcess(['records', 'list', '--store', url, '--scope', 'acct_a', '--json'])).toEqual({
        code: 0,
        stdout: '[]\n',
        stderr: '',
      });
    },
  );
});
