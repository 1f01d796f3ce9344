/**
 * `idem probe` against the demo server (every check passes) and against a deliberately broken server written
 * here (a read-then-write claim with an await in between, and no fingerprint): the probe must report exactly the
 * failures that server has.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tamper, visible, type ProbeReport } from '../../packages/idem/src/cli/probe.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { ALL_PASS, idem, inProcess, results, serveLocal } from './helpers.js';

describe('idem probe against the demo server', () => {
  const dir = tempDir();
  let demo: DemoProcess;
  let args: string[];
  beforeAll(async () => {
    demo = await startDemo({ IDEM_STORE: `sqlite:${dir.path}/idem.db`, LOG_LEVEL: 'warn' });
    args = [
      'probe',
      `${demo.url}/v1/charges`,
      '-H',
      'Authorization: Bearer sk_test_alice',
      '--body',
      '{"amount":500,"currency":"usd"}',
      '--count-url',
      `${demo.url}/v1/balance`,
      '--count-path',
      'count',
      // Held long enough that every duplicate arrives while the first attempt runs, even on a loaded machine.
      '--delay-header',
      'Idem-Lab-Delay-Ms: 2500',
    ];
  });
  afterAll(async () => {
    await demo.stop();
    dir.remove();
  });

  it('--json: every check passes, exit 0; the profile columns grade the 400 as Stripe’s, not the draft’s 422', async () => {
    const { code, stdout, stderr } = await idem([...args, '--json', '--concurrency', '8']);
    const report = JSON.parse(stdout) as ProbeReport;
    expect(results(report)).toEqual(ALL_PASS);
    expect(code).toBe(0);
    expect([report.ok, report.sideEffects, report.concurrency, report.tamperedBody]).toEqual([
      true,
      'counted',
      8,
      '{"amount":501,"currency":"usd"}',
    ]);
    const byId = new Map(report.checks.map((c) => [c.id, c]));
    expect(byId.get('first')?.observed).toBe('201, 146 bytes; 1 side effect');
    expect(byId.get('replay')?.observed).toBe('201, 146 bytes, byte-identical; 0 side effects');
    expect(byId.get('replay-marker')?.observed).toBe(
      'Idempotent-Replayed: true on the replay, absent on the first answer',
    );
    expect(byId.get('mismatch')?.observed).toBe(
      '400 urn:idem:problem:idempotency-key-reused; 0 side effects; control: the same payload with a fresh key → 201',
    );
    expect([byId.get('mismatch')?.ietf, byId.get('mismatch')?.stripe]).toEqual([
      { ok: false, note: 'wants 422' },
      { ok: true, note: '400' },
    ]);
    expect(byId.get('concurrent')?.observed).toBe(
      '8 at once: 1 × 201, 7 × 409; 1 side effect; a later retry replays the winner',
    );
    // An in-flight duplicate is told to come back in 1 s (soon, not when the lease ends).
    expect(byId.get('conflict')?.observed).toBe(
      '7 × 409 with Retry-After: 1 (urn:idem:problem:idempotency-key-in-use)',
    );
    expect(byId.get('missing-key')?.observed).toBe(
      '201: ran without protection (keys are optional here); 1 side effect',
    );
    expect(byId.get('malformed-key')?.observed).toBe(
      'empty → 400 urn:idem:problem:idempotency-key-invalid; 300 chars → 400 urn:idem:problem:idempotency-key-invalid; 0 side effects',
    );
    // Progress goes to stderr, one line per check, so --json output stays parseable.
    expect(stderr.trim().split('\n').length).toBe(9);
  });

  it('the table for people: one row per check, the verdict line, exit 0', async () => {
    const { code, stdout } = await idem([...args, '--concurrency', '4', '--skip', 'missing-key']);
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toBe(`idem probe: POST ${demo.url}/v1/charges`);
    expect(lines[3]).toMatch(/^CHECK\s+RESULT\s+IETF DRAFT\s+STRIPE\s+OBSERVED$/);
    expect(lines[5]).toMatch(/^first request runs once\s+PASS\s+·\s+·\s+201, 146 bytes; 1 side effect$/);
    expect(lines.find((l) => l.startsWith('reused key, other payload: refused'))).toMatch(
      /\sPASS\s+✗ wants 422\s+✓ 400\s+400 urn:idem/,
    );
    expect(lines.find((l) => l.startsWith('missing key'))).toMatch(/\sSKIP\s+·\s+·\s+skipped \(--skip\)$/);
    expect(stdout).toContain('\n9 checks: 8 pass, 0 warn, 0 fail, 1 skip — OK\n');
  });

  it('with IDEM_MISMATCH_STATUS=422 the draft column turns ✓ and Stripe’s ✗ — still a pass', async () => {
    const strict = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem422.db`,
      IDEM_MISMATCH_STATUS: '422',
      LOG_LEVEL: 'warn',
    });
    try {
      const { code, stdout } = await idem([
        'probe',
        `${strict.url}/v1/charges`,
        '-H',
        'Authorization: Bearer sk_test_bob',
        '--json',
        ...['--skip', 'concurrent', '--skip', 'conflict', '--skip', 'missing-key', '--skip', 'malformed-key'],
      ]);
      const mismatch = (JSON.parse(stdout) as ProbeReport).checks.find((c) => c.id === 'mismatch');
      expect(code).toBe(0);
      expect(mismatch).toMatchObject({
        result: 'pass',
        ietf: { ok: true, note: '422' },
        stripe: { ok: false, note: 'wants 400' },
      });
    } finally {
      await strict.stop();
    }
  });
});

/**
 * What not to build: the claim reads, awaits (a database round trip), then writes — two requests both read
 * nothing and both write — and a stored answer is replayed to any payload, because nothing is fingerprinted.
 * The probe's duplicates carry `X-Duplicates: n`: each one's round trip ends once all n have read.
 */
