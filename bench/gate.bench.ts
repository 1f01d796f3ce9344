/**
 * @module `npm run bench:micro`: the framework-neutral part of a keyed request, in process (no HTTP), on vitest bench.
 * A new key is `gate.admit` (key, body, fingerprint, claim) then `complete` on the memory store; a replay is
 * `gate.admit` answering from the stored record. Compare with the HTTP tables in docs/BENCHMARKS.md to see how much
 * of a request's cost is outside the gate.
 */
import { bench, describe } from 'vitest';
import { createGate, type GateRequest } from '../packages/idem/src/http/middleware.js';
import { memoryStore } from '../packages/idem/src/stores/memory/index.js';

const gate = createGate<never, null>({
  store: memoryStore(),
  scope: 'single-tenant',
  ttlMs: 3_600_000,
  leaseMs: 10_000,
  onError: () => {},
});
const body = new TextEncoder().encode('{"amount":500,"currency":"usd","source":"tok_visa"}');
const stored = {
  status: 201,
  headers: [['content-type', 'application/json']] as Array<[string, string]>,
  body: new TextEncoder().encode('{"id":"ch_0123456789ab","amount":500}'),
};
const request = (key: string): GateRequest<null> => ({
  native: null,
  method: 'POST',
  url: '/pay',
  header: (name) => (name === 'idempotency-key' ? key : name === 'content-type' ? 'application/json' : undefined),
  body: () => Promise.resolve(body),
});

let n = 0;
describe('gate', () => {
  bench('new key: admit + complete (memory store)', async () => {
    const admission = await gate.admit(request(`k${++n}`));
    if (admission.kind !== 'run') throw new Error(`expected a claim, got ${admission.kind}`);
    await admission.complete(stored);
  });

  bench('replay: admit (memory store)', async () => {
    const admission = await gate.admit(request('hot'));
    if (admission.kind === 'run') await admission.complete(stored);
  });
});
