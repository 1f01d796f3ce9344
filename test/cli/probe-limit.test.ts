/**
 * `idem probe` reads at most `--max-response-bytes` of any answer (4 MiB by default): against a server whose body
 * never ends, the check fails with one line, the connection is dropped, and the probe's memory stays bounded.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProbeReport } from '../../packages/idem/src/cli/probe.js';
import { tempDir } from '../harness.js';
import { CLI_BUILT, ROOT, idem, inProcess } from './helpers.js';

const CHUNK = Buffer.alloc(64 * 1024, 'a');
const TOO_LARGE = (status: number, limit: number) =>
  `${status} with a body over ${limit} bytes (--max-response-bytes): stopped reading and dropped the connection`;

/** `/endless` and `/count` stream a body without end; `/charges` answers each key once, then without end. */
async function endlessServer() {
  const closed: Array<Promise<void>> = [];
  const keys = new Set<string>();
  const endless = (res: ServerResponse, status: number) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    const pump = () => {
      while (!res.destroyed && res.write(CHUNK));
    };
    res.on('drain', pump);
    closed.push(once(res, 'close').then(() => undefined));
    pump();
  };
  const server = createServer((req, res) => {
    req.resume();
    const key = String(req.headers['idempotency-key'] ?? '');
    if (req.url === '/endless') return endless(res, 201);
    if (req.url === '/count') return endless(res, 200);
    if (keys.has(key)) return endless(res, 201);
    keys.add(key);
    res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"ch_1"}');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** Resolves once every endless answer so far has lost its connection. */
    dropped: () => Promise.all(closed).then(() => closed.length),
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('idem probe against a body without end', () => {
  let server: Awaited<ReturnType<typeof endlessServer>>;
  const dir = tempDir();
  beforeAll(async () => {
    server = await endlessServer();
  });
  afterAll(async () => {
    await server.close();
    dir.remove();
  });

  it('the built probe stops at 4 MiB by default: the first check fails in one line, exit 1, peak RSS bounded', async () => {
    const rssFile = `${dir.path}/maxrss`;
    // The child writes its own peak RSS (KiB) as it exits.
    const hook = `import{writeFileSync}from'node:fs';process.on('exit',()=>writeFileSync(${JSON.stringify(rssFile)},String(process.resourceUsage().maxRSS)))`;
    const child = spawn(
      process.execPath,
      [
        '--import',
        `data:text/javascript,${encodeURIComponent(hook)}`,
        CLI_BUILT,
        'probe',
        `${server.url}/endless`,
        '--timeout-ms',
        '5000',
      ],
      { cwd: ROOT, env: { PATH: process.env.PATH, NODE_NO_WARNINGS: '1' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    const [code] = (await once(child, 'close')) as [number | null];
    const rows = stdout.split('\n').map((line) => line.replace(/ {2,}/g, ' | '));
    expect(code).toBe(1);
    expect(rows[5]).toBe(`first request runs once | FAIL | · | · | ${TOO_LARGE(201, 4 * 1024 * 1024)}`);
    expect(rows.filter((row) => row.includes('skipped: the first request failed')).length).toBe(8);
    expect(rows).toContain('9 checks: 0 pass, 0 warn, 1 fail, 8 skip — FAILED');
    const maxRssMiB = Number(readFileSync(rssFile, 'utf8')) / 1024;
    expect(maxRssMiB).toBeLessThan(160);
  });

  it('--max-response-bytes: a later answer over it fails its check, and the connection is dropped at once', async () => {
    const skip = ['key-order', 'mismatch', 'concurrent', 'conflict', 'missing-key', 'malformed-key'];
    const args = [`${server.url}/charges`, '--max-response-bytes', '65536', '--json'];
    const { code, stdout } = await inProcess(['probe', ...args, ...skip.flatMap((id) => ['--skip', id])]);
    const report = JSON.parse(stdout) as ProbeReport;
    const failed = `request failed: ${TOO_LARGE(201, 65536)}`;
    expect(code).toBe(1);
    expect(report.checks.slice(0, 3).map((c) => [c.id, c.result, c.observed])).toEqual([
      ['first', 'pass', '201, 13 bytes'],
      ['replay', 'fail', failed],
      ['replay-marker', 'fail', failed],
    ]);
    // This process is still running: only the probe dropping the connection can have closed the answer.
    expect(await server.dropped()).toBeGreaterThan(0);
  });

  it('--count-url answering without end: one line, exit 1', async () => {
    const count = `${server.url}/count`;
    const args = [`${server.url}/charges`, '--count-url', count, '--max-response-bytes', '1000'];
    const { code, stdout, stderr } = await inProcess(['probe', ...args]);
    expect({ code, stdout, stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: `idem probe: --count-url ${count} answered ${TOO_LARGE(200, 1000)}\n`,
    });
  });

  it('the flag is validated in one line, and listed in idem --help and idem probe --help', async () => {
    const [zero, help, probeHelp] = await Promise.all([
      inProcess(['probe', `${server.url}/charges`, '--max-response-bytes', '0']),
      idem(['--help']),
      inProcess(['probe', '--help']),
    ]);
    expect([zero.code, zero.stderr]).toEqual([
      2,
      'idem probe: --max-response-bytes must be an integer from 1 to 1073741824, got "0".\nRun "idem probe --help" for usage.\n',
    ]);
    expect(help.stdout).toContain('read up to --max-response-bytes N (default 4 MiB), then the check fails\n');
    expect(probeHelp.stdout).toContain("  --max-response-bytes N       the most read of one answer's body");
  });
});