async function brokenServer(): Promise<{ url: string; executions: () => number; close: () => Promise<void> }> {
  const records = new Map<string, { body?: string }>();
  const reads = new Map<string, number>();
  let executions = 0;
  const server: Server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks).toString();
      const answer = (status: number, text: string, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(text);
      };
      if (req.method === 'GET' && req.url === '/count') return answer(200, JSON.stringify({ count: executions }));
      const execute = async (): Promise<string> => {
        executions++;
        return JSON.stringify({ id: `ord_${randomUUID()}`, ...(JSON.parse(body) as object) });
      };
      const key = req.headers['idempotency-key'];
      if (typeof key !== 'string') return answer(201, await execute());
      const existing = records.get(key); // read…
      reads.set(key, (reads.get(key) ?? 0) + 1);
      const duplicates = Number(req.headers['x-duplicates'] ?? 1);
      await waitFor(`${duplicates} reads of one key`, () => (reads.get(key) ?? 0) >= duplicates); // …a round trip later…
      if (existing?.body !== undefined) return answer(201, existing.body, { 'idempotent-replayed': 'true' }); // no fingerprint check
      if (existing) return answer(409, '{"error":"in progress"}', { 'retry-after': '1' });
      records.set(key, {}); // …write: every request that read nothing gets here.
      const result = await execute();
      records.set(key, { body: result });
      return answer(201, result);
    })().catch(() => res.destroy());
  });
  return { ...(await serveLocal(server)), executions: () => executions };
}

