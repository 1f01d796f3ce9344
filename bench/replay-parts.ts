/**
 * @module Micro-benchmark of a replay's write path in the Express adapter: building a Web `Response` from the stored
 * record and reading it back (`responseParts(replayResponse(stored))`, the path before commit 93c0d9e) vs
 * `replayParts(stored)` (after). Run: `node --import tsx bench/replay-parts.ts`.
 */
import { responseParts } from '../packages/idem/src/adapters/shared.js';
import { replayParts, replayResponse } from '../packages/idem/src/http/replay.js';

const stored = {
  status: 201,
  headers: [
    ['content-type', 'application/json; charset=utf-8'],
    ['location', '/v1/charges/ch_0123456789ab'],
  ] as Array<[string, string]>,
  body: new TextEncoder().encode('{"id":"ch_0123456789ab","amount":500}'),
};
const n = 20_000;
for (let round = 0; round < 3; round++) {
  let started = performance.now();
  for (let i = 0; i < n; i++) await responseParts(replayResponse(stored));
  const before = ((performance.now() - started) * 1000) / n;
  started = performance.now();
  for (let i = 0; i < n; i++) replayParts(stored);
  const after = ((performance.now() - started) * 1000) / n;
  console.log(`responseParts(replayResponse()) ${before.toFixed(1)} µs, replayParts() ${after.toFixed(1)} µs per replay`);
}
const a = await responseParts(replayResponse(stored));
const b = replayParts(stored);
console.log(
  `same status, headers and bytes: ${a.status === b.status && JSON.stringify(a.headers) === JSON.stringify(b.headers) && Buffer.compare(a.body, Buffer.from(b.body)) === 0}`,
);
