/**
 * @module `npm run bench:worst`: what a crafted 1 MiB JSON body costs, side by side with what the same bytes cost as
 * plain input. Best of `BENCH_RUNS` (default 11) runs each, the two sides alternating in every round.
 *
 * 1. In this process: Idem's fingerprint of each body beside `JSON.parse` of the same bytes (goal ≤ 3×).
 *    `IDEM_FINGERPRINT=/tmp/old-fingerprint.ts` adds a column for an old copy of src/core/fingerprint.ts.
 * 2. The demo server as a child on 127.0.0.1 (apps/demo/src/server.ts under tsx, whose tsconfig paths load Idem from
 *    its sources: no build needed), lab keys, memory store and ledger, bench/loop-probe.ts preloaded: the longest
 *    event-loop turn while it answers each body as `application/json` (canonicalised) beside the same bytes as
 *    `text/plain` (hashed raw) (goal ≤ 2×). The demo answers both `201`: its charge parser reads JSON whatever the
 *    type, once, before the claim, which is in both columns; the difference is the canonical JSON (and the time to
 *    hash its bytes rather than the body's).
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { canonicalJson, fingerprint, type FingerprintInput } from '../packages/idem/src/core/fingerprint.js';
import { CHARGES, SHAPES } from './fingerprint.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 11);
const ROOT = resolve(import.meta.dirname, '..');

type Fingerprint = (input: FingerprintInput) => string;
const old = process.env.IDEM_FINGERPRINT
  ? ((await import(pathToFileURL(resolve(process.env.IDEM_FINGERPRINT)).href)) as { fingerprint: Fingerprint })
      .fingerprint
  : undefined;

const USUAL = '{"amount":500,"currency":"usd","source":"tok_visa","metadata":{"order":"1234"}}';
const bodies: Array<[name: string, body: Uint8Array, charge: boolean]> = [
  ['a usual charge (79 B)', USUAL, true] as const,
  ...Object.entries(CHARGES).map(([name, make]) => [name, make(), true] as const),
  ...Object.entries(SHAPES).map(([name, make]) => [`array: ${name}`, make(), false] as const),
].map(([name, text, charge]) => [name, new TextEncoder().encode(text), charge]);

const ms = (value: number) => value.toFixed(value < 10 ? 2 : 1);
const row = (cells: ReadonlyArray<string>, widths: ReadonlyArray<number>) =>
  cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] as number) : cell.padStart(widths[i] as number))).join('  ');

/** The fastest of `RUNS` calls of each function, called in turn within each round (after one warm-up round). */
function fastest(fns: ReadonlyArray<() => unknown>): number[] {
  const best = fns.map(() => Number.POSITIVE_INFINITY);
  for (let round = 0; round <= RUNS; round++) {
    fns.forEach((fn, i) => {
      const started = performance.now();
      fn();
      if (round > 0) best[i] = Math.min(best[i] as number, performance.now() - started);
    });
  }
  return best;
}

const input = (body: Uint8Array, contentType = 'application/json'): FingerprintInput => ({
  method: 'POST',
  path: '/v1/charges',
  contentType,
  body,
});
const decoder = new TextDecoder();

console.log(`Fingerprint of each body beside JSON.parse of the same bytes (best of ${RUNS}, ms; goal ≤ 3×)\n`);
const widths1 = [52, 5, 11, 11, 8, ...(old ? [11, 8] : [])];
console.log(row(['body', 'form', 'JSON.parse', 'fingerprint', 'ratio', ...(old ? ['old', 'ratio'] : [])], widths1));
let worst = 0;
for (const [name, body] of bodies) {
  const form = canonicalJson(body) === undefined ? 'raw' : 'json';
  const fns: Array<() => unknown> = [() => JSON.parse(decoder.decode(body)) as unknown, () => fingerprint(input(body))];
  if (old) fns.push(() => old(input(body)));
  const [parse = 0, print = 0, before = 0] = fastest(fns);
  // The goal is for 1 MiB bodies; a 79-byte one is all fixed cost (the hash, the fields), shown for scale.
  if (body.byteLength > 65_536) worst = Math.max(worst, print / parse);
  const oldCells = old ? [ms(before), `${(before / parse).toFixed(2)}×`] : [];
  console.log(row([name, form, ms(parse), ms(print), `${(print / parse).toFixed(2)}×`, ...oldCells], widths1));
}
console.log(`\nworst ratio of a 1 MiB body: ${worst.toFixed(2)}×\n`);