describe('idem probe against a broken server', () => {
  let broken: Awaited<ReturnType<typeof brokenServer>>;
  beforeAll(async () => (broken = await brokenServer()));
  afterAll(() => broken.close());
  /** `idem probe` of the broken server's /orders: `concurrency` duplicates, each held until all have read; then `more`. */
  const probe = (concurrency: number, ...more: string[]) =>
    idem([
      'probe',
      `${broken.url}/orders`,
      '--body',
      '{"sku":"A1","qty":1}',
      '--concurrency',
      String(concurrency),
      '--delay-header',
      `X-Duplicates: ${concurrency}`,
      ...more,
    ]);

  it('reports the double execution and the replay to a tampered payload; exit 1', async () => {
    const { code, stdout } = await probe(5, '--count-url', `${broken.url}/count`, '--count-path', 'count', '--json');
    const report = JSON.parse(stdout) as ProbeReport;
    expect(results(report)).toEqual({
      ...ALL_PASS,
      mismatch: 'fail',
      concurrent: 'fail',
      conflict: 'fail',
      'malformed-key': 'warn',
    });
    expect(code).toBe(1);
    expect([report.ok, report.summary]).toEqual([false, { pass: 5, fail: 3, warn: 1, skip: 0 }]);
    const byId = new Map(report.checks.map((c) => [c.id, c]));
    expect(byId.get('mismatch')?.observed).toBe(
      '201: replayed the first answer to another payload instead of refusing it (the fingerprint is not checked); 0 side effects',
    );
    expect(byId.get('mismatch')?.stripe).toEqual({ ok: false, note: 'wants 400' });
    // Five duplicates read "nothing there" before any wrote (each waited for all five reads), so all five ran.
    // (The later retry replays whichever duplicate wrote last.)
    expect(byId.get('concurrent')?.observed).toMatch(
      /^5 at once: 5 × 201; 5 side effects; a later retry.* — executed 5 times$/,
    );
    expect(byId.get('conflict')?.observed).toBe('no 409: the duplicates ran (5 executions)');
    expect(byId.get('malformed-key')?.observed).toBe(
      'empty → 201; 300 chars → 201; 2 side effects — accepted a malformed key',
    );
    // 1 first + 5 concurrent + 1 missing key + 2 malformed; the control for the mismatch never ran (no refusal).
    expect(broken.executions()).toBe(9);
  });

  it('without --count-url, the double execution is inferred from distinct bodies; the replays only warn', async () => {
    const { code, stdout } = await probe(3, '--skip', 'missing-key', '--skip', 'malformed-key');
    expect(code).toBe(1);
    expect(stdout).toMatch(
      /\nconcurrent duplicates run once\s+FAIL\s+✗ one execution\s+✗ one execution\s+3 at once: 3 × 201; 3 distinct success bodies; a later retry.* — executed 3 times\n/,
    );
    expect(stdout).toContain('side effects not counted: a check that needs a count warns');
    expect(stdout).toMatch(/\nretry replays the first answer\s+WARN\s.* \(pass --count-url to check executions\)\n/);
    expect(stdout).toContain('\n9 checks: 2 pass, 2 warn, 3 fail, 2 skip — FAILED\n');
  });
});

describe('tamper: the payload for the reused-key check', () => {
  it.each([
    ['{"amount":500,"currency":"usd"}', '{"amount":501,"currency":"usd"}'],
    ['{"order":{"lines":[{"sku":"A1","qty":2}]}}', '{"order":{"lines":[{"sku":"A1","qty":3}]}}'],
    ['{"note":"hi","flag":true}', '{"note":"hi-tampered","flag":true}'],
    ['[1,2]', '[2,2]'],
  ])('%s → %s', (body, expected) => {
    expect(tamper(body)).toBe(expected);
  });
});

/**
 * A hostile API: its answers carry terminal escape sequences — clear the screen (ESC[2J, and C1 CSI `\x9b2J`),
 * set the window title (OSC, ended by BEL or by ST), carriage returns and a fake verdict line — in its problem
 * types (JSON, so any character) and in a header (Latin-1 bytes, so C1 and not C0). Keys: a new key runs
 * (201); the same key and bytes replay; another payload is refused (422); a held duplicate gets 409; a missing,
 * empty or over-long key 400.
 */
