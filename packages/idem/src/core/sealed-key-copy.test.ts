/**
 * sealed() copies a raw key when the store is made: a caller that wipes its key buffer afterwards (a Node Buffer,
 * whose `slice()` is a view on the same memory) still seals with its key, never with 32 zero bytes.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { claimRequests, SUCCEEDED, T0 } from '../testing/fixtures.js';
import { sealed, SealedRecordError } from './sealed.js';

const request = claimRequests({ scope: 'acct_key_copy' });

describe('sealed() and the caller’s key buffer', () => {
  it.each([
    ['a Node Buffer', (bytes: Uint8Array) => Buffer.from(bytes)],
    ['a view into a larger buffer', (bytes: Uint8Array) => Buffer.concat([Buffer.alloc(7), bytes]).subarray(7)],
    ['a Uint8Array', (bytes: Uint8Array) => new Uint8Array(bytes)],
  ])('%s wiped after the store is made: the record opens with the original bytes only', async (_, given) => {
    const original = new Uint8Array(randomBytes(32));
    const secret = given(original);
    const inner = memoryStore();
    const store = sealed(inner, { keys: [{ id: 'k1', key: secret }] });
    secret.fill(0);
    const req = request();
    expect((await store.claim(req)).kind).toBe('claimed');
    expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome: SUCCEEDED })).toEqual({
      ok: true,
    });

    const reader = sealed(inner, { keys: [{ id: 'k1', key: original }] });
    const response = (await reader.get(req.pk))?.response;
    expect(response?.headers).toEqual([['content-type', 'application/json']]);
    expect(new TextDecoder().decode(response?.body)).toBe('{}');

    const zeros = sealed(inner, { keys: [{ id: 'k1', key: new Uint8Array(32) }] });
    const refused = await zeros.get(req.pk).then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(SealedRecordError);
    expect((refused as SealedRecordError).reason).toBe('not-authentic');
  });
});
