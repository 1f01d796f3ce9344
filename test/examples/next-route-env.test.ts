/**
 * examples/next-route without DATABASE_URL: `npm start` (server.js) exits 1 with one line on stderr, before loading
 * Next.js, instead of serving a 500 per request ("no PostgreSQL user name specified"). Run from the source tree: the
 * check comes before any import the example installs.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const server = fileURLToPath(new URL('../../examples/next-route/server.js', import.meta.url));

describe('examples/next-route: DATABASE_URL', () => {
  it('missing: exit 1, one line on stderr, nothing on stdout', async () => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'DATABASE_URL'));
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(process.execPath, [server], { env, timeout: 30_000 }, (_error, stdout, stderr) =>
        resolve({ code: child.exitCode, stdout, stderr }),
      );
    });
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: 'next-route: DATABASE_URL is not set (export DATABASE_URL=postgres://… before npm start)\n',
    });
  });
});
