/**
 * @module `node --import tsx bench/duplicate-wait.ts`: how soon a duplicate gets its answer. A first request takes
 * 1.5 s; a duplicate with the same key is sent 100 ms after it through `idem/client`. Prints when each answer
 * arrived, and how long after the first attempt's answer the duplicate had its replay (the server says
 * `Retry-After: 1`; the client polls an in-flight 409 at 250 ms growing to 1 s). Express + memory store, 127.0.0.1.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import { idempotentFetch } from '../packages/idem/src/client/index.js';
import { idempotency } from '../packages/idem/src/adapters/express/index.js';
import { memoryStore } from '../packages/idem/src/stores/memory/index.js';

const WORK_MS = 1_500;
const DUPLICATE_AFTER_MS = 100;
const ROUNDS = Number(process.env.ROUNDS ?? 5);

const app = express();
app.post(
  '/v1/charges',
  idempotency({ store: memoryStore(), scope: 'single-tenant', leaseMs: 10_000 }),
  async (_req, res) => {
    await new Promise((resolve) => setTimeout(resolve, WORK_MS));
    res.status(201).json({ id: 'ch_1' });
  },
);
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;

const lags: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const key = `dup-${round}`;
  const init = { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' };
  const t0 = performance.now();
  const first = fetch(url, init).then(() => performance.now() - t0);
  await new Promise((resolve) => setTimeout(resolve, DUPLICATE_AFTER_MS));
  const duplicate = idempotentFetch(url, init, { key }).then(({ attempts, replayed }) => ({
    at: performance.now() - t0,
    attempts,
    replayed,
  }));
  const [firstAt, dup] = await Promise.all([first, duplicate]);
  lags.push(dup.at - firstAt);
  console.log(
    `round ${round + 1}: first answered at ${firstAt.toFixed(0)} ms; duplicate (sent at ${DUPLICATE_AFTER_MS} ms) answered at ${dup.at.toFixed(0)} ms, ` +
      `${dup.attempts} attempts, replayed=${dup.replayed}; ${(dup.at - firstAt).toFixed(0)} ms after the first`,
  );
}
lags.sort((a, b) => a - b);
console.log(
  `duplicate's answer after the first's: median ${lags[Math.floor(lags.length / 2)]?.toFixed(0)} ms, max ${lags.at(-1)?.toFixed(0)} ms (before this change: the lease, 10 000 ms)`,
);
server.close();