// Part 2: the demo.
const child = fork(resolve(ROOT, 'apps/demo/src/server.ts'), [], {
  cwd: ROOT,
  execArgv: ['--import', 'tsx', '--import', resolve(ROOT, 'bench/loop-probe.ts')],
  env: {
    PATH: process.env.PATH,
    NODE_NO_WARNINGS: '1',
    HOST: '127.0.0.1',
    PORT: '0',
    IDEM_LAB: '1',
    IDEM_STORE: 'memory:',
    IDEM_LEDGER: ':memory:', // no file, and no fsync in the measured turn
  },
  stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
});
let output = '';
child.stdout?.on('data', (chunk: Buffer) => void (output += chunk.toString()));
const url = await new Promise<string>((done, fail) => {
  child.stdout?.on('data', () => {
    const match = /^idem demo listening on (http:\/\/\S+)/m.exec(output);
    if (match?.[1]) done(match[1]);
  });
  child.once('exit', (code) => fail(new Error(`the demo exited (${code}) before listening:\n${output}`)));
});
child.stdout?.on('data', () => void (output = '')); // its log lines: read and dropped

async function ask(message: 'reset' | 'read'): Promise<unknown> {
  const reply = once(child, 'message');
  child.send(message);
  return ((await reply) as [unknown])[0];
}

let sent = 0;
/** One charge: the client's elapsed time and the longest loop turn in the server meanwhile (ms). */
async function post(body: Uint8Array, contentType: string): Promise<{ total: number; block: number }> {
  await ask('reset');
  const started = performance.now();
  const response = await fetch(`${url}/v1/charges`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer sk_test_alice',
      'idempotency-key': `worst-${process.pid}-${++sent}`,
      'content-type': contentType,
    },
    body: body as Uint8Array<ArrayBuffer>,
  });
  await response.arrayBuffer();
  const total = performance.now() - started;
  const { maxMs } = (await ask('read')) as { maxMs: number };
  if (response.status !== 201) throw new Error(`${contentType} charge answered ${response.status}, not 201`);
  return { total, block: maxMs };
}

console.log(`The demo's longest event-loop turn per 1 MiB charge (best of ${RUNS}, ms; goal ≤ 2×)\n`);
const widths2 = [52, 11, 11, 8, 12, 12];
console.log(row(['body', 'text/plain', 'JSON', 'ratio', 'plain e2e', 'JSON e2e'], widths2));
let worstDemo = 0;
try {
  for (const [name, body, isCharge] of bodies) {
    if (!isCharge) continue;
    const best = { plain: { total: Infinity, block: Infinity }, json: { total: Infinity, block: Infinity } };
    for (let round = 0; round <= RUNS; round++) {
      // Alternating which goes first, so neither always follows the other's garbage.
      for (const kind of round % 2 === 0 ? (['plain', 'json'] as const) : (['json', 'plain'] as const)) {
        const { total, block } = await post(body, kind === 'plain' ? 'text/plain' : 'application/json');
        if (round === 0) continue; // warm-up
        best[kind] = { total: Math.min(best[kind].total, total), block: Math.min(best[kind].block, block) };
      }
    }
    const ratio = best.json.block / best.plain.block;
    if (body.byteLength > 65_536) worstDemo = Math.max(worstDemo, ratio);
    const cells = [ms(best.plain.block), ms(best.json.block), `${ratio.toFixed(2)}×`];
    console.log(row([name, ...cells, ms(best.plain.total), ms(best.json.total)], widths2));
  }
} finally {
  child.kill('SIGTERM');
}
console.log(`\nworst ratio of a 1 MiB body: ${worstDemo.toFixed(2)}×`);
