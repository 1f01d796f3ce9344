/**
 * @module What the tests of examples/nest11 and examples/nest12 share. Each is installed from the packed tarball
 * (better-sqlite3 linked from the root's install: no native build per run), compiled by its own TypeScript under
 * its own default tsconfig (no output: no error), started, and driven to a replay as the account its
 * `Authorization: Bearer` token names (AuthGuard sets Idem's scope). The work is counted by the example's own
 * `GET /v1/charges`, then read from its SQLite file: one charge row, one record, under that account.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { REPLAYED, ROOT, driveReplay, startExample, timings, useExample } from './kit.js';

const run = promisify(execFile);
const ACCOUNT = 'acct_dave';

interface NestExample {
  readonly name: 'nest11' | 'nest12';
  /** The majors of `@nestjs/core` and `typescript` the example installs. */
  readonly majors: readonly [nest: number, typescript: number];
  /** What `tsc` writes, to start. */
  readonly entry: string;
}

export function describeNestExample({ name, majors, entry }: NestExample): void {
  const example = useExample(name, { linked: { 'better-sqlite3': join(ROOT, 'node_modules/better-sqlite3') } });
  const major = (dependency: string) =>
    Number(
      (
        JSON.parse(readFileSync(join(example().dir, 'node_modules', dependency, 'package.json'), 'utf8')) as {
          version: string;
        }
      ).version.split('.')[0],
    );

  describe(`examples/${name}`, () => {
    it('compiles under its own default tsconfig, with the NestJS and TypeScript it installs', async () => {
      expect([major('@nestjs/core'), major('typescript')]).toEqual(majors);
      const started = Date.now();
      // tsc's errors are on stdout; its exit code is 0 only without any.
      const tsc = await run(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], {
        cwd: example().dir,
        timeout: 120_000,
      }).then(
        ({ stdout }) => ({ code: 0, stdout }),
        (error: { code?: number; stdout?: string }) => ({ code: error.code, stdout: error.stdout }),
      );
      timings[`build ${name}`] = Date.now() - started;
      expect(tsc).toEqual({ code: 0, stdout: '' });
    }, 150_000);

    it('charges once, replays the retry byte for byte, refuses the reused key and an unauthenticated request', async () => {
      const server = await startExample(process.execPath, [entry], { cwd: example().dir });
      const auth = { authorization: `Bearer ${ACCOUNT}` };
      const count = async () =>
        ((await (await fetch(`${server.base}/v1/charges`, { headers: auth })).json()) as { count: number }).count;
      try {
        const anonymous = await fetch(`${server.base}/v1/charges`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
          body: '{"amount":5000,"currency":"usd"}',
        });
        expect(anonymous.status).toBe(401);
        const replay = await driveReplay({
          url: `${server.base}/v1/charges`,
          headers: auth,
          body: { amount: 5000, currency: 'usd' },
          otherBody: { amount: 9000, currency: 'usd' },
          executions: count,
        });
        expect(replay).toEqual(REPLAYED);
      } finally {
        await server.stop();
      }
      const database = new Database(join(example().dir, 'idem.db'), { readonly: true });
      try {
        expect(database.prepare('SELECT account, amount, currency FROM charges').all()).toEqual([
          { account: ACCOUNT, amount: 5000, currency: 'usd' },
        ]);
        expect(database.prepare('SELECT scope, status FROM idem_records').all()).toEqual([
          { scope: ACCOUNT, status: 'succeeded' },
        ]);
      } finally {
        database.close();
      }
    }, 120_000);
  });
}
