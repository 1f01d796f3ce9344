/**
 * @module `npm run bench:micro`: the fingerprint of a usual request body, and of each 1 MiB worst-case shape and
 * charge (bench/fingerprint.ts) beside `JSON.parse` of the same bytes — vitest's table gives the ratio ("× slower").
 * `IDEM_FINGERPRINT=/tmp/old-fingerprint.ts` adds an old copy of src/core/fingerprint.ts to every group.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { bench, describe } from 'vitest';
import { fingerprint, type FingerprintInput } from '../packages/idem/src/core/fingerprint.js';
import { CHARGES, SHAPES } from './fingerprint.js';

type Fingerprint = (input: FingerprintInput) => string;
const old = process.env.IDEM_FINGERPRINT
  ? ((await import(pathToFileURL(resolve(process.env.IDEM_FINGERPRINT)).href)) as { fingerprint: Fingerprint })
      .fingerprint
  : undefined;
const input = (body: Uint8Array): FingerprintInput => ({
  method: 'POST',
  path: '/v1/charges',
  contentType: 'application/json',
  body,
});

describe('a usual body', () => {
  const body = new TextEncoder().encode(
    '{"amount":500,"currency":"usd","source":"tok_visa","metadata":{"order":"1234"}}',
  );
  bench('fingerprint', () => void fingerprint(input(body)));
  if (old) bench('fingerprint (old)', () => void old(input(body)));
  bench('JSON.parse', () => void JSON.parse(new TextDecoder().decode(body)));
});

const charges = Object.entries(CHARGES).map(([name, make]) => [`charge: ${name}`, make] as const);
for (const [name, make] of [...Object.entries(SHAPES), ...charges]) {
  const body = new TextEncoder().encode(make());
  describe(`1 MiB: ${name}`, () => {
    const options = { iterations: 3, time: 0, warmupIterations: 1 };
    bench('fingerprint', () => void fingerprint(input(body)), options);
    if (old) bench('fingerprint (old)', () => void old(input(body)), options);
    bench('JSON.parse', () => void JSON.parse(new TextDecoder().decode(body)), options);
  });
}
