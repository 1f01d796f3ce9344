import { describe, expect, it, vi } from 'vitest';
import { idempotency } from '../http/middleware.js';
import { memoryStore } from '../stores/memory/index.js';
import { describeStoreConformance } from '../testing/index.js';
import { claimRequests, SUCCEEDED, T0 } from '../testing/fixtures.js';
import { isIdempotencyError } from './errors.js';
import type { IdempotencyRecord, IdempotencyStore, Outcome } from './record.js';
import { sealed, sealOverhead, SealedRecordError, type SealingKey } from './sealed.js';

const DAY = 86_400_000;
const rawKey = (fill: number): Uint8Array => new Uint8Array(32).fill(fill);
const KEY_A: SealingKey = { id: 'key-a', key: rawKey(0xa1) };
const KEY_B: SealingKey = { id: 'key-b', key: rawKey(0xb2) };
const request = claimRequests({ scope: 'acct_unit' });

/** Claims and completes a key of `store` with `outcome`; returns its pk. */
async function completed(store: IdempotencyStore<unknown>, outcome: Outcome = SUCCEEDED): Promise<string> {
  const req = request();
  expect((await store.claim(req)).kind).toBe('claimed');
  expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
  return req.pk;
}

/** The reason `promise` rejected with, as a SealedRecordError. */
async function reasonOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SealedRecordError);
  return (error as SealedRecordError).reason;
}

/** A memory store that declares a limit, as DynamoDB and MySQL do: the conformance case for it runs too. */
const limited = (maxResponseBytes: number): IdempotencyStore<undefined> =>
  Object.create(memoryStore(), { maxResponseBytes: { value: maxResponseBytes } }) as IdempotencyStore<undefined>;

describeStoreConformance({ name: 'memory, sealed', create: async () => sealed(limited(65_536), { keys: [KEY_A] }) });