const HOSTILE_TYPE = 'urn:x\x1b[2J\x1b[H\x1b]0;owned\x07\r\nALL CHECKS PASSED\x1b]2;t\x1b\\\x9b2J\x7f\t';
const HOSTILE_REPLAYED = 'true\x9b2J\x9b1;1HALL CHECKS PASSED\x85';
const HOSTILE_RETRY_AFTER = 'Jan 1 2026 (\x9b2J\x9b1;1HALL CHECKS PASSED)';

async function hostileServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const seen = new Map<string, string>();
  let charges = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      const key = req.headers['idempotency-key'];
      const problem = (status: number, type: string, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/problem+json', ...headers });
        res.end(JSON.stringify({ type, title: '\x1b[2J\x1bc', status }));
      };
      // V8's Date.parse skips a parenthesised comment, so the probe takes this for a valid HTTP date and prints it.
      if (req.headers['x-hold'] !== undefined)
        return problem(409, `${HOSTILE_TYPE}409`, { 'retry-after': HOSTILE_RETRY_AFTER });
      if (typeof key !== 'string' || key === '' || key.length > 255) return problem(400, `${HOSTILE_TYPE}400`);
      const stored = seen.get(key);
      if (stored === undefined) {
        seen.set(key, body);
        res.writeHead(201, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ id: `ch_${++charges}` }));
      }
      if (stored !== body) return problem(422, `${HOSTILE_TYPE}422`);
      res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replayed': HOSTILE_REPLAYED });
      res.end(JSON.stringify({ id: `ch_${charges}` }));
    });
  });
  const served = await serveLocal(server);
  return { url: `${served.url}/v1/charges`, close: served.close };
}

