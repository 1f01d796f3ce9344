/**
 * Timeouts survive the garbage collector. On Node 20 `AbortSignal.any` holds its sources weakly: a timeout signal
 * nothing else held was collected and never fired, and `idem probe --timeout-ms` (or a caller's timeout given to
 * `idempotentFetch`) waited for ever on a server that drips its body. The lease's deadline (a double execution if
 * it never fired) is held by its own timer. Each case runs in a child process with a full GC every 20 ms.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHILD = fileURLToPath(new URL('../fixtures/gc-timeouts-child.ts', import.meta.url));
/** Past this the child is killed and the case fails: the timeouts under test are 1 s and 800 ms. */
const HANG_MS = 15_000;

interface Outcome {
  readonly mode: string;
  readonly outcome: string;
  readonly ms: number;
}

async function run(mode: string, url = ''): Promise<Outcome | 'hung'> {
  const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', CHILD, mode, url], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, NODE_NO_WARNINGS: '1' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), HANG_MS);
  const [code] = (await once(child, 'close')) as [number | null];
  clearTimeout(killer);
  return code === null ? 'hung' : (JSON.parse(stdout) as Outcome);
}

describe('timeouts under a full GC every 20 ms', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    // 201 with a 1,000,000-byte body, one byte every 100 ms: headers at once, the body never in time.
    server = createServer((req, res) => {
      req.resume();
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': '1000000' });
      const drip = setInterval(() => res.write('a'), 100);
      res.on('close', () => clearInterval(drip));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('idem probe --timeout-ms 1000 against a dripping body: the first request fails at its timeout', async () => {
    const result = await run('probe', url);
    expect(result === 'hung' ? result : result.outcome).toBe(
      `exit 1: idem probe: cannot reach ${url}: The operation was aborted due to timeout`,
    );
  });

  it('idempotentFetch with the caller’s AbortSignal.timeout(1000) and its own signal: the body read aborts', async () => {
    const result = await run('client', url);
    expect(result === 'hung' ? result : result.outcome).toBe('TimeoutError');
  });

  it('a lease whose renewals never answer: its work’s signal aborts LEASE_LOST at the holder’s deadline', async () => {
    const result = await run('lease');
    expect(result === 'hung' ? result : result.outcome).toBe('LEASE_LOST');
  });
});
