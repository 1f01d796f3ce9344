/**
 * Body and response size limits hold in the Web layer (issue 6, item 4): a keyed request body over
 * `maxBodyBytes` is a 413 problem with nothing claimed and the handler never run; a response over
 * `maxResponseBytes` (body plus stored header names and values) is answered, stored and replayed as a final 500
 * `response-too-large` problem, so no oversized body is ever stored. (Over TCP the demo's 1 MiB limit is fuzzed in
 * test/fuzz/input.test.ts; the demo's own limits before a body is read are in ./demo-hardening.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { idempotency } from 'idem/http';
import { memoryStore } from 'idem/stores/memory';

const post = (key: string, body: Uint8Array) =>
  new Request('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/octet-stream' },
    body: body as Uint8Array<ArrayBuffer>,
  });

describe('size limits in the Web layer', () => {
  it('a request body of maxBodyBytes runs; one byte more is a 413 problem, claims nothing and never runs the handler', async () => {
    const store = memoryStore();
    let runs = 0;
    const handle = idempotency({ store, scope: 'single-tenant', ttlMs: 60_000, leaseMs: 5_000, maxBodyBytes: 1024 })(
      async (request) => {
        runs++;
        return new Response(String((await request.arrayBuffer()).byteLength), { status: 201 });
      },
    );
    const fits = await handle(post('fits', new Uint8Array(1024)));
    expect([fits.status, await fits.text(), runs]).toEqual([201, '1024', 1]);
    const over = await handle(post('over', new Uint8Array(1025)));
    expect([over.status, over.headers.get('content-type'), ((await over.json()) as { type: string }).type]).toEqual([
      413,
      'application/problem+json',
      'urn:idem:problem:request-too-large',
    ]);
    expect([runs, await store.get('IDEMPOTENCY#single-tenant#over')]).toEqual([1, null]);
  });

  it('a response over maxResponseBytes is answered and replayed as the same final 500, and only that problem is stored', async () => {
    const store = memoryStore();
    let runs = 0;
    const handle = idempotency({
      store,
      scope: 'single-tenant',
      ttlMs: 60_000,
      leaseMs: 5_000,
      maxResponseBytes: 1024,
    })(async () => {
      runs++;
      return new Response('x'.repeat(1025), { status: 201, headers: { 'content-type': 'text/plain' } });
    });
    const first = await handle(post('big', new Uint8Array(1)));
    const firstBody = await first.text();
    const replay = await handle(post('big', new Uint8Array(1)));
    expect([first.status, (JSON.parse(firstBody) as { type: string }).type]).toEqual([
      500,
      'urn:idem:problem:response-too-large',
    ]);
    expect([replay.status, replay.headers.get('idempotent-replayed'), await replay.text(), runs]).toEqual([
      500,
      'true',
      firstBody,
      1,
    ]);
    const stored = await store.get('IDEMPOTENCY#single-tenant#big');
    expect([
      stored?.status,
      stored?.retryable,
      stored?.response?.status,
      Buffer.from(stored?.response?.body ?? []).toString(),
    ]).toEqual(['failed', false, 500, firstBody]);
    expect((stored?.response?.body.byteLength ?? Infinity) < 1024).toBe(true);
  });

  it('a response weighing exactly maxResponseBytes (body plus its headers as stored: JSON pairs) is stored whole and replayed byte for byte; one byte more is the final 500', async () => {
    const store = memoryStore();
    // [["content-type","text/plain"]] weighs 31 bytes as stores encode it: a 993-byte body brings it to 1024.
    const respond = (body: string) =>
      idempotency({ store, scope: 'single-tenant', ttlMs: 60_000, leaseMs: 5_000, maxResponseBytes: 1024 })(
        async () => new Response(body, { status: 201, headers: { 'content-type': 'text/plain' } }),
      );
    const fits = 'y'.repeat(993);
    await respond(fits)(post('edge', new Uint8Array(1)));
    const replay = await respond(fits)(post('edge', new Uint8Array(1)));
    expect([replay.status, replay.headers.get('idempotent-replayed'), await replay.text()]).toEqual([
      201,
      'true',
      fits,
    ]);
    const over = await respond('y'.repeat(994))(post('over', new Uint8Array(1)));
    expect([over.status, ((await over.json()) as { type: string }).type]).toEqual([
      500,
      'urn:idem:problem:response-too-large',
    ]);
  });
});
