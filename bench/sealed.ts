/**
 * @module What sealing costs (`sealed()`, encryption at rest): `complete` (which seals) and `get` (which opens) on
 * the memory store, sealed and plain, for bodies of 1 KiB, 64 KiB and 1 MiB, and the bytes an envelope adds.
 * Run: `node --import tsx bench/sealed.ts [runs]` (default 2,000 per size; 1 MiB gets a tenth). Prints the
 * median µs per call and the sealed minus plain difference, which is the seal or the open itself.
 */
import { sealed, sealOverhead, type IdempotencyStore, type Outcome } from '../packages/idem/src/index.js';
import { memoryStore } from '../packages/idem/src/stores/memory/index.js';
import { claimRequests, T0 } from '../packages/idem/src/testing/fixtures.js';

const RUNS = Number(process.argv[2] ?? 2_000);
const KEY = { id: 'key-2026-05', key: crypto.getRandomValues(new Uint8Array(32)) };
const request = claimRequests({ scope: 'acct_bench' });

/** `size` random bytes (getRandomValues fills at most 64 KiB a call). */
function randomBytes(size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  for (let at = 0; at < size; at += 65_536) crypto.getRandomValues(bytes.subarray(at, at + 65_536));
  return bytes;
}

const median = (values: number[]): number => values.sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

/** Median µs of `complete` and of `get` on `store` for a body of `size` bytes, over `runs` keys. */
async function measure(store: IdempotencyStore<undefined>, size: number, runs: number) {
  const outcome: Outcome = {
    status: 'succeeded',
    retryable: false,
    resultId: 'ch_1',
    response: {
      status: 201,
      headers: [
        ['content-type', 'application/json'],
        ['location', '/v1/charges/ch_0123456789ab'],
      ],
      body: randomBytes(size),
    },
  };
  const completes: number[] = [];
  const gets: number[] = [];
  for (let i = 0; i < runs; i++) {
    const req = request();
    await store.claim(req);
    let started = performance.now();
    await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome });
    completes.push(performance.now() - started);
    started = performance.now();
    await store.get(req.pk);
    gets.push(performance.now() - started);
  }
  return { complete: median(completes) * 1_000, get: median(gets) * 1_000 };
}

console.log(`envelope overhead for key id "${KEY.id}": ${sealOverhead(KEY.id)} bytes per record`);
console.log('size      runs   complete plain/sealed (seal)   get plain/sealed (open)   µs, median');
for (const size of [1_024, 65_536, 1_048_576]) {
  const runs = size >= 1_048_576 ? Math.max(1, Math.floor(RUNS / 10)) : RUNS;
  await measure(sealed(memoryStore(), { keys: [KEY] }), size, Math.min(runs, 100)); // warm-up
  const plain = await measure(memoryStore(), size, runs);
  const sealedTimes = await measure(sealed(memoryStore(), { keys: [KEY] }), size, runs);
  const f = (n: number) => n.toFixed(1).padStart(7);
  console.log(
    `${String(size).padEnd(9)} ${String(runs).padEnd(6)} ${f(plain.complete)} / ${f(sealedTimes.complete)} (${f(sealedTimes.complete - plain.complete)})   ` +
      `${f(plain.get)} / ${f(sealedTimes.get)} (${f(sealedTimes.get - plain.get)})`,
  );
}
