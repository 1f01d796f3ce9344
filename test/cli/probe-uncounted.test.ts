/**
 * `idem probe` against a plain API with no idempotency at all, whose every answer is the same constant body: the
 * same answer twice proves nothing there. Without `--count-url` the checks about executions warn ("pass
 * --count-url to check executions"), never pass; with it they fail, counting what ran.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ProbeReport } from '../../packages/idem/src/cli/probe.js';
import { listenLocal } from '../fault-proxy.js';
import { ALL_PASS, inProcess, results } from './helpers.js';

/** Runs every POST (no key is looked at) and answers `{"ok":true}`; GET /count says how many ran. */
async function constantServer() {
  let executions = 0;
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ count: executions }));
        return;
      }
      executions++;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  const port = await listenLocal(server);
  return {
    url: `http://127.0.0.1:${port}`,
    executions: () => executions,
    reset: () => void (executions = 0),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

const observed = (report: ProbeReport, id: string) => report.checks.find((c) => c.id === id)?.observed;

describe('idem probe against an API that answers every request alike', () => {
  let api: Awaited<ReturnType<typeof constantServer>>;
  beforeAll(async () => (api = await constantServer()));
  beforeEach(() => api.reset());
  afterAll(() => api.close());

  it('without --count-url: replay, key order and concurrency warn, never pass', async () => {
    const { code, stdout } = await inProcess(['probe', `${api.url}/charges`, '--concurrency', '5', '--json']);
    const report = JSON.parse(stdout) as ProbeReport;
    // Only the first request and the missing key pass; the reused key fails (the same answer to another payload).
    const warn = ['replay', 'replay-marker', 'key-order', 'concurrent', 'conflict', 'malformed-key'];
    expect(results(report)).toEqual({
      ...ALL_PASS,
      ...Object.fromEntries(warn.map((id) => [id, 'warn'])),
      mismatch: 'fail',
    });
    expect([code, report.sideEffects]).toEqual([1, 'inferred']);
    expect(observed(report, 'replay')).toBe(
      '201, 11 bytes, byte-identical — not counted: it may have run again (pass --count-url to check executions)',
    );
    expect(observed(report, 'key-order')).toBe(
      'keys reordered and re-spaced: the same answer (201, byte-identical) — not counted: it may have run again (pass --count-url to check executions)',
    );
    expect(observed(report, 'concurrent')).toBe(
      '5 at once: 5 × 201; 1 distinct success body; a later retry replays the winner — not counted: the work may have run more than once (pass --count-url to check executions)',
    );
    expect(report.checks.find((c) => c.id === 'replay')?.ietf).toEqual({ ok: null, note: 'not counted' });
    // first, replay, key order, mismatch, 5 duplicates and their retry, no key, two malformed keys: all ran.
    expect(api.executions()).toBe(13);
  });

  it('the table says so in its header line', async () => {
    const { stdout } = await inProcess(['probe', `${api.url}/charges`, '--concurrency', '2']);
    expect(stdout.split('\n')[1]).toBe(
      'payload {"amount":500,"currency":"usd"} · tampered {"amount":501,"currency":"usd"} · 2 concurrent · side effects not counted: a check that needs a count warns (pass --count-url to check executions)',
    );
  });

  it('with --count-url: the same checks fail, each with what it counted', async () => {
    const args = ['probe', `${api.url}/charges`, '--count-url', `${api.url}/count`, '--count-path', 'count'];
    const { code, stdout } = await inProcess([...args, '--concurrency', '5', '--json']);
    const report = JSON.parse(stdout) as ProbeReport;
    expect(results(report)).toMatchObject({ first: 'pass', replay: 'fail', 'key-order': 'fail', concurrent: 'fail' });
    expect(code).toBe(1);
    expect(observed(report, 'replay')).toBe(
      '201, 11 bytes, byte-identical; 1 side effect — the retry ran the work again',
    );
    expect(observed(report, 'concurrent')).toBe(
      '5 at once: 5 × 201; 6 side effects; a later retry replays the winner — executed 6 times',
    );
  });
});
