/**
 * `sealed()` at its edges: what a bad key id's configuration error shows of it, and a plain record whose body starts
 * like a sealed envelope while plain records are accepted (a migration): refused as one, 503, the handler not run.
 */
import { describe, expect, it } from 'vitest';
import { idempotency } from '../http/middleware.js';
import { memoryStore } from '../stores/memory/index.js';
import type { IdempotencyStore } from './record.js';
import { sealed, type SealedOptions, type SealedRecordError } from './sealed.js';

const KEY_A = { id: 'key-a', key: new Uint8Array(32).fill(0xa1) };

/** The message `sealed()` throws for these options. */
function configMessage(options: unknown): string {
  try {
    sealed(memoryStore(), options as SealedOptions);
  } catch (error) {
    return (error as Error).message;
  }
  return 'no error';
}

describe('a bad key id in the configuration', () => {
  it('is shown as its first 8 characters, escaped, and its length: never whole', () => {
    const pasted = 'c2VjcmV0LWtleS1ieXRlcy1ub3QtYW4taWQ='.repeat(3); // a key pasted where the id goes
    expect(configMessage({ keys: [{ id: pasted, key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got "c2VjcmV0…" (108 UTF-16 units).',
    );
    expect(configMessage({ keys: [KEY_A, { id: `k\x1b]0;pwned\x07${'x'.repeat(1_000_000)}`, key: KEY_A.key }] })).toBe(
      'Expected `keys[1].id` to be 1–64 visible ASCII characters, got "k\\u{1b}]0;pwn…" (1000011 UTF-16 units).',
    );
    expect(configMessage({ keys: [{ id: 'a\u202eb"\\', key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got "a\\u{202e}b\\u{22}\\u{5c}".',
    );
    expect(configMessage({ keys: [{ id: 'key a', key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got "key a".',
    );
    expect(configMessage({ keys: [{ id: { secret: 'x'.repeat(100) }, key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got a value of type object.',
    );
    expect(configMessage({ keys: [{ key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got a value of type undefined.',
    );
    expect(configMessage({ keys: [{ id: null, key: KEY_A.key }] })).toBe(
      'Expected `keys[0].id` to be 1–64 visible ASCII characters, got null.',
    );
  });
});

/** `\0idm`, version 1, a 5-byte key id `key-a`, then 40 bytes: the start of a sealed envelope, in a plain answer. */
const LOOKALIKE = Uint8Array.from([
  0x00,
  0x69,
  0x64,
  0x6d,
  1,
  5,
  ...new TextEncoder().encode('key-a'),
  ...new Array<number>(40).fill(7),
]);

/** A route that answers `body` (bytes, with `contentType` when given) and counts its runs. */
function route(store: IdempotencyStore<unknown>, body: Uint8Array, contentType?: string) {
  const runs = { count: 0 };
  const handle = idempotency({ store, scope: 'single-tenant' })(async () => {
    runs.count++;
    return new Response(body.slice(), {
      status: 201,
      headers: contentType === undefined ? {} : { 'content-type': contentType },
    });
  });
  return { handle, runs };
}

const post = (key: string) =>
  new Request('http://api.test/v1/exports', { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' });

describe('a plain record whose body starts like a sealed envelope, while plain records are accepted', () => {
  it.each([{ acceptPlain: true }, { writePlain: true }])(
    'with no stored headers is refused as an envelope (%o): 503, the handler runs 0 times',
    async (mode) => {
      const inner = memoryStore();
      const plain = route(inner, LOOKALIKE);
      expect((await plain.handle(post('k-1'))).status).toBe(201);
      expect((await inner.list({ scope: 'single-tenant', limit: 10 }))[0]?.response?.headers).toEqual([]);
      const migrating = route(sealed(inner, { keys: [KEY_A], ...mode }), LOOKALIKE);
      const retry = await migrating.handle(post('k-1'));
      expect([retry.status, (await retry.json()) as unknown]).toMatchObject([
        503,
        { type: 'urn:idem:problem:idempotency-store-unavailable' },
      ]);
      expect([plain.runs.count, migrating.runs.count]).toEqual([1, 0]);
      const error = await sealed(inner, { keys: [KEY_A], ...mode })
        .list({ scope: 'single-tenant', limit: 10 })
        .then(
          () => null,
          (e: unknown) => e as SealedRecordError,
        );
      expect([error?.reason, error?.message]).toEqual([
        'not-authentic',
        'Idem could not open a sealed response: authentication failed with key id "key-a": the envelope, or the ' +
          "record's key or status code, changed since it was sealed. Plain records are accepted, but this one starts " +
          'like a sealed envelope and is refused as one (see docs/SECURITY.md, Sealed responses).',
      ]);
    },
  );

  it('with any stored header (a Content-Type) is plain: replayed byte-identical, the handler run once', async () => {
    const inner = memoryStore();
    const plain = route(inner, LOOKALIKE, 'application/octet-stream');
    const first = await plain.handle(post('k-2'));
    const migrating = route(sealed(inner, { keys: [KEY_A], acceptPlain: true }), LOOKALIKE);
    const retry = await migrating.handle(post('k-2'));
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(new Uint8Array(await retry.arrayBuffer())).toEqual(new Uint8Array(await first.arrayBuffer()));
    expect([plain.runs.count, migrating.runs.count]).toEqual([1, 0]);
  });

  it('outside a migration the note is not added', async () => {
    const inner = memoryStore();
    await route(inner, LOOKALIKE).handle(post('k-3'));
    await expect(sealed(inner, { keys: [KEY_A] }).list({ scope: 'single-tenant', limit: 10 })).rejects.toThrow(
      /changed since it was sealed\.$/,
    );
  });
});
