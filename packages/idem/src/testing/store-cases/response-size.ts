/**
 * @module The conformance case of the store's own response limit: a response of exactly `maxResponseBytes` is
 * stored and read back byte for byte (skipped for a store that declares none).
 */
import { expect, it } from 'vitest';
import type { Outcome } from '../../core/record.js';
import type { StoreKit } from './kit.js';

export function responseSizeCase<Tx>(kit: StoreKit<Tx>): void {
  const { request, claimed, complete } = kit;
  it('a response of exactly the declared maxResponseBytes is stored and read back byte for byte', async (context) => {
    const limit = kit.store.maxResponseBytes;
    if (limit === undefined) return context.skip('the store declares no limit of its own');
    const headers: Array<[string, string]> = [
      ['content-type', 'application/octet-stream'],
      ['link', '<https://api.example.test/v1/charges?page=2>; rel="next"'],
      ['etag', '"\\v1"'],
    ];
    const utf8 = new TextEncoder();
    const headerBytes = headers.reduce((sum, [n, v]) => sum + utf8.encode(n).byteLength + utf8.encode(v).byteLength, 0);
    const body = Uint8Array.from({ length: limit - headerBytes }, (_, i) => (i * 7) % 256);
    const req = request();
    const record = await claimed(req);
    const outcome: Outcome = {
      status: 'succeeded',
      retryable: false,
      resultId: 'ch_big',
      response: { status: 200, headers, body },
    };
    expect(await complete(req, outcome)).toEqual({ ok: true });
    const stored = await kit.store.get(req.pk);
    expect(stored?.response?.body.byteLength).toBe(limit - headerBytes);
    expect(Buffer.compare(Buffer.from(stored?.response?.body ?? []), Buffer.from(body))).toBe(0);
    expect({ ...stored, response: { ...stored?.response, body: null } }).toEqual({
      ...record,
      ...outcome,
      response: { status: 200, headers, body: null },
    });
  });
}
