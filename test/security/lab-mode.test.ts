/**
 * Lab faults are inert unless lab mode is on (issue 6, item 4). Each lab feature is tried on a production-mode
 * server (IDEM_LAB=0) and, as a control that proves the probe works, on a lab-mode one: the fault headers
 * (`Idem-Lab-Fault`, `Idem-Lab-Fail`, `Idem-Lab-Delay-Ms`), the sandbox `sk_lab_*` keys, `/v1/lab/reset`, the
 * model routes, and the `IDEM_CLOCK_SKEW_MS` setting (refused at startup without lab mode).
 *
 * And lab mode stays on the developer's machine (issue 7, item 4): it refuses a HOST that is not loopback unless
 * IDEM_LAB_ALLOW_REMOTE=1, and the well-known sk_test_ keys exist in lab mode only (outside it, no IDEM_API_KEYS
 * is a refusal to start). A refusal is one line on stderr and exit code 2.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listedInProgress } from '../fixtures/demo.js';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';

const ALICE = { authorization: 'Bearer sk_live_alice', 'content-type': 'application/json' };
/** One key on both servers: the lab's own sk_test_ keys are refused outside lab mode. */
const KEYS = 'sk_live_alice:acct_alice';
const BODY = JSON.stringify({ amount: 500 });

async function charge(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number | 'dropped'; body: string }> {
  try {
    const response = await fetch(`${url}/v1/charges`, {
      method: 'POST',
      headers: { ...ALICE, 'idempotency-key': randomUUID(), ...headers },
      body: BODY,
      signal: AbortSignal.timeout(20_000),
    });
    return { status: response.status, body: await response.text() };
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') throw error;
    return { status: 'dropped', body: '' };
  }
}

/**
 * Runs the demo server with `env` until it exits; one that starts listening instead is stopped and reported as
 * `listening` (so a configuration that should be refused fails the test rather than hanging it).
 */
async function startup(
  env: Record<string, string>,
): Promise<{ code: number | string | null; stdout: string; stderr: string }> {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', 'apps/demo/src/server.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      NODE_NO_WARNINGS: '1',
      PORT: '0',
      IDEM_STORE: 'memory:',
      IDEM_LEDGER: ':memory:',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let listening = false;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (!listening && stdout.includes('listening')) {
      listening = true;
      child.kill('SIGKILL');
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  return { code: listening ? 'listening' : code, stdout, stderr };
}

const balance = async (url: string) =>
  (await (await fetch(`${url}/v1/balance`, { headers: ALICE })).json()) as { charged: number; count: number };

describe('lab fault headers and lab routes do nothing unless lab mode is on', () => {
  const dir = tempDir('idem-labmode-');
  let production: DemoProcess;
  let lab: DemoProcess;
  beforeAll(async () => {
    [production, lab] = await Promise.all([
      startDemo({ IDEM_STORE: `sqlite:${dir.path}/prod.db`, IDEM_LAB: '0', IDEM_API_KEYS: KEYS }),
      startDemo({ IDEM_STORE: `sqlite:${dir.path}/lab.db`, IDEM_LAB: '1', IDEM_API_KEYS: KEYS }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([production.stop(), lab.stop()]);
    dir.remove();
  });

  it('Idem-Lab-Fault: drop-after-commit — answered normally in production; dropped (after the commit) in the lab', async () => {
    const headers = { 'idem-lab-fault': 'drop-after-commit' };
    const [prodBefore, labBefore] = [await balance(production.url), await balance(lab.url)];
    expect((await charge(production.url, headers)).status).toBe(201);
    expect((await charge(lab.url, headers)).status).toBe('dropped');
    expect((await balance(production.url)).count).toBe(prodBefore.count + 1);
    expect((await balance(lab.url)).count).toBe(labBefore.count + 1);
  });

  it('Idem-Lab-Fail: 503 — a charge in production; a 503 and no charge in the lab', async () => {
    const headers = { 'idem-lab-fail': '503' };
    const [prodBefore, labBefore] = [await balance(production.url), await balance(lab.url)];
    expect((await charge(production.url, headers)).status).toBe(201);
    expect((await charge(lab.url, headers)).status).toBe(503);
    expect((await balance(production.url)).count).toBe(prodBefore.count + 1);
    expect(await balance(lab.url)).toEqual(labBefore);
  });

  it('Idem-Lab-Delay-Ms — ignored in production (a 60 s delay is not waited for); honoured in the lab (409 while it holds the key)', async () => {
    expect((await charge(production.url, { 'idem-lab-delay-ms': '60000' })).status).toBe(201);
    const key = randomUUID();
    const held = charge(lab.url, { 'idem-lab-delay-ms': '1200', 'idempotency-key': key });
    // Until the record shows the first attempt holding the key, not a fixed wait.
    await listedInProgress(lab.url, key, 'sk_live_alice');
    expect((await charge(lab.url, { 'idempotency-key': key })).status).toBe(409);
    expect((await held).status).toBe(201);
  });

  it('sandbox keys, /v1/lab/reset and /v1/model exist in the lab only', async () => {
    const sandbox = { authorization: `Bearer sk_lab_${randomUUID().replaceAll('-', '').slice(0, 16)}` };
    const probes = async (url: string) => [
      (await fetch(`${url}/v1/balance`, { headers: sandbox })).status,
      (await fetch(`${url}/v1/lab/reset`, { method: 'POST', headers: ALICE })).status,
      (await fetch(`${url}/v1/model`, { headers: sandbox })).status,
    ];
    expect(await probes(production.url)).toEqual([401, 404, 401]);
    expect(await probes(lab.url)).toEqual([200, 200, 200]);
    // In production even a known account gets no model route.
    expect((await fetch(`${production.url}/v1/model`, { headers: ALICE })).status).toBe(404);
  });

  const LAB_KEYS = 'sk_live_mine:acct_mine,sk_test_alice:acct_alice';
  /** Configurations refused at startup: one line on stderr, exit 2, nothing bound. */
  it.each([
    [
      'IDEM_CLOCK_SKEW_MS without lab mode',
      { IDEM_LAB: '0', IDEM_CLOCK_SKEW_MS: '500' },
      'IDEM_CLOCK_SKEW_MS (--clock-skew-ms) is a lab setting: it needs IDEM_LAB=1.',
    ],
    [
      'lab mode on a HOST that is not loopback',
      { IDEM_LAB: '1', HOST: '0.0.0.0' },
      'lab mode listens on loopback only, got HOST=0.0.0.0: use HOST=127.0.0.1, or set IDEM_LAB_ALLOW_REMOTE=1 to expose the lab on purpose.',
    ],
    [
      'no IDEM_API_KEYS outside lab mode (the sk_test_ keys are lab-only)',
      { IDEM_LAB: '0' },
      'IDEM_API_KEYS (--api-keys) is required outside lab mode (the sk_test_ keys are lab-only): give apikey:account pairs.',
    ],
    [
      'an sk_test_ key in IDEM_API_KEYS outside lab mode',
      { IDEM_LAB: '0', IDEM_API_KEYS: LAB_KEYS },
      "IDEM_API_KEYS (--api-keys) holds an sk_test_ key outside lab mode: those are the lab's published keys; give keys of your own.",
    ],
  ])('refused at startup: %s', async (_, env, message) => {
    expect(await startup(env)).toEqual({ code: 2, stdout: '', stderr: `idem demo: ${message}\n` });
  });

  it('in lab mode an sk_test_ key in IDEM_API_KEYS serves', async () => {
    expect((await startup({ IDEM_LAB: '1', IDEM_API_KEYS: LAB_KEYS })).code).toBe('listening');
  });
});
