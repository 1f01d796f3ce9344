/**
 * examples/next-route: a Next.js App Router route handler behind `idem/http` on PostgreSQL, installed from the
 * packed tarball with Next.js and React linked from test/runtimes/next (installed there on first use), then
 * `next build` and `npm start` (server.js: Next's handler on node:http) as in production, and driven to a replay. The build uses webpack: Turbopack
 * refuses a `next` linked from outside the project (a normal install of the example builds with either). The work is counted in the example's
 * ledger table; its schema is dropped afterwards.
 */
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { REPLAYED, runToReplay, timings, useExample } from './kit.js';
import { runtimePackage } from './runtimes.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const schema = `idem_example_next_${process.pid}`;
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
const example = useExample('next-route', {
  enabled: available,
  linked: Object.fromEntries(['next', 'react', 'react-dom'].map((name) => [name, runtimePackage('next', name)])),
  cleanup: async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool.end();
  },
});

/** The example's ledger rows; none before its first request creates the table. */
async function ledgerRows(): Promise<number> {
  const { rows } = await pool.query<{ table: string | null }>('SELECT to_regclass($1)::text AS table', [
    `${schema}.charges`,
  ]);
  if (rows[0]?.table == null) return 0;
  return Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${schema}.charges`)).rows[0]?.n);
}

/** A port nothing listens on now (server.js takes PORT; it cannot be asked for a free one). */
const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });

describe.skipIf(!available)('examples/next-route', () => {
  it('next build, npm start: charges once, replays byte for byte, refuses the reused key; one ledger row', async () => {
    const env = { DATABASE_URL: POSTGRES_URL, PG_SCHEMA: schema, NEXT_TELEMETRY_DISABLED: '1' };
    const next = join(example().dir, 'node_modules/next/dist/bin/next');
    const started = Date.now();
    await promisify(execFile)(process.execPath, [next, 'build', '--webpack'], {
      cwd: example().dir,
      env: { ...process.env, ...env },
      timeout: 240_000,
    });
    timings['next build'] = Date.now() - started;
    // `npm start`: server.js, Next's handler on node:http, which prints `listening on <url>` like every example.
    const replay = await runToReplay(example(), process.execPath, ['server.js'], {
      env: { ...env, PORT: String(await freePort()), HOSTNAME: '127.0.0.1' },
      path: '/api/charges',
      headers: { cookie: 'session=acct_erin' },
      executions: ledgerRows,
    });
    expect(replay).toEqual(REPLAYED);
  }, 300_000);
});
