import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { heldBytes, requestBytes } from './held-body.js';
import { idempotency } from './middleware.js';
import { BodyTooLargeError } from './replay.js';

const BODY = '{"amount":500,"currency":"usd"}';
const encoded = new TextEncoder().encode(BODY);

/** A request whose body is a stream, as a server bridge makes one over a socket (two chunks). */
function streamed(key: string, text = BODY, Class: typeof Request = Request): Request {
  const bytes = new TextEncoder().encode(text);
  const half = Math.floor(bytes.byteLength / 2);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(bytes.slice(0, half));
      controller.enqueue(bytes.slice(half));
      controller.close();
    },
  });
  return new Class('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body,
    duplex: 'half',
  } as RequestInit);
}

const texted = (key: string, text = BODY) =>
  new Request('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: text,
  });

afterEach(() => vi.restoreAllMocks());

describe('requestBytes: the body for the fingerprint, the request left with it unread', () => {
  it('a text body: copied out of the request, which is not read at all', async () => {
    const request = texted('k');
    const stream = request.body;
    const bytes = await requestBytes(request, 1_000);
    expect([new TextDecoder().decode(bytes), request.bodyUsed, request.body === stream]).toEqual([BODY, false, true]);
    expect(await request.text()).toBe(BODY);
    expect(new TextDecoder().decode(bytes)).toBe(BODY);
  });

  it('a stream body: read, and replaced by the same bytes; the bytes stay whole once the request is read', async () => {
    const request = streamed('k');
    const stream = request.body;
    const bytes = await requestBytes(request, 1_000);
    expect([request.bodyUsed, request.body === stream, request.body?.locked]).toEqual([false, false, false]);
    expect(await request.text()).toBe(BODY);
    expect([bytes.byteLength, new TextDecoder().decode(bytes)]).toEqual([encoded.byteLength, BODY]);
  });

  it('the replaced body reads as any body: a BYOB reader, a clone, a new Request made from it', async () => {
    const byob = streamed('k');
    await requestBytes(byob, 1_000);
    const reader = (byob.body as ReadableStream<Uint8Array>).getReader({ mode: 'byob' });
    const first = await reader.read(new Uint8Array(100));
    const second = await reader.read(new Uint8Array(100));
    expect([new TextDecoder().decode(first.value), second.done]).toEqual([BODY, true]);

    const cloned = streamed('k');
    await requestBytes(cloned, 1_000);
    const copy = cloned.clone();
    expect([await copy.text(), await cloned.text()]).toEqual([BODY, BODY]);

    const passed = streamed('k');
    await requestBytes(passed, 1_000);
    expect(await new Request(passed).json()).toEqual(JSON.parse(BODY));
  });

  it('no clone on this runtime (Node): neither for a text body nor for a stream body', async () => {
    const clone = vi.spyOn(Request.prototype, 'clone');
    await requestBytes(texted('a'), 1_000);
    await requestBytes(streamed('b'), 1_000);
    expect(clone).toHaveBeenCalledTimes(0);
  });

  it('past the limit: BodyTooLargeError, for a text body and for a stream body', async () => {
    const limit = encoded.byteLength - 1;
    await expect(requestBytes(texted('a'), limit)).rejects.toBeInstanceOf(BodyTooLargeError);
    await expect(requestBytes(streamed('b'), limit)).rejects.toBeInstanceOf(BodyTooLargeError);
    expect((await requestBytes(texted('c'), encoded.byteLength)).byteLength).toBe(encoded.byteLength);
  });

  it('a request with no body: no bytes, nothing replaced', async () => {
    const request = new Request('http://x/', { method: 'POST' });
    expect([(await requestBytes(request, 10)).byteLength, request.body]).toEqual([0, null]);
  });

  it('a body already read is left to the caller (undefined); one not held as bytes too', async () => {
    const read = texted('k');
    await read.text();
    expect(heldBytes(read, 1_000)).toBeUndefined();
    expect(heldBytes(streamed('k'), 1_000)).toBeUndefined();
    expect(new TextDecoder().decode(heldBytes(Response.json({ a: 1 }), 1_000))).toBe('{"a":1}');
  });
});

describe('the Web layer over a stream-bodied request', () => {
  class FrameworkRequest extends Request {
    readonly account = 'acct_a';
  }

  it('the handler gets the request itself, its body unread; the retry replays; other bytes are a mismatch', async () => {
    const seen: unknown[] = [];
    let runs = 0;
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async (request) => {
      runs++;
      seen.push([request instanceof FrameworkRequest, request.bodyUsed, await request.json()]);
      return new Response('{"id":"ch_1"}', { status: 201, headers: { 'content-type': 'application/json' } });
    });
    const original = streamed('k1', BODY, FrameworkRequest);
    const first = await handle(original);
    const replay = await handle(streamed('k1'));
    const other = await handle(streamed('k1', '{"amount":501}'));
    expect([first.status, replay.status, replay.headers.get('idempotent-replayed'), other.status, runs]).toEqual([
      201,
      201,
      'true',
      400,
      1,
    ]);
    expect(seen).toEqual([[true, false, JSON.parse(BODY)]]);
    expect([await first.text(), await replay.text()]).toEqual(['{"id":"ch_1"}', '{"id":"ch_1"}']);
  });
});

describe('the handler’s response, when its bytes are held', () => {
  it('is answered itself, unread; the record keeps its bytes once that answer is read', async () => {
    let answered: Response | undefined;
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async () => {
      answered = Response.json({ id: 'ch_1' }, { status: 201, headers: { 'set-cookie': 'a=b' } });
      return answered;
    });
    const first = await handle(texted('k1'));
    expect([first === answered, first.bodyUsed, first.headers.get('set-cookie')]).toEqual([true, false, 'a=b']);
    expect(await first.text()).toBe('{"id":"ch_1"}');
    const replay = await handle(texted('k1'));
    expect([replay.status, await replay.text()]).toEqual([201, '{"id":"ch_1"}']);
  });

  it('not with a reason phrase of its own: the first answer has none, as the replay', async () => {
    let answered: Response | undefined;
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async () => {
      answered = new Response('done', { status: 201, statusText: 'Made' });
      return answered;
    });
    const first = await handle(texted('k1'));
    expect([first === answered, first.statusText, await first.text()]).toEqual([false, '', 'done']);
  });

  it('past maxResponseBytes: the stored response-too-large problem, as for a stream', async () => {
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant', maxResponseBytes: 3 })(
      async () => new Response('four', { status: 201 }),
    );
    const first = await handle(texted('k1'));
    expect([first.status, ((await first.json()) as { type: string }).type]).toEqual([
      500,
      'urn:idem:problem:response-too-large',
    ]);
  });
});
