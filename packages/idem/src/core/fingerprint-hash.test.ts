/**
 * The fingerprint's hash on both paths: `node:crypto` (Node, Bun, Deno) and WebCrypto, where a runtime has no
 * `node:crypto` (Workers). The Web path is loaded here as such a runtime loads it: the modules are evaluated afresh
 * with `process.getBuiltinModule` taken away, so `node:crypto` is not found. test/runtimes runs it under workerd.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import * as nodePath from './fingerprint.js';
import type { FingerprintInput } from './fingerprint.js';
import { withoutNodeCrypto } from './no-node-crypto.test-kit.js';

const webPath = await withoutNodeCrypto(() => import('./fingerprint.js'));
const utf8 = (text: string) => new TextEncoder().encode(text);
const charge = (body: string | Uint8Array, more: Partial<FingerprintInput> = {}): FingerprintInput => ({
  method: 'POST',
  path: '/v1/charges',
  contentType: 'application/json',
  body: typeof body === 'string' ? utf8(body) : body,
  ...more,
});

describe('fingerprint hash', () => {
  it('is the SHA-256 of the length-prefixed fields on both paths (pinned hex)', async () => {
    const input = charge('{"b":1,"a":"x"}');
    const text = '19:idem-fingerprint-v14:POST11:/v1/charges0:4:json17:{"a":"x","b":1e0}1:0';
    const expected = createHash('sha256').update(text).digest('hex');
    expect(expected).toBe('a29f42714ed34edf6064c64ea6fa16e72458972d8e6cae2580b9695a69088678');
    expect(nodePath.fingerprint(input)).toBe(expected);
    expect(nodePath.fingerprintSoon(input)).toBe(expected);
    const soon = webPath.fingerprintSoon(input);
    expect(soon).toBeInstanceOf(Promise);
    expect(await soon).toBe(expected);
    expect(await webPath.fingerprintAsync(input)).toBe(expected);
    expect(await nodePath.fingerprintAsync(input)).toBe(expected);
  });

  it('WebCrypto and node:crypto agree on any method, path, query, body, content type and headers', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          method: fc.constantFrom('POST', 'put', 'PATCH'),
          path: fc.string({ unit: 'binary', maxLength: 20 }),
          query: fc.string({ maxLength: 20 }),
          contentType: fc.constantFrom('application/json', 'text/plain', null),
          body: fc.oneof(
            fc.json().map(utf8),
            fc.string({ unit: 'binary', maxLength: 60 }).map(utf8),
            fc.uint8Array({ maxLength: 200 }),
          ),
          headers: fc.array(fc.tuple(fc.string({ maxLength: 8 }), fc.string({ unit: 'binary', maxLength: 8 })), {
            maxLength: 3,
          }),
        }),
        async (input) => {
          expect(await webPath.fingerprintAsync(input)).toBe(nodePath.fingerprint(input));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('agrees past the one-call limit: a 1 MiB JSON body and 1 MiB of raw bytes', async () => {
    const json = `[${Array<string>(100_000).fill('{"b":1,"a":2}').join(',')}]`;
    const raw = Uint8Array.from({ length: 1_048_576 }, (_, i) => (i * 31) & 0xff);
    for (const input of [charge(json), charge(raw, { contentType: 'application/octet-stream' })])
      expect(await webPath.fingerprintAsync(input)).toBe(nodePath.fingerprint(input));
  });

  it('the synchronous fingerprint() refuses on the Web path with one line naming fingerprintAsync', () => {
    expect(() => webPath.fingerprint(charge('{}'))).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: 'fingerprint() needs node:crypto, which this runtime lacks: use `await fingerprintAsync(input)`.',
      }),
    );
  });
});

describe('utf8Length', () => {
  it('counts the bytes TextEncoder writes, lone surrogates included', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (text) => {
        expect(nodePath.utf8Length(text)).toBe(new TextEncoder().encode(text).byteLength);
      }),
      { numRuns: 1_000 },
    );
    expect(nodePath.utf8Length('\ud800x')).toBe(4);
  });
});

describe('fingerprintsEqual', () => {
  it('reads every character of equal-length strings, wherever they differ', () => {
    const reads = (a: string, b: string) => {
      let count = 0;
      const counted = Object.assign(new String(a), {
        charCodeAt(this: string, index: number) {
          count++;
          return String.prototype.charCodeAt.call(this, index);
        },
      }) as unknown as string;
      const equal = nodePath.fingerprintsEqual(counted, b);
      return { equal, count };
    };
    const A = 'a'.repeat(64);
    expect(reads(A, 'b' + 'a'.repeat(63))).toEqual({ equal: false, count: 64 });
    expect(reads(A, 'a'.repeat(63) + 'b')).toEqual({ equal: false, count: 64 });
    expect(reads(A, A)).toEqual({ equal: true, count: 64 });
    expect(nodePath.fingerprintsEqual('ab', 'abc')).toBe(false);
  });
});
