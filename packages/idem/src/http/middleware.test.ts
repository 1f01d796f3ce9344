import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import type { IdempotencyStore } from '../core/record.js';
import { idempotency, type HandlerContext } from './middleware.js';

const DAY = 86_400_000;
const url = 'http://api.test/v1/charges';
const charge = (
  key: string | null,
  body: unknown = { amount: 50000, currency: 'usd' },
  extra: Record<string, string> = {},
) =>
  new Request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === null ? {} : { 'idempotency-key': key }), ...extra },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const setup = (options: Partial<Parameters<typeof idempotency>[0]> = {}) => {
  const store = memoryStore();
  let runs = 0;
  let last: HandlerContext<unknown> | undefined;
  const handle = idempotency({ store, ttlMs: DAY, scope: (r) => r.headers.get('x-account') ?? 'acct_a', ...options })(
    async (request, context) => {
      runs++;
      last = context;
      const body = (await request.json()) as { amount: number; status?: number };
      const headers = new Headers({ 'content-type': 'application/json', location: `/v1/charges/ch_${runs}` });
      headers.append('set-cookie', 'session=secret');
      headers.set('date', 'Mon, 30 Nov 2026 00:00:00 GMT');
      headers.set('x-trace', 'first');
      return new Response(`{"id":"ch_${runs}","amount":${body.amount}}`, { status: body.status ?? 201, headers });
    },
  );
  return { store, handle, runs: () => runs, context: () => last };
};

const problemOf = async (response: Response) => ({
  status: response.status,
  type: response.headers.get('content-type'),
  body: (await response.json()) as { type: string; title: string; status: number; detail?: string },
});

// The HTTP contract every adapter meets (409s, keyless and invalid keys, 413, 503s, oversized responses, …) is
// in the adapter conformance suite (conformance.test.ts); these are the Web layer's own cases, in-process.
describe('idempotency middleware', () => {
  it('runs once; the retry replays status, allow-listed headers and exact bytes, marked as replayed', async () => {
    const { handle, runs } = setup();
    const first = await handle(charge('k1'));
    const firstBody = await first.text();
    expect(first.status).toBe(201);
    expect(first.headers.get('set-cookie')).toBe('session=secret');
    expect(first.headers.get('idempotent-replayed')).toBeNull();

    const retry = await handle(charge('k1'));
    expect(runs()).toBe(1);
    expect(retry.status).toBe(201);
    expect(await retry.text()).toBe(firstBody);
    expect(firstBody).toBe('{"id":"ch_1","amount":50000}');
    expect([...retry.headers]).toEqual([
      ['content-type', 'application/json'],
      ['idempotent-replayed', 'true'],
      ['location', '/v1/charges/ch_1'],
    ]);
  });

  it('treats reordered JSON as the same request', async () => {
    const { handle, runs } = setup();
    await handle(charge('k1', '{"amount":50000,"currency":"usd"}'));
    const retry = await handle(charge('k1', '{ "currency": "usd", "amount": 50000 }'));
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(runs()).toBe(1);
  });

  it('refuses a reused key with another payload: 400 problem, or 422 by option', async () => {
    for (const mismatchStatus of [400, 422] as const) {
      const { handle, runs } = setup({ mismatchStatus });
      await handle(charge('k1'));
      const tampered = await problemOf(await handle(charge('k1', { amount: 500000, currency: 'usd' })));
      expect(runs()).toBe(1);
      expect(tampered).toEqual({
        status: mismatchStatus,
        type: 'application/problem+json',
        body: {
          type: 'urn:idem:problem:idempotency-key-reused',
          title: 'Idempotency-Key reused',
          status: mismatchStatus,
          detail: 'This Idempotency-Key was already used with a different request (method, path, query or body).',
        },
      });
    }
  });

  it('keeps scopes apart: the same key in another account runs its own work', async () => {
    const { handle, runs } = setup();
    await handle(charge('k1', undefined, { 'x-account': 'acct_a' }));
    const other = await handle(charge('k1', { amount: 7 }, { 'x-account': 'acct_b' }));
    expect(runs()).toBe(2);
    expect(await other.text()).toBe('{"id":"ch_2","amount":7}');
  });

  it('passes other methods straight through', async () => {
    const { handle, runs } = setup();
    const get = await handle(
      new Request(url, { method: 'PUT', headers: { 'idempotency-key': 'k1' }, body: '{"amount":1}' }),
    );
    expect(get.status).toBe(201);
    await handle(new Request(url, { method: 'PUT', headers: { 'idempotency-key': 'k1' }, body: '{"amount":1}' }));
    expect(runs()).toBe(2);
  });

  it('replays a final refusal (402) but runs a retryable failure (503) again', async () => {
    const { handle, runs } = setup();
    await handle(charge('declined', { amount: 1, status: 402 }));
    const replay = await handle(charge('declined', { amount: 1, status: 402 }));
    expect([replay.status, replay.headers.get('idempotent-replayed'), runs()]).toEqual([402, 'true', 1]);
    await handle(charge('flaky', { amount: 1, status: 503 }));
    const again = await handle(charge('flaky', { amount: 1, status: 503 }));
    expect([again.status, again.headers.get('idempotent-replayed'), runs()]).toEqual([503, null, 3]);
  });

  it('answers a thrown handler error with a 500 problem and leaves the key retryable', async () => {
    const store = memoryStore();
    let calls = 0;
    const errors: unknown[] = [];
    const handle = idempotency({ store, scope: 'single-tenant', ttlMs: DAY, onError: (e) => errors.push(e) })(
      async () => {
        if (++calls === 1) throw new Error('boom');
        return new Response('ok', { status: 201 });
      },
    );
    const failed = await problemOf(await handle(charge('k1')));
    expect([failed.status, failed.body.type]).toEqual([500, 'urn:idem:problem:internal-error']);
    expect(errors).toEqual([new Error('boom')]);
    const retry = await handle(charge('k1'));
    expect([retry.status, await retry.text(), calls]).toEqual([201, 'ok', 2]);
  });

  it('validates its options by name', () => {
    const store = memoryStore();
    expect(() => idempotency({ store, scope: 'single-tenant', mismatchStatus: 409 as 400 })).toThrow(
      'Expected `mismatchStatus` to be 400 or 422, got 409.',
    );
    expect(() => idempotency({ store, scope: 'single-tenant', maxBodyBytes: 0 })).toThrow(
      'Expected `maxBodyBytes` to be a positive integer, got 0.',
    );
    expect(() => idempotency({ store, scope: 'acct' as never })).toThrow('Expected `scope` to be a function');
    // No scope is no longer one global scope shared by every tenant: the single-tenant choice is said out loud.
    expect(() => idempotency({ store } as never)).toThrow(
      "Expected `scope` to be a function (request) => tenant, or 'single-tenant' for a service with one tenant.",
    );
  });
});

