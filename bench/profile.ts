/**
 * @module `node --import tsx bench/profile.ts <mode> <store> <new|replay|none> [seconds] [path]`: one bench server
 * (bench/server.ts) under `--cpu-prof`, driven by autocannon for `seconds`, then its profile summed by function
 * (self time) and by file: where a request's CPU goes. Build first (`npx tsc -p tsconfig.build.json`): the server
 * loads Idem from dist. The profile is kept in bench/profiles/ (git-ignored as *.cpuprofile).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
if (process.argv[2] === '--summarize') {
  // `bench/profile.ts --summarize <file.cpuprofile>`: the same summary for a profile taken elsewhere.
  summarize(process.argv[3] as string, '');
  process.exit(0);
}
const [mode = 'idem', store = 'null', kind = 'new', secondsText = '8', path = '/pay'] = process.argv.slice(2);
const seconds = Number(secondsText);
const dir = join(ROOT, 'bench', 'profiles', `${mode}-${store}-${kind}`);
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

const child = spawn(
  process.execPath,
  ['--cpu-prof', `--cpu-prof-dir=${dir}`, '--import', 'tsx', join(ROOT, 'bench', 'server.ts')],
  {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: join(ROOT, 'bench', 'tsconfig.json'),
      BENCH_MODE: mode,
      BENCH_STORE: store,
      BENCH_RUN: `prof${process.pid}`,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const port = await new Promise<number>((resolve) => {
  child.stdout.on('data', (chunk: Buffer) => {
    const match = /READY (\d+)/.exec(chunk.toString());
    if (match) resolve(Number(match[1]));
  });
});
const url = `http://127.0.0.1:${port}`;
const body = JSON.stringify({ amount: 500, currency: 'usd', source: 'tok_visa' });
const headers: Record<string, string> = { 'content-type': 'application/json' };
let n = 0;
if (kind === 'replay') {
  headers['idempotency-key'] = `replay-${process.pid}`;
  await (await fetch(`${url}${path}`, { method: 'POST', headers, body })).arrayBuffer();
}
const request: autocannon.Request = { method: 'POST', path, headers, body };
if (kind === 'new')
  request.setupRequest = (req: autocannon.Request) => ({
    ...req,
    headers: { ...headers, 'idempotency-key': `p${process.pid}-${++n}` },
  });
const result = await autocannon({ url, connections: 16, duration: seconds, requests: [request] });
await fetch(`${url}/__close`, { method: 'POST' });
await new Promise((resolve) => child.once('exit', resolve));

const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'));
if (!file) throw new Error('no profile written');
summarize(join(dir, file), `${mode}/${store} ${kind} ${path}: ${Math.round(result.requests.average)} req/s`);

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount: number;
}
function summarize(path: string, title: string): void {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as {
    nodes: Node[];
    samples: number[];
    startTime: number;
    endTime: number;
  };
  const total = profile.samples.length;
  const byFunction = new Map<string, number>();
  const byFile = new Map<string, number>();
  for (const node of profile.nodes) {
    const { functionName, url: source, lineNumber } = node.callFrame;
    const short = source
      .replace(/^file:\/\//, '')
      .replace(`${ROOT}/`, '')
      .replace(/.*node_modules\//, '');
    const fn = `${functionName || '(anonymous)'} ${short}:${lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + node.hitCount);
    const group =
      source === ''
        ? `(${functionName})`
        : short.startsWith('dist/') || short.startsWith('src/')
          ? short
          : short
              .split('/')
              .slice(0, short.startsWith('@') ? 2 : 1)
              .join('/');
    byFile.set(group, (byFile.get(group) ?? 0) + node.hitCount);
  }
  const top = (map: Map<string, number>, count: number) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([name, hits]) => `${((hits / total) * 100).toFixed(1).padStart(5)} %  ${name}`);
  console.log(`${title}${title ? ', ' : ''}${total} samples, profile ${path}`);
  console.log('\nby file (self time)\n' + top(byFile, 25).join('\n'));
  console.log('\nby function (self time)\n' + top(byFunction, 45).join('\n'));
}
