/**
 * @module `npm run bench:micro`: a replay's write path in the Node adapters — building a Web `Response` from the
 * stored record and reading it back (`responseParts(replayResponse(stored))`, what Fastify did before) against
 * `replayParts(stored)` (what Express and Fastify do). Both give the same status, headers and bytes (asserted once).
 */
import { bench, describe } from 'vitest';
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

const a = await responseParts(replayResponse(stored));
const b = replayParts(stored);
if (
  a.status !== b.status ||
  JSON.stringify(a.headers) !== JSON.stringify(b.headers) ||
  Buffer.compare(a.body, Buffer.from(b.body)) !== 0
) {
  throw new Error('replayParts and responseParts(replayResponse) disagree');
}

describe('replay write path', () => {
  bench('responseParts(replayResponse(stored))', async () => {
    await responseParts(replayResponse(stored));
  });
  bench('replayParts(stored)', () => {
    replayParts(stored);
  });
});
