/**
 * @module Bytes allocated per new key, per framework, on the null store (issue 31, item 2): `npm run bench:alloc`.
 *
 * Each subject runs in a child of its own (`--expose-gc`, young generation of 256 MiB, so no collection runs while
 * it is measured): warm-up requests until the code is optimised, `gc()`, then `process.memoryUsage().heapUsed`
 * before and after N new-key requests. With no collection between (checked: a run where one happened is thrown
 * away and repeated), the difference is every byte the JS heap handed out — live or garbage. Each framework runs
 * twice: with Idem on the null store (bench/null-store.ts) and its bare route (the same handler, no Idem, the same
 * request bytes including the key header); Idem's share is the difference. Backing stores of ArrayBuffers live
 * outside the JS heap and are not in these figures.
 *
 * Then, per Idem subject, the heap sampling profiler (`HeapProfiler.startSampling`, one sample every 64 bytes on
 * average) over the same loop names the sites: each sample is charged to the innermost frame in Idem's sources
 * (packages/idem/src) on its stack, with the leaf that allocated (a constructor, a builtin) beside it.
 *
 * Subjects: `web` (idem/http's `idempotency()(handler)` called directly with a `Request`), `hono` (`app.request`),
 * `fastify-inject` (`app.inject`: light-my-request's stream, not the socket), and `fastify` and `express` over
 * node:http on 127.0.0.1 from a keep-alive client in the same process (the client's bytes are in both routes).
 * Env: BENCH_ALLOC_N (default 2000), BENCH_ALLOC_ROUNDS (default 3; the median is shown), BENCH_ALLOC_TOP (12).
 *
 * The measured children run one esbuild bundle of this file, as the build ships the code: tsx transpiles with
 * esbuild's `keepNames`, which wraps every named function and closure in a `__name()` call (a property defined on
 * each new closure: 4.7 KB a new key, heap-sampled, in core/lease.ts alone). The profiled children run through tsx,
 * so that the sites keep their file names; their totals include that. `BENCH_ALLOC_TSX=1` measures through tsx too.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, createServer, request as httpRequest, type Server } from 'node:http';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { idempotency as expressIdempotency } from '../packages/idem/src/adapters/express/index.js';
import { idempotency as fastifyIdempotency } from '../packages/idem/src/adapters/fastify/index.js';
import { idempotency as honoIdempotency } from '../packages/idem/src/adapters/hono/index.js';
import { idempotency } from '../packages/idem/src/http/middleware.js';
import { nullStore } from './null-store.js';
import type { Response as ExpressResponse } from 'express';

const IDEM_SOURCES = '/packages/idem/src/';
const FRAMEWORKS = ['web', 'hono', 'fastify-inject', 'fastify', 'express'] as const;
type Framework = (typeof FRAMEWORKS)[number];
const N = Number(process.env.BENCH_ALLOC_N ?? 2000);
const WARM = Math.max(3000, N);
/** Requests under the sampling profiler: its 64-byte interval slows each one about tenfold. */
const PROFILED = Math.min(N, 500);
const BODY = '{"amount":500,"currency":"usd","source":"tok_visa"}';
const CHARGE = '{"id":"ch_0123456789ab","amount":500}';
const ANSWER_HEADERS = { location: '/v1/charges/ch_0123456789ab', 'content-type': 'application/json; charset=utf-8' };
const OPTIONS = { scope: 'single-tenant', ttlMs: 3_600_000, leaseMs: 60_000, onError: () => {} } as const;

/** One measured run of a child: bytes per request, and the sampled sites when profiled. */
interface Measured {
  readonly perRequest: number;
  readonly gcs: number;
  readonly sites?: ReadonlyArray<{ site: string; bytes: number }>;
  readonly leaves?: ReadonlyArray<{ site: string; bytes: number }>;
  readonly sampledPerRequest?: number;
  readonly sampledTotal?: number;
}

/** This file bundled without `keepNames` (see the module comment), or undefined to measure through tsx. */
let bundled: string | undefined;

const [mode, subject = '', profileFlag] = process.argv.slice(2);
if (mode === '--child') {
  const [framework, route] = subject.split(':') as [Framework, 'idem' | 'bare'];
  process.stdout.write(JSON.stringify(await child(framework, route, profileFlag === 'profile')));
  process.exit(0);
} else {
  parent();
}