describe('idem probe against a hostile server', () => {
  let hostile: Awaited<ReturnType<typeof hostileServer>>;
  beforeAll(async () => (hostile = await hostileServer()));
  afterAll(() => hostile.close());
  const args = () => ['probe', hostile.url, '--concurrency', '2', '--delay-header', 'X-Hold: 1'];
  /** C0 (but the newline that ends a line), DEL and C1: none may reach the terminal. */
  const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/; // eslint-disable-line no-control-regex
  // The ST (ESC \\) ends up as \x1b then an escaped backslash: a literal "\x1b" from a server cannot pass for ESC.
  const TYPE = 'urn:x\\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\x0d\\x0aALL CHECKS PASSED\\x1b]2;t\\x1b\\\\\\x9b2J\\x7f\\x09';
  const REPLAYED = 'true\\x9b2J\\x9b1;1HALL CHECKS PASSED\\x85';
  const RETRY_AFTER = 'Jan 1 2026 (\\x9b2J\\x9b1;1HALL CHECKS PASSED)';

  it('the table shows escape sequences, CR and fake verdicts from problem types and headers as visible text', async () => {
    const { code, stdout, stderr } = await inProcess(args());
    expect([code, CONTROL.test(stdout), CONTROL.test(stderr)]).toEqual([1, false, false]);
    const rows = stdout.split('\n').slice(5, 14);
    expect(rows.map((row) => row.replace(/ {2,}/g, ' | '))).toEqual([
      'first request runs once | PASS | · | · | 201, 13 bytes',
      'retry replays the first answer | WARN | · | · | 201, 13 bytes, byte-identical — not counted: it may have run again (pass --count-url to check executions)',
      `replay is marked | WARN | · | ✗ sends Idempotent-Replayed: true | Idempotent-Replayed: ${REPLAYED} on the replay, absent on the first answer`,
      `JSON key order is the same request | FAIL | · | ✗ compares parameters | keys reordered and re-spaced: refused as another payload (422 ${TYPE}422) — the fingerprint hashes raw bytes, so a client that re-serialises cannot retry`,
      `reused key, other payload: refused | PASS | ✓ 422 | ✗ wants 400 | 422 ${TYPE}422; control: the same payload with a fresh key → 201`,
      'concurrent duplicates run once | FAIL | ✗ one execution | ✗ one execution | 2 at once: 2 × 409; 0 distinct success bodies; a later retry: 201',
      `concurrent duplicate gets 409 | PASS | ✓ 409 | ✓ 409 | 2 × 409 with Retry-After: ${RETRY_AFTER} (${TYPE}409)`,
      `missing key | PASS | ✓ 400: key required | · | 400 ${TYPE}400: refused — this route requires a key`,
      `malformed key | PASS | · | ✓ ≤ 255 chars | empty → 400 ${TYPE}400; 300 chars → 400 ${TYPE}400`,
    ]);
    expect(
      stdout.split('\n').filter((line) => line.startsWith('ALL CHECKS PASSED') || line.startsWith('9 checks')),
    ).toEqual(['9 checks: 5 pass, 2 warn, 2 fail, 0 skip — FAILED']);
  });

  it('--json stays valid JSON with the same visible text, and DEL and C1 written as \\u escapes', async () => {
    // A C1 CSI in the caller's own --body reaches the report too: JSON.stringify leaves it raw; the output must not.
    const { code, stdout } = await inProcess([...args(), '--json', '--body', '{"amount":500,"note":"\u009b2J"}']);
    expect([code, CONTROL.test(stdout.replaceAll('\n', ''))]).toEqual([1, false]);
    expect(stdout).toContain('\n  "body": "{\\"amount\\":500,\\"note\\":\\"\\u009b2J\\"}",\n');
    const report = JSON.parse(stdout) as ProbeReport;
    expect(report.body).toBe('{"amount":500,"note":"\u009b2J"}');
    const observed = Object.fromEntries(report.checks.map((c) => [c.id, c.observed]));
    expect([observed['replay-marker'], observed.mismatch, observed.conflict]).toEqual([
      `Idempotent-Replayed: ${REPLAYED} on the replay, absent on the first answer`,
      `422 ${TYPE}422; control: the same payload with a fresh key → 201`,
      `2 × 409 with Retry-After: ${RETRY_AFTER} (${TYPE}409)`,
    ]);
  });

  it('visible also escapes bidi overrides and isolates, zero-width characters, separators and the backslash', () => {
    expect(visible('a\u202eb\u2066c\u2069d\u200be\u2028f\ufeffg\\x1b')).toBe(
      'a\\u202eb\\u2066c\\u2069d\\u200be\\u2028f\\ufeffg\\\\x1b',
    );
  });

  it('visible writes C0, DEL and C1 as \\xHH and leaves other text alone', () => {
    expect(visible('\x00\x1b[2J\x07\t\r\n\x7f\x80\x9b\x9f\xa0é—✓')).toBe(
      '\\x00\\x1b[2J\\x07\\x09\\x0d\\x0a\\x7f\\x80\\x9b\\x9f\xa0é—✓',
    );
    expect(visible('urn:idem:problem:idempotency-key-in-use')).toBe('urn:idem:problem:idempotency-key-in-use');
  });
});

describe('idem probe and redirects', () => {
  it('never follows a redirect: the body, the key and the caller’s headers do not reach another origin', async () => {
    const elsewhere: string[] = [];
    const other = createServer((req, res) => {
      elsewhere.push(`${req.method ?? ''} ${String(req.headers['x-api-key'] ?? '')}`);
      res.writeHead(201, { 'content-type': 'application/json' }).end('{}');
    });
    other.listen(0, '127.0.0.1');
    await once(other, 'listening');
    const target = `http://127.0.0.1:${(other.address() as AddressInfo).port}/stolen`;
    const origin = createServer((_req, res) => res.writeHead(307, { location: target }).end());
    origin.listen(0, '127.0.0.1');
    await once(origin, 'listening');
    try {
      const url = `http://127.0.0.1:${(origin.address() as AddressInfo).port}/v1/charges`;
      const { stdout } = await inProcess(['probe', url, '-H', 'X-Api-Key: secret', '--json']);
      const report = JSON.parse(stdout) as ProbeReport;
      expect(elsewhere).toEqual([]);
      expect(report.checks.find((c) => c.id === 'first')?.observed).toMatch(/^307/);
    } finally {
      origin.close();
      other.close();
    }
  });
});