describe("a response over the store's own limit", () => {
  /** The memory store with a declared limit, as DynamoDB declares its own. */
  const limited = (maxResponseBytes: number): IdempotencyStore<undefined> =>
    Object.assign(Object.create(memoryStore()) as IdempotencyStore<undefined>, { maxResponseBytes });

  it('counts the headers as stores encode them (JSON, escapes and framing included), and answers the final too-large problem', async () => {
    const store = limited(400);
    let runs = 0;
    const handle = idempotency({ store, scope: 'single-tenant', ttlMs: DAY })(async () => {
      runs++;
      // Names and values weigh 100 + 12 + 150 + 4 + 16 = 282 bytes; as JSON (each quote escaped) about 460.
      return new Response('x'.repeat(100), {
        status: 201,
        headers: { 'content-type': 'text/plain', link: '"'.repeat(150) },
      });
    });
    const first = await handle(charge('k'));
    const replay = await handle(charge('k'));
    expect([first.status, replay.status, runs]).toEqual([500, 500, 1]);
    expect(((await first.json()) as { type: string }).type).toBe('urn:idem:problem:response-too-large');
  });

  it("commits the work's declared effects with that final answer: the work ran and will not run again", async () => {
    const ledger: string[] = [];
    const handle = idempotency({ store: limited(300), scope: 'single-tenant', ttlMs: DAY })(async (
      _request,
      context,
    ) => {
      context.declare({ effects: () => void ledger.push('charged') });
      return new Response('ok', { status: 201, headers: { 'content-type': 'text/plain; ' + 'p=v; '.repeat(80) } });
    });
    expect((await handle(charge('k'))).status).toBe(500);
    expect((await handle(charge('k'))).status).toBe(500);
    expect(ledger).toEqual(['charged']);
  });
});

describe('the handler context of a keyed request', () => {
  it('survives being spread, assigned and proxied: signal is an own property, as on a keyless request', async () => {
    const seen: unknown[] = [];
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant', ttlMs: DAY })(async (_r, context) => {
      const copies = [
        { ...context },
        Object.assign({}, context),
        new Proxy(context, {}),
        Object.create(context) as typeof context,
      ];
      seen.push(Object.keys(context).includes('signal'), ...copies.map((copy) => copy.signal === context.signal));
      seen.push(context.signal instanceof AbortSignal && !context.signal.aborted);
      return new Response('ok', { status: 201 });
    });
    const keyed = (key?: string) =>
      new Request('http://x/v1/charges', {
        method: 'POST',
        headers: key ? { 'idempotency-key': key } : {},
        body: '{}',
      });
    expect([(await handle(keyed('k1'))).status, (await handle(keyed())).status]).toEqual([201, 201]);
    expect(seen).toEqual([true, true, true, true, true, true, true, true, true, true, true, true]);
  });
});

describe('the first answer is the one replayed', () => {
  it('a reason phrase (statusText) is not kept: a replay has none to give, so the first answer has none either', async () => {
    const handle = idempotency({ store: memoryStore(), ttlMs: DAY, scope: 'single-tenant' })(
      () => new Response('{"id":"ch_1"}', { status: 201, statusText: 'Charged' }),
    );
    const first = await handle(charge('r1'));
    const retry = await handle(charge('r1'));
    expect([first.status, first.statusText, retry.status, retry.statusText, await retry.text()]).toEqual([
      201,
      '',
      201,
      '',
      await first.text(),
    ]);
  });
});