/** Runs every subject in its own child, rounds interleaved, and prints the table and Idem's top sites. */
function parent(): void {
  const work = mkdtempSync(join(tmpdir(), 'idem-alloc-'));
  if (process.env.BENCH_ALLOC_TSX !== '1') bundled = bundle(join(work, 'allocation.mjs'));
  try {
    report();
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Bundles this file with esbuild (as bench/instructions.ts bundles its run), returning the bundle's path. */
function bundle(outfile: string): string {
  const esbuild = fileURLToPath(new URL('../node_modules/.bin/esbuild', import.meta.url));
  const built = spawnSync(esbuild, [
    fileURLToPath(import.meta.url),
    '--bundle',
    '--platform=node',
    '--format=esm',
    `--outfile=${outfile}`,
    '--log-level=error',
    "--banner:js=import { createRequire as __idemRequire } from 'node:module'; const require = __idemRequire(import.meta.url);",
  ]);
  if (built.status !== 0) throw new Error(`could not bundle bench/allocation.ts: ${built.stderr.toString()}`);
  return outfile;
}

function report(): void {
  const rounds = Number(process.env.BENCH_ALLOC_ROUNDS ?? 3);
  const top = Number(process.env.BENCH_ALLOC_TOP ?? 12);
  const runs = new Map<string, number[]>();
  for (let round = 0; round < rounds; round++) {
    for (const framework of FRAMEWORKS) {
      for (const route of ['bare', 'idem'] as const) {
        const key = `${framework}:${route}`;
        runs.set(key, [...(runs.get(key) ?? []), spawnChild(key).perRequest]);
      }
    }
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
  const how = bundled ? 'bundled without keepNames' : 'through tsx';
  console.log(`Bytes allocated on the JS heap per new key (null store; N = ${N}, median of ${rounds}; ${how})\n`);
  console.log('| framework | bare route | with Idem | Idem adds | runs (Idem) |');
  console.log('|---|---:|---:|---:|---|');
  for (const framework of FRAMEWORKS) {
    const bare = median(runs.get(`${framework}:bare`) ?? []);
    const idem = median(runs.get(`${framework}:idem`) ?? []);
    const spread = (runs.get(`${framework}:idem`) ?? []).map((v) => Math.round(v)).join(', ');
    console.log(`| ${framework} | ${fmt(bare)} | ${fmt(idem)} | **${fmt(idem - bare)}** | ${spread} |`);
  }
  for (const framework of FRAMEWORKS) {
    const profiled = spawnChild(`${framework}:idem`, true);
    const bare = spawnChild(`${framework}:bare`, true);
    console.log(
      `\n${framework}: sampled ${fmt(profiled.sampledTotal ?? 0)} B/request with Idem, ${fmt(bare.sampledTotal ?? 0)} bare; ` +
        `${fmt(profiled.sampledPerRequest ?? 0)} under Idem's frames. Top sites under Idem's frames:`,
    );
    for (const { site, bytes } of (profiled.sites ?? []).slice(0, top)) console.log(`  ${fmt(bytes)}  ${site}`);
    console.log(`  What allocated more than on the bare route (by allocating function):`);
    const bareBytes = new Map((bare.leaves ?? []).map(({ site, bytes }) => [site, bytes]));
    const more = (profiled.leaves ?? [])
      .map(({ site, bytes }) => ({ site, bytes: bytes - (bareBytes.get(site) ?? 0) }))
      .sort((a, b) => b.bytes - a.bytes);
    for (const { site, bytes } of more.slice(0, top)) console.log(`  ${fmt(bytes)}  ${site}`);
  }
}

function fmt(bytes: number): string {
  return Math.round(bytes).toLocaleString('en-US');
}

/** One child: a fresh process with a large young generation, so the measured loop runs no collection. */
function spawnChild(subjectKey: string, profile = false): Measured {
  for (let attempt = 1; ; attempt++) {
    // The profiled children through tsx, so that the sampled sites keep their source files.
    const script = bundled && !profile ? [bundled] : ['--import', 'tsx', fileURLToPath(import.meta.url)];
    const result = spawnSync(
      process.execPath,
      [
        '--expose-gc',
        '--max-semi-space-size=256',
        '--min-semi-space-size=256',
        ...script,
        '--child',
        subjectKey,
        ...(profile ? ['profile'] : []),
      ],
      { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
    );
    if (result.status !== 0) throw new Error(`${subjectKey}: child failed\n${result.stderr}`);
    const measured = JSON.parse(result.stdout) as Measured;
    if (measured.gcs === 0) return measured;
    if (attempt === 3) throw new Error(`${subjectKey}: a collection ran inside the measured loop ${attempt} times`);
  }
}

/** Builds one subject, warms it, measures N requests, and (when asked) profiles N more. */
async function child(framework: Framework, route: 'idem' | 'bare', profile: boolean): Promise<Measured> {
  const { send, close } = await subjectOf(framework, route === 'idem');
  const gc = globalThis.gc as () => void;
  for (let i = 0; i < WARM; i++) await send(`w${i}`);
  let gcs = 0;
  gc();
  // Observed only after the forced collection has been reported, so any entry counted is one inside the loop.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const observer = new PerformanceObserver((list) => (gcs += list.getEntries().length));
  observer.observe({ entryTypes: ['gc'] });
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < N; i++) await send(`m${i}`);
  const after = process.memoryUsage().heapUsed;
  await new Promise((resolve) => setTimeout(resolve, 50));
  observer.disconnect();
  const perRequest = (after - before) / N;
  if (!profile) {
    await close();
    return { perRequest, gcs };
  }
  gc();
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 64,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  for (let i = 0; i < PROFILED; i++) await send(`p${i}`);
  const { profile: sampled } = await session.post('HeapProfiler.getSamplingProfile');
  await session.post('HeapProfiler.stopSampling');
  session.disconnect();
  await close();
  const bySite = new Map<string, number>();
  const byLeaf = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, bytes: number) => map.set(key, (map.get(key) ?? 0) + bytes);
  const walk = (node: SamplingNode, site: string | undefined): void => {
    const frame = node.callFrame;
    const name = frame.functionName || '(anonymous)';
    const here = frame.url.includes(IDEM_SOURCES) ? `${name} ${shortUrl(frame.url)}` : site;
    if (node.selfSize > 0) {
      add(byLeaf, `${name} ${shortUrl(frame.url)}`, node.selfSize);
      if (here !== undefined) add(bySite, here === site ? `${here} ← ${name}` : here, node.selfSize);
    }
    for (const next of node.children) walk(next, here);
  };
  walk(sampled.head, undefined);
  const perRequestOf = (map: Map<string, number>) =>
    [...map].map(([site, bytes]) => ({ site, bytes: bytes / PROFILED })).sort((a, b) => b.bytes - a.bytes);
  const sites = perRequestOf(bySite);
  const leaves = perRequestOf(byLeaf);
  const sampledPerRequest = sites.reduce((sum, s) => sum + s.bytes, 0);
  const sampledTotal = leaves.reduce((sum, s) => sum + s.bytes, 0);
  return { perRequest, gcs, sites, leaves, sampledPerRequest, sampledTotal };
}

interface SamplingNode {
  readonly callFrame: { functionName: string; url: string };
  readonly selfSize: number;
  readonly children: SamplingNode[];
}

/** Idem's files from its source root; other scripts by their last two path segments (`node:` ones as they are). */
function shortUrl(url: string): string {
  const at = url.indexOf(IDEM_SOURCES);
  if (at >= 0) return url.slice(at + IDEM_SOURCES.length);
  return url.split('/').slice(-2).join('/') || '(native)';
}

/** A subject: how to send one new-key request to it and wait for the whole answer. */
async function subjectOf(
  framework: Framework,
  withIdem: boolean,
): Promise<{ send: (key: string) => Promise<void>; close: () => Promise<void> }> {
  const store = nullStore();
  const requestInit = (key: string) => ({
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: BODY,
  });
  const expect = (status: number) => {
    if (status !== 201) throw new Error(`${framework}: expected 201, got ${status}`);
  };
  if (framework === 'web') {
    const web = async (request: Request) => {
      await request.json();
      return new Response(CHARGE, { status: 201, headers: ANSWER_HEADERS });
    };
    const handle = withIdem ? idempotency({ ...OPTIONS, store })(web) : web;
    return {
      send: async (key) => {
        const response = await handle(new Request('http://x/pay', requestInit(key)));
        await response.arrayBuffer();
        expect(response.status);
      },
      close: async () => {},
    };
  }
  if (framework === 'hono') {
    const { Hono } = await import('hono');
    const app = new Hono();
    if (withIdem) app.post('/pay', honoIdempotency({ ...OPTIONS, store }));
    app.post('/pay', async (c) => {
      await c.req.json();
      return c.body(CHARGE, 201, ANSWER_HEADERS);
    });
    return {
      send: async (key) => {
        const response = await app.request('/pay', requestInit(key));
        await response.arrayBuffer();
        expect(response.status);
      },
      close: async () => {},
    };
  }
  if (framework === 'fastify' || framework === 'fastify-inject') {
    const { default: Fastify } = await import('fastify');
    const app = Fastify();
    if (withIdem) await app.register(fastifyIdempotency({ ...OPTIONS, store }));
    app.post('/pay', async (_request, reply) => reply.code(201).headers(ANSWER_HEADERS).send(CHARGE));
    if (framework === 'fastify-inject') {
      await app.ready();
      return {
        send: async (key) => {
          const response = await app.inject({ url: '/pay', ...requestInit(key), payload: BODY });
          expect(response.statusCode);
        },
        close: () => app.close(),
      };
    }
    await app.listen({ port: 0, host: '127.0.0.1' });
    return overHttp(app.server, expect, () => app.close());
  }
  const { default: express } = await import('express');
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const answer = (_req: unknown, res: ExpressResponse) => {
    res.status(201).set(ANSWER_HEADERS).send(CHARGE);
  };
  if (withIdem) app.post('/pay', expressIdempotency({ ...OPTIONS, store }), express.json(), answer);
  else app.post('/pay', express.json(), answer);
  const server = createServer(app);
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return overHttp(server, expect, () => new Promise((resolve) => server.close(() => resolve())));
}

/** Sends over loopback from one keep-alive socket in this process; the key header goes to both routes. */
function overHttp(server: Server, expect: (status: number) => void, close: () => Promise<void>) {
  const { port } = server.address() as AddressInfo;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const send = (key: string) =>
    new Promise<void>((resolve, reject) => {
      const headers = {
        'content-type': 'application/json',
        'content-length': String(BODY.length),
        'idempotency-key': key,
      };
      const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/pay', agent, headers }, (res) => {
        res.resume();
        res.once('end', () => {
          expect(res.statusCode ?? 0);
          resolve();
        });
      });
      req.once('error', reject);
      req.end(BODY);
    });
  return {
    send,
    close: async () => {
      agent.destroy();
      await close();
    },
  };
}
