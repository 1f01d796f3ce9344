/**
 * The Fastify plugin in a charges app: a Web Response, a hijacked reply and an error handler's answer replayed;
 * keys scoped by the account onRequest authenticated; `required` and opted-out routes; the exact bytes handed to
 * Fastify's parser; options validated by name.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../testing/fixtures.js';
import { memoryStore } from '../../stores/memory/index.js';
import { expectScopedByAccount } from '../account-scope.test-kit.js';
import { chargesApp, problemOf, replayed } from './app.test-kit.js';
import { idempotency } from './index.js';

describe('idem/fastify', () => {
  it('replays a Web Response returned by the handler, with its Location', async () => {
    const app = await chargesApp();
    const first = await app.post('/web-response', { key: 'k1' });
    const retry = await app.post('/web-response', { key: 'k1' });
    expect([first.statusCode, first.body, first.headers.location]).toEqual([201, '{"id":"re_1"}', '/v1/refunds/re_1']);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      201,
      '{"id":"re_1"}',
      { 'content-type': 'application/json', location: '/v1/refunds/re_1', 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ 'web-response': 1 });
  });

  it('a hijacked reply is recorded as a final 500 problem: the work never runs twice for its key', async () => {
    const app = await chargesApp();
    const first = await app.post('/hijacked', { key: 'h1' });
    expect([first.statusCode, first.body]).toEqual([201, '{"id":"ch_h1"}']);
    // The record is written after the hijacked answer went out: wait for it to leave in_progress.
    await waitFor(
      'the hijacked record to leave in_progress',
      async () => (await app.record('h1'))?.status !== 'in_progress',
      {
        timeoutMs: 5_000,
      },
    );
    const record = await app.record('h1');
    expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', false, 500]);
    const retry = await app.post('/hijacked', { key: 'h1' });
    expect([retry.statusCode, retry.json<{ type: string }>().type, retry.headers['idempotent-replayed']]).toEqual([
      500,
      'urn:idem:problem:response-not-recorded',
      'true',
    ]);
    expect(app.runs).toEqual({ hijacked: 1 });
  });

  it("replays a final refusal written by Fastify's error handler", async () => {
    const app = await chargesApp();
    const first = await app.post('/declined', { key: 'k1' });
    const retry = await app.post('/declined', { key: 'k1' });
    const body = '{"statusCode":402,"error":"Payment Required","message":"card_declined"}';
    expect([first.statusCode, first.body]).toEqual([402, body]);
    expect([retry.statusCode, retry.body, replayed(retry)]).toEqual([
      402,
      body,
      { 'content-type': 'application/json; charset=utf-8', location: null, 'idempotent-replayed': 'true' },
    ]);
    expect(app.runs).toEqual({ declined: 1 });
    const record = await app.record('k1');
    expect([record?.status, record?.retryable]).toEqual(['failed', false]);
  });

  it('scopes keys by the account authenticated in onRequest', async () => {
    const app = await chargesApp();
    await expectScopedByAccount(app, (r) => r.body);
  });

  it('requires keys on routes configured with required: true, and leaves opted-out routes alone', async () => {
    const app = await chargesApp();
    const refused = problemOf(await app.post('/required'));
    expect([refused.status, refused.body.type]).toEqual([400, 'urn:idem:problem:idempotency-key-missing']);
    const keyed = await app.post('/required', { key: 'k1' });
    expect([keyed.statusCode, keyed.body]).toEqual([201, '{"protected":true}']);
    await app.post('/v1/charges');
    await app.post('/v1/charges');
    for (let i = 0; i < 2; i++) expect((await app.post('/opted-out', { key: 'k2' })).body).toBe('{"context":null}');
    expect(app.runs).toEqual({ required: 1, json: 2, 'opted-out': 2 });
    expect(await app.record('k2')).toBeNull();
  });

  it("hands the exact bytes to Fastify's parser, and fingerprints reordered JSON as equal", async () => {
    const app = await chargesApp();
    const note = 'x'.repeat(300_000);
    const first = await app.post('/v1/charges', { key: 'k1', body: { amount: 42, note } });
    expect([first.statusCode, first.body]).toEqual([201, '{"id":"ch_1","amount":42}']);
    const retry = await app.post('/v1/charges', { key: 'k1', body: `{ "note": "${note}", "amount": 42 }` });
    expect([retry.statusCode, retry.headers['idempotent-replayed']]).toEqual([201, 'true']);
    expect(app.runs).toEqual({ json: 1 });
  });

  it('validates its options by name', () => {
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', required: 'yes' as never })).toThrow(
      'Expected `required` to be a boolean or a function, got "yes".',
    );
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', mismatchStatus: 409 as 400 })).toThrow(
      'Expected `mismatchStatus` to be 400 or 422, got 409.',
    );
  });
});
