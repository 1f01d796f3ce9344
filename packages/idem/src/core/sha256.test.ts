import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { utf8Length } from './fingerprint.js';
import { constantTimeEqual, portableSha256, sha256 } from './sha256.js';

describe('sha256', () => {
  it('the portable implementation matches the FIPS 180-4 examples', () => {
    expect(portableSha256().update('abc').digest()).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
    expect(portableSha256().update('').digest()).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(portableSha256().update('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq').digest()).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    );
  });

  it('the portable and the native hash agree on any text and bytes, fed in any pieces', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.string({ unit: 'binary' }), fc.uint8Array({ maxLength: 300 })), { maxLength: 8 }),
        (parts) => {
          const portable = portableSha256();
          const native = createHash('sha256');
          for (const part of parts) {
            portable.update(part);
            native.update(part);
          }
          expect(portable.digest()).toBe(native.digest('hex'));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('sha256() is the native hash on Node (found as a builtin, not imported)', () => {
    expect(sha256().update('abc').digest()).toBe(createHash('sha256').update('abc').digest('hex'));
  });
});

describe('utf8Length', () => {
  it('counts the bytes TextEncoder writes, lone surrogates included', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (text) => {
        expect(utf8Length(text)).toBe(new TextEncoder().encode(text).byteLength);
      }),
      { numRuns: 1_000 },
    );
    expect(utf8Length('\ud800x')).toBe(4);
  });
});

describe('constantTimeEqual', () => {
  it('reads every character of equal-length strings, wherever they differ', () => {
    const reads = (a: string, b: string) => {
      let count = 0;
      const counted = Object.assign(new String(a), {
        charCodeAt(this: string, index: number) {
          count++;
          return String.prototype.charCodeAt.call(this, index);
        },
      }) as unknown as string;
      const equal = constantTimeEqual(counted, b);
      return { equal, count };
    };
    const A = 'a'.repeat(64);
    expect(reads(A, 'b' + 'a'.repeat(63))).toEqual({ equal: false, count: 64 });
    expect(reads(A, 'a'.repeat(63) + 'b')).toEqual({ equal: false, count: 64 });
    expect(reads(A, A)).toEqual({ equal: true, count: 64 });
    expect(constantTimeEqual('ab', 'abc')).toBe(false);
  });
});
