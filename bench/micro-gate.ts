/**
 * @module Micro-benchmark of the framework-neutral part of a new key: `gate.admit` (key, body, fingerprint, claim)
 * then `complete` on the memory store, in-process, no HTTP. Run: `node --import tsx bench/micro-gate.ts`.
 * Compare with the new-key rows of docs/BENCHMARKS.md to see how much of the cost is outside the gate.
 */
import { createGate } from '../packages/idem/src/http/middleware.js';
import { memoryStore } from '../packages/idem/src/stores/memory/index.js';

const gate = createGate<never, null>({ store: memoryStore(), scope: 'single-tenant', ttlMs: 3_600_000, leaseMs: 10_000, onError: () => {} });
const body = new TextEncoder().encode('{"amount":500,"currency":"usd","source":"tok_visa"}');
const stored = {
  status: 201,
  headers: [['content-type', 'application/json']] as Array<[string, string]>,
  body: new TextEncoder().encode('{"id":"ch_0123456789ab","amount":500}'),
};
let n = 0;
for (let round = 0; round < 4; round++) {
  const count = 5_000;
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const key = `k${++n}`;
    const admission = await gate.admit({
      native: null,
      method: 'POST',
      url: '/pay',
      header: (name) => (name === 'idempotency-key' ? key : name === 'content-type' ? 'application/json' : undefined),
      body: () => Promise.resolve(body),
    });
    if (admission.kind !== 'run') throw new Error(`expected a claim, got ${admission.kind}`);
    await admission.complete(stored);
  }
  const cpu = process.cpuUsage(cpu0);
  const wall = ((performance.now() - started) * 1000) / count;
  console.log(`new key, admit + complete: ${wall.toFixed(1)} µs wall, ${((cpu.user + cpu.system) / count).toFixed(1)} µs CPU`);
}
// Nothing left behind: no lease timer outlives its completion.
console.log(`active resources after: ${[...new Set(process.getActiveResourcesInfo())].join(', ')}`);
