/**
 * @module The conformance case of compression: gzip mounted after the middleware is replayed as the first answer's
 * exact compressed bytes.
 */
import { gunzipSync } from 'node:zlib';
import { expect, it } from 'vitest';
import type { IdempotencyStore } from '../../core/record.js';
import { newKey, newRef, rawPost, type RawAnswer } from './answers.js';
import type { SuiteKit } from './kit.js';

export function compressionCase<Tx, S extends IdempotencyStore<Tx>>(kit: SuiteKit<Tx, S>): void {
  const { serve, runs } = kit;
  it.skipIf(!kit.harness.supports?.compression)(
    'gzip mounted after the middleware: the replay carries Content-Encoding: gzip and the first answer’s exact bytes',
    async () => {
      const ref = newRef();
      const json = { id: 'ch_1', note: 'x'.repeat(2_048) };
      await serve(() => ({ style: 'json', status: 201, headers: { location: '/v1/charges/ch_1' }, json }), {}, true);
      const key = newKey();
      const body = JSON.stringify({ ref, amount: 50_000, currency: 'usd' });
      const send = () =>
        rawPost(`${kit.served?.url}/v1/charges`, { 'idempotency-key': key, 'accept-encoding': 'gzip' }, body);
      const first = await send();
      const retry = await send();
      const heads = (a: RawAnswer) => [
        a.status,
        a.headers['content-encoding'],
        a.headers.location,
        a.headers['idempotent-replayed'],
      ];
      expect(heads(first)).toEqual([201, 'gzip', '/v1/charges/ch_1', undefined]);
      expect(heads(retry)).toEqual([201, 'gzip', '/v1/charges/ch_1', 'true']);
      expect(gunzipSync(first.bytes).toString()).toBe(JSON.stringify(json));
      expect(retry.bytes.equals(first.bytes)).toBe(true);
      expect(gunzipSync(retry.bytes).toString()).toBe(JSON.stringify(json));
      expect(runs(ref)).toBe(1);
    },
  );
}
