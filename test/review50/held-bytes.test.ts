/**
 * Review 50, issue 31's Web path: bytes taken from undici's internal state (`http/held-body.ts`). A message made
 * from bytes (`Uint8Array`, `ArrayBuffer`) keeps them as `source`, and undici's stream hands that buffer over
 * (detaches it) when it is pulled — which a read `clone()` does. `sourceBytes` sliced the detached buffer and
 * threw; a detached `source` is now taken as "not held" and the bytes are read from the stream.
 * Only where undici keeps the state this path reads (Node 20/22's fetch); skipped elsewhere.
 */
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { idempotency } from 'idem/http';
import { idempotency as honoIdempotency } from 'idem/hono';
import { memoryStore } from 'idem/stores/memory';

const probe = new Request('http://idem.invalid/', { method: 'POST', body: 'x' });
const heldState = Object.getOwnPropertySymbols(probe).some((symbol) => symbol.description === 'state');
const itHeld = heldState ? it : it.skip;
const bytes = (text: string) => new TextEncoder().encode(text);

const keyed = (key: string, body: BodyInit) =>
  new Request('http://pay.test/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body,
  });

const answered = async (response: Response) => [response.status, await response.text()] as const;

describe('review 50: a byte body whose clone was read', () => {
  itHeld('request: the first attempt runs (201) and a reused key with another payload is refused (400)', async () => {
    let runs = 0;
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async (request) => {
      runs++;
      return new Response(await request.text(), { status: 201 });
    });
    const send = async (payload: string) => {
      const request = keyed('req-1', bytes(payload));
      await request.clone().text(); // a logging middleware reads a clone of the request
      return (await handle(request)).status;
    };
    // Before the fix: [500, 500, 0] — TypeError: Cannot perform %TypedArray%.prototype.slice on a detached ArrayBuffer.
    expect([await send('{"amount":100}'), await send('{"amount":999}'), runs]).toEqual([201, 400, 1]);
  });

  itHeld('response: the work runs once and its retry replays the first answer', async () => {
    let runs = 0;
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async (request) => {
      runs++;
      await request.text();
      const response = new Response(bytes(`{"charge":"ch_${runs}"}`), { status: 201 });
      await response.clone().arrayBuffer(); // a response logger reads a clone
      return response;
    });
    const first = await answered(await handle(keyed('res-1', '{"amount":100}')));
    const retry = await answered(await handle(keyed('res-1', '{"amount":100}')));
    // Before the fix: 500 twice and runs 2 — the charge ran twice, and the client never got its answer.
    expect([first, retry, runs]).toEqual([[201, '{"charge":"ch_1"}'], [201, '{"charge":"ch_1"}'], 1]);
  });

  itHeld('hono: c.body(bytes) under a middleware that logs a clone runs once and replays', async () => {
    let charges = 0;
    const app = new Hono();
    app.use('/pay', honoIdempotency({ store: memoryStore(), scope: 'single-tenant' }));
    app.use('/pay', async (c, next) => {
      await next();
      await c.res.clone().text();
    });
    app.post('/pay', async (c) => {
      charges++;
      await c.req.json();
      return c.body(bytes(`{"charge":"ch_${charges}"}`), 201);
    });
    const send = async () =>
      answered(
        await app.request('/pay', {
          method: 'POST',
          headers: { 'idempotency-key': 'hono-1', 'content-type': 'application/json' },
          body: '{"amount":100}',
        }),
      );
    const first = await send();
    const retry = await send();
    // Before the fix: 500 twice and charges 2.
    expect([first, retry, charges]).toEqual([[201, '{"charge":"ch_1"}'], [201, '{"charge":"ch_1"}'], 1]);
  });
});
