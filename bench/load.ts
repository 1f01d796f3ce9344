/**
 * @module The bench's servers and load: each server its own process (bench/server.ts, started, driven and stopped
 * over its control routes), autocannon's load on one route with new keys, one replayed key or none, and the same
 * measurement taken in slices across rounds (slots), combined into one figure.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { BODY, PG_URL, PROFILE, REDIS_URL, ROOT, RUN, SETTINGS, progress } from './settings.js';

export type Kind = 'none' | 'new' | 'replay';

export interface Load {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
  /** Server CPU (user + system) per request, µs. */
  cpuUs: number;
}

// ---- server processes ----------------------------------------------------------------------------------------------
export interface Server {
  port: number;
  child: ChildProcess;
  url: string;
}

export async function start(
  mode: string,
  store = 'memory',
  framework = 'express',
  root = ROOT,
  env: Record<string, string> = {},
): Promise<Server> {
  const args = ['--import', 'tsx'];
  if (PROFILE)
    args.push('--cpu-prof', `--cpu-prof-dir=${join(ROOT, 'bench', 'profiles', `${framework}-${mode}-${store}`)}`);
  args.push(join(root, 'bench', 'server.ts'));
  const child = spawn(process.execPath, args, {
    cwd: root,
    // bench/tsconfig.json has no source paths: `idem/*` resolves to the built dist, as in an application.
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: join(root, 'bench', 'tsconfig.json'),
      BENCH_MODE: mode,
      BENCH_STORE: store,
      BENCH_FRAMEWORK: framework,
      BENCH_RUN: RUN,
      BENCH_PG_URL: PG_URL,
      BENCH_REDIS_URL: REDIS_URL,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let errors = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    const text = chunk.toString();
    if (!text.includes('IDEM_SHORT_TTL') && !text.includes('--trace-warnings')) errors += text;
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${mode}/${store} did not start in 30 s: ${errors}`)), 30_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      const match = /READY (\d+)/.exec(chunk.toString());
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${mode}/${store} exited with ${code}: ${errors}`));
    });
  });
  return { port, child, url: `http://127.0.0.1:${port}` };
}

export async function stop(server: Server): Promise<void> {
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  try {
    await fetch(`${server.url}/__close`, { method: 'POST', signal: AbortSignal.timeout(30_000) });
  } catch {
    server.child.kill();
  }
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
}

export async function control<T = unknown>(server: Server, path: string, method = 'GET'): Promise<T> {
  const response = await fetch(`${server.url}${path}`, { method });
  return (await response.json()) as T;
}

// ---- load ----------------------------------------------------------------------------------------------------------
let keyCounter = 0;
export const newKey = (): string => `bench:${RUN}:${++keyCounter}`;

/**
 * autocannon's load on one route for `seconds`; `onTime` is given every 2xx answer's response time in ms (autocannon
 * keeps whole milliseconds in its histogram; bench/latency.ts takes its percentiles from these instead).
 */
export function cannon(
  server: Server,
  path: string,
  kind: Kind,
  seconds: number,
  replayKey: string,
  connections: number = SETTINGS.connections,
  onTime?: (ms: number) => void,
): Promise<autocannon.Result> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (kind === 'replay') headers['idempotency-key'] = replayKey;
  const request: autocannon.Request = { method: 'POST', path, headers, body: BODY };
  if (kind === 'new') {
    request.setupRequest = (req: autocannon.Request) => ({
      ...req,
      headers: { ...headers, 'idempotency-key': newKey() },
    });
  }
  // Without a callback autocannon answers its tracker (an event emitter) made thenable: the types give one or the other.
  const run = autocannon({ url: server.url, connections, duration: seconds, requests: [request] });
  if (onTime) {
    (run as unknown as autocannon.Instance).on('response', (_client, status, _bytes, ms) => {
      if (status >= 200 && status < 300) onTime(ms);
    });
  }
  return run;
}

/** The key a replay route replays (answered once first, for `replay`), then the warm-up's load on the route. */
async function warmUp(server: Server, path: string, kind: Kind): Promise<string> {
  const replayKey = newKey();
  if (kind === 'replay') {
    await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': replayKey },
      body: BODY,
    });
  }
  await cannon(server, path, kind, SETTINGS.warmup, replayKey);
  return replayKey;
}

export async function load(server: Server, path: string, kind: Kind, seconds = SETTINGS.seconds): Promise<Load> {
  const replayKey = await warmUp(server, path, kind);
  await control(server, '/__reset', 'POST');
  const result = await cannon(server, path, kind, seconds, replayKey);
  const cpu = await control<{ userUs: number; systemUs: number; requests: number }>(server, '/__cpu');
  if (result.non2xx + result.errors + result.timeouts > 0) {
    progress(
      `WARNING ${path} (${kind}): ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    cpuUs: cpu.requests > 0 ? (cpu.userUs + cpu.systemUs) / cpu.requests : NaN,
  };
}

/** One measurement taken in slices: the same route and key kind on the same server, across rounds. */
export interface Slot {
  server: Server;
  path: string;
  kind: Kind;
  replayKey: string;
  slices: Load[];
}

export async function prepare(server: Server, path: string, kind: Kind): Promise<Slot> {
  const replayKey = await warmUp(server, path, kind);
  return { server, path, kind, replayKey, slices: [] };
}

export async function slice(slot: Slot): Promise<void> {
  await control(slot.server, '/__reset', 'POST');
  const result = await cannon(slot.server, slot.path, slot.kind, SETTINGS.seconds, slot.replayKey);
  const cpu = await control<{ userUs: number; systemUs: number; requests: number }>(slot.server, '/__cpu');
  if (result.non2xx + result.errors + result.timeouts > 0) {
    progress(
      `WARNING ${slot.path} (${slot.kind}): ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  slot.slices.push({
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: cpu.requests,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    cpuUs: cpu.userUs + cpu.systemUs,
  });
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/** Across slices: mean req/s, median p50/p99, total CPU over total requests. */
export function combine(slot: Slot): Load {
  const s = slot.slices;
  const requests = s.reduce((a, l) => a + l.requests, 0);
  return {
    rps: s.reduce((a, l) => a + l.rps, 0) / s.length,
    p50: median(s.map((l) => l.p50)),
    p99: median(s.map((l) => l.p99)),
    requests,
    non2xx: s.reduce((a, l) => a + l.non2xx, 0),
    errors: s.reduce((a, l) => a + l.errors, 0),
    cpuUs: requests > 0 ? s.reduce((a, l) => a + l.cpuUs, 0) / requests : NaN,
  };
}