describe('sealed store', () => {
  it('stores an envelope: magic, version, key id, 12-byte IV, ciphertext and tag; no headers in plain', async () => {
    const inner = memoryStore();
    const pk = await completed(sealed(inner, { keys: [KEY_A] }));
    const stored = (await inner.get(pk))?.response;
    const { headers, body } = SUCCEEDED.response as NonNullable<Outcome['response']>;
    const weight = body.byteLength + JSON.stringify(headers).length;
    expect(stored?.status).toBe(201);
    expect(stored?.headers).toEqual([]);
    expect(stored?.body.byteLength).toBe(weight + 38 + 'key-a'.length);
    expect(sealOverhead('key-a')).toBe(43);
    expect([...(stored?.body.subarray(0, 6) ?? [])]).toEqual([0x00, 0x69, 0x64, 0x6d, 1, 5]);
    expect(new TextDecoder().decode(stored?.body.subarray(6, 11))).toBe('key-a');
  });

  it('draws a fresh IV for every seal: the same response sealed twice differs', async () => {
    const inner = memoryStore();
    const store = sealed(inner, { keys: [KEY_A] });
    const [one, two] = [await completed(store), await completed(store)];
    const iv = async (pk: string) => [...((await inner.get(pk))?.response?.body.subarray(11, 23) ?? [])];
    expect(await iv(one)).not.toEqual(await iv(two));
    expect((await store.get(one))?.response).toEqual((await store.get(two))?.response);
  });

  it('opens with a CryptoKey, and an older decrypt-only CryptoKey opens what it sealed', async () => {
    const generate = (usages: KeyUsage[]) => crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, false, usages);
    const old = await generate(['encrypt', 'decrypt']);
    const inner = memoryStore();
    const pk = await completed(sealed(inner, { keys: [{ id: 'old', key: old }] }));
    const rotated = sealed(inner, {
      keys: [{ id: 'new', key: await generate(['encrypt', 'decrypt']) }, KEY_A, { id: 'old', key: old }],
    });
    expect((await rotated.get(pk))?.response).toEqual(SUCCEEDED.response);
  });

  it('refuses a plain record unless acceptPlain, which opens it as it is', async () => {
    const inner = memoryStore();
    const pk = await completed(inner);
    expect(await reasonOf(sealed(inner, { keys: [KEY_A] }).get(pk))).toBe('not-sealed');
    expect((await sealed(inner, { keys: [KEY_A], acceptPlain: true }).get(pk))?.response).toEqual(SUCCEEDED.response);
  });

  it('writePlain writes responses in plain text and opens both sealed and plain ones', async () => {
    const inner = memoryStore();
    const sealedPk = await completed(sealed(inner, { keys: [KEY_A] }));
    const switching = sealed(inner, { keys: [KEY_A], writePlain: true });
    const plainPk = await completed(switching);
    expect((await inner.get(plainPk))?.response).toEqual(SUCCEEDED.response);
    expect((await switching.list({ scope: 'acct_unit', limit: 10 })).map((r) => [r.pk, r.response])).toEqual([
      [sealedPk, SUCCEEDED.response],
      [plainPk, SUCCEEDED.response],
    ]);
  });

  it('authenticates the status code: a sealed response whose stored status changed does not open', async () => {
    const inner = memoryStore();
    const store = sealed(inner, { keys: [KEY_A] });
    const pk = await completed(store);
    ((await inner.get(pk))?.response as { status: number }).status = 200;
    expect(await reasonOf(store.get(pk))).toBe('not-authentic');
    await expect(store.list({ scope: 'acct_unit', limit: 10 })).rejects.toThrow(
      'Idem could not open a sealed response: authentication failed with key id "key-a": the envelope, or the record\'s key or status code, changed since it was sealed.',
    );
  });

  it('refuses an envelope of another version, or one too short to hold an IV and a tag', async () => {
    const inner = memoryStore();
    const store = sealed(inner, { keys: [KEY_A] });
    const pk = await completed(store);
    const stored = (await inner.get(pk)) as IdempotencyRecord;
    const body = (stored.response as { body: Uint8Array }).body;
    (stored.response as { body: Uint8Array }).body = body.subarray(0, 11 + 12 + 16 + 3);
    expect(await reasonOf(store.get(pk))).toBe('malformed');
    body[4] = 2;
    (stored.response as { body: Uint8Array }).body = body;
    await expect(store.get(pk)).rejects.toThrow(
      "Idem could not open a sealed response: the envelope's format version is 2.",
    );
  });

  it('names an unknown key id, and refuses to print an id no key could have', async () => {
    const inner = memoryStore();
    const pk = await completed(sealed(inner, { keys: [KEY_A] }));
    await expect(sealed(inner, { keys: [KEY_B] }).get(pk)).rejects.toThrow(
      'Idem could not open a sealed response: it was sealed with key id "key-a", which is not among `keys` (keep a retired key for reading until its records expire).',
    );
    const body = (await inner.get(pk))?.response?.body as Uint8Array;
    body[6] = 0x1b; // ESC: printed raw, it would reach an operator's terminal
    const error = (await sealed(inner, { keys: [KEY_A] })
      .get(pk)
      .then(
        () => null,
        (e: unknown) => e,
      )) as SealedRecordError;
    expect([error.reason, error.keyId, error.message.includes('\x1b')]).toEqual(['unknown-key', null, false]);
    expect(error.message).toContain('it was sealed with an invalid key id,');
  });

  it("shrinks the store's maxResponseBytes by the overhead: a response at the limit seals to exactly the store's limit", async () => {
    const inner = limited(1_000);
    const store = sealed(inner, { keys: [KEY_A] });
    expect(store.maxResponseBytes).toBe(1_000 - 43);
    expect(sealed(memoryStore(), { keys: [KEY_A] }).maxResponseBytes).toBeUndefined();
    expect(sealed(limited(40), { keys: [KEY_A] }).maxResponseBytes).toBe(0); // a limit under the overhead holds nothing
    const headers = { 'content-type': 'text/plain' };
    const weight = JSON.stringify(Object.entries(headers)).length; // 31: how the stores weigh the headers
    let n = 0;
    const handle = idempotency({ store, scope: () => 'acct_unit', ttlMs: DAY })(
      async (req) => new Response('x'.repeat(Number(await req.text())), { status: 201, headers }),
    );
    const post = (size: number) =>
      handle(
        new Request('http://api.test/v1/r', {
          method: 'POST',
          headers: { 'idempotency-key': `k${++n}` },
          body: String(size),
        }),
      );
    const fits = await post(957 - weight);
    expect([fits.status, (await fits.text()).length, weight]).toEqual([201, 926, 31]);
    const [record] = await inner.list({ scope: 'acct_unit', limit: 1 });
    expect(record?.response?.body.byteLength).toBe(1_000);
    const over = await post(957 - weight + 1);
    expect([over.status, ((await over.json()) as { type: string }).type]).toEqual([
      500,
      'urn:idem:problem:response-too-large',
    ]);
  });

  it('keeps runLocal only where the work may wait (async); a synchronous one cannot seal', async () => {
    const work = { runLocal: async () => ({ kind: 'rolled-back' as const }) };
    const asyncStore = Object.assign(Object.create(memoryStore()), work, {
      localWork: 'async',
    }) as IdempotencyStore<undefined>;
    const syncStore = Object.assign(Object.create(memoryStore()), work, {
      localWork: 'sync',
    }) as IdempotencyStore<undefined>;
    expect([
      sealed(asyncStore, { keys: [KEY_A] }).localWork,
      typeof sealed(asyncStore, { keys: [KEY_A] }).runLocal,
    ]).toEqual(['async', 'function']);
    expect([
      sealed(syncStore, { keys: [KEY_A] }).localWork,
      typeof sealed(syncStore, { keys: [KEY_A] }).runLocal,
    ]).toEqual([undefined, 'undefined']);
  });

  it('passes name, round trips, renew, release and sweep through', async () => {
    const inner = memoryStore();
    const store = sealed(inner, { keys: [KEY_A] });
    const req = request();
    await store.claim(req);
    expect(await store.renew({ pk: req.pk, token: req.token, now: T0 + 1, leaseMs: 10, expiresAt: T0 + 5 })).toEqual({
      ok: true,
    });
    expect(await store.release({ pk: req.pk, token: req.token })).toEqual({ ok: true });
    await completed(store);
    expect(await store.sweep({ now: T0 + 10 * DAY })).toBe(1);
    expect([store.name, store.roundTrips, inner.roundTrips]).toEqual(['memory', 6, 6]);
  });

  it('validates its options by name, and never prints key bytes', () => {
    const inner = memoryStore();
    const cases: Array<[unknown, string]> = [
      [{ keys: [] }, 'Expected `keys` to be a non-empty array of { id, key }, newest first.'],
      [{}, 'Expected `keys` to be a non-empty array of { id, key }, newest first.'],
      [{ keys: [{ id: '', key: rawKey(1) }] }, 'Expected `keys[0].id` to be 1–64 visible ASCII characters, got "".'],
      [
        { keys: [{ id: 'a b', key: rawKey(1) }] },
        'Expected `keys[0].id` to be 1–64 visible ASCII characters, got "a b".',
      ],
      [
        { keys: [KEY_A, { id: 'key-a', key: rawKey(2) }] },
        'Expected `keys[1].id` to be unique among the keys, got "key-a".',
      ],
      [
        { keys: [{ id: 'short', key: new Uint8Array(31).fill(0x5a) }] },
        'Expected `keys[0].key` to be 32 raw bytes (AES-256) or an AES-GCM CryptoKey, got 31 bytes.',
      ],
      [
        { keys: [{ id: 'text', key: 'Z'.repeat(32) }] },
        'Expected `keys[0].key` to be 32 raw bytes or an AES-GCM CryptoKey with the usages encrypt and decrypt.',
      ],
      [{ keys: [KEY_A], acceptPlain: 'yes' }, 'Expected `acceptPlain` to be a boolean, got "yes".'],
      [{ keys: [KEY_A], writePlain: 1 }, 'Expected `writePlain` to be a boolean, got 1.'],
    ];
    for (const [options, message] of cases) {
      let thrown: unknown;
      try {
        sealed(inner, options as never);
      } catch (error) {
        thrown = error;
      }
      expect([isIdempotencyError(thrown, 'CONFIG_INVALID'), (thrown as Error).message]).toEqual([true, message]);
      expect((thrown as Error).message).not.toMatch(/90|ZZZZ/); // 0x5a bytes, or the text key
    }
    expect(() => sealed({} as IdempotencyStore, { keys: [KEY_A] })).toThrow(
      'Expected `store` to be an IdempotencyStore.',
    );
  });

  it('refuses to start on a runtime without WebCrypto', () => {
    vi.stubGlobal('crypto', undefined);
    try {
      expect(() => sealed(memoryStore(), { keys: [KEY_A] })).toThrow(
        'Expected `sealed` to be used on a runtime with WebCrypto (globalThis.crypto.subtle).',
      );
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it('refuses a CryptoKey that cannot seal as the newest, or is not AES-GCM', async () => {
    const decryptOnly = await crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, false, ['decrypt']);
    const hmac = await crypto.subtle.generateKey({ name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    expect(() => sealed(memoryStore(), { keys: [{ id: 'd', key: decryptOnly }] })).toThrow(
      'Expected `keys[0].key` to be 32 raw bytes or an AES-GCM CryptoKey with the usages encrypt and decrypt.',
    );
    expect(() => sealed(memoryStore(), { keys: [KEY_A, { id: 'd', key: decryptOnly }] })).not.toThrow();
    expect(() => sealed(memoryStore(), { keys: [KEY_A, { id: 'h', key: hmac }] })).toThrow(
      'Expected `keys[1].key` to be 32 raw bytes or an AES-GCM CryptoKey with the usages decrypt.',
    );
  });

  it("copies raw key bytes: changing the caller's buffer afterwards changes nothing", async () => {
    const bytes = rawKey(0x33);
    const inner = memoryStore();
    const store = sealed(inner, { keys: [{ id: 'k', key: bytes }] });
    bytes.fill(0);
    const pk = await completed(store);
    expect((await sealed(inner, { keys: [{ id: 'k', key: rawKey(0x33) }] }).get(pk))?.response).toEqual(
      SUCCEEDED.response,
    );
  });
});
