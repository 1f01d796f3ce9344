/**
 * @module SHA-256 that runs anywhere, synchronously: Node's native hash where the runtime offers `node:crypto` as a
 * builtin (Node ≥ 20.16, Bun), found through `process.getBuiltinModule` rather than imported, so the module loads
 * on Cloudflare Workers and other Web runtimes; there, a plain implementation of FIPS 180-4 in this file.
 */

/** A running hash: feed it text (as UTF-8) and bytes, then take the hex digest once. */
export interface Sha256 {
  update(data: string | Uint8Array): Sha256;
  digest(): string;
}

interface NodeHash {
  update(data: string | Uint8Array, encoding?: 'utf8'): NodeHash;
  digest(encoding: 'hex'): string;
}

type CreateHash = (algorithm: 'sha256') => NodeHash;

const native: CreateHash | undefined = (() => {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule;
  if (typeof get !== 'function') return undefined;
  try {
    const crypto = get('node:crypto') as { createHash?: CreateHash } | undefined;
    return typeof crypto?.createHash === 'function' ? crypto.createHash : undefined;
  } catch {
    return undefined;
  }
})();

/**
 * A new SHA-256 hash.
 *
 * @example
 * sha256().update('abc').digest() // → 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
 */
export function sha256(): Sha256 {
  if (native) {
    const hash = native('sha256');
    const wrapper: Sha256 = {
      update: (data) => (hash.update(data, 'utf8'), wrapper),
      digest: () => hash.digest('hex'),
    };
    return wrapper;
  }
  return new PortableSha256();
}

/** The plain implementation, exported for tests that compare it with the native one. */
export function portableSha256(): Sha256 {
  return new PortableSha256();
}

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

const ENCODER = new TextEncoder();

class PortableSha256 implements Sha256 {
  readonly #state = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  readonly #block = new Uint8Array(64);
  readonly #words = new Uint32Array(64);
  #filled = 0;
  #length = 0;

  update(data: string | Uint8Array): Sha256 {
    const bytes = typeof data === 'string' ? ENCODER.encode(data) : data;
    this.#length += bytes.byteLength;
    let offset = 0;
    while (offset < bytes.byteLength) {
      const take = Math.min(64 - this.#filled, bytes.byteLength - offset);
      this.#block.set(bytes.subarray(offset, offset + take), this.#filled);
      this.#filled += take;
      offset += take;
      if (this.#filled === 64) {
        this.#compress();
        this.#filled = 0;
      }
    }
    return this;
  }

  digest(): string {
    const bits = this.#length * 8;
    this.#block[this.#filled++] = 0x80;
    if (this.#filled > 56) {
      this.#block.fill(0, this.#filled);
      this.#compress();
      this.#filled = 0;
    }
    this.#block.fill(0, this.#filled, 56);
    const view = new DataView(this.#block.buffer);
    view.setUint32(56, Math.floor(bits / 0x100000000));
    view.setUint32(60, bits >>> 0);
    this.#compress();
    let hex = '';
    for (const word of this.#state) hex += word.toString(16).padStart(8, '0');
    return hex;
  }

  #compress(): void {
    const w = this.#words;
    const block = this.#block;
    for (let i = 0; i < 16; i++)
      w[i] = (block[i * 4]! << 24) | (block[i * 4 + 1]! << 16) | (block[i * 4 + 2]! << 8) | block[i * 4 + 3]!;
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15]!;
      const b = w[i - 2]!;
      const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
      const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
      w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) | 0;
    }
    const s = this.#state;
    let [a, b, c, d, e, f, g, h] = [s[0]!, s[1]!, s[2]!, s[3]!, s[4]!, s[5]!, s[6]!, s[7]!];
    for (let i = 0; i < 64; i++) {
      const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i]! + w[i]!) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    s[0] = s[0]! + a;
    s[1] = s[1]! + b;
    s[2] = s[2]! + c;
    s[3] = s[3]! + d;
    s[4] = s[4]! + e;
    s[5] = s[5]! + f;
    s[6] = s[6]! + g;
    s[7] = s[7]! + h;
  }
}

function rotr(x: number, n: number): number {
  return (x >>> n) | (x << (32 - n));
}

/**
 * Compares two strings in time that depends only on their lengths (equal lengths: every code unit is read).
 *
 * @example
 * constantTimeEqual(storedFingerprint, incoming) // → true or false, without an early exit
 */
export function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}
